"""Symbol-table names (no llvm-symbolizer) on programs compiled here: names from .symtab, .dynsym, demangling,
fallbacks, and the refusal of a file whose build id is not the recorded one.

Addresses come from `nm` (the ELF virtual address of each symbol) plus a few
bytes, which is what the producer stores as rel_pc for a call inside it.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from heapscope.model import Frame, Mapping, MappingId
from heapscope.store.writer import ProfileWriter, SymbolWriter
from heapscope.symbolize.profile import symbolize_profile
from heapscope.symbolize.symtab import ElfSymbols, read_ahead, read_elf_symbols, read_elf_symbols_shared

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("cc", "c++", "nm", "strip", "readelf")),
    reason="needs cc, c++ and binutils",
)

C_PROGRAM = r"""
#include <stdlib.h>
static int hidden_helper(int x) { return x * 3 + 1; }
void *leaf_allocator(size_t n) { return malloc(n + (size_t)hidden_helper((int)n)); }
int main(void) { free(leaf_allocator(16)); return 0; }
"""

CXX_PROGRAM = r"""
#include <cstdlib>
namespace ns {
struct Klass { int method(int x); };
int Klass::method(int x) { return x * 2 + static_cast<int>(reinterpret_cast<long>(std::malloc(1)) & 1); }
}
int main() { ns::Klass k; return k.method(3) == 0; }
"""

C_LIBRARY = r"""
#include <stdlib.h>
static int hidden_helper(int x) { return x * 5 + 2; }
void *leaf_allocator(size_t n) { return malloc(n + (size_t)hidden_helper((int)n)); }
"""

BUILD = ["-O0", "-g", "-fno-inline", "-Wl,--build-id=sha1"]


@dataclass(frozen=True)
class Binaries:
    prog: Path  # C executable with .symtab
    cxx: Path  # C++ executable
    lib_stripped: Path  # shared library, stripped: .dynsym only
    prog_stripped: Path  # executable, stripped: no function symbols at all


def _nm(path: Path, *flags: str) -> dict[str, int]:
    out = subprocess.run(["nm", *flags, str(path)], check=True, capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWi":
            syms[parts[2]] = int(parts[0], 16)
    return syms


def _build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, out
    return m.group(1)


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Binaries:
    d = tmp_path_factory.mktemp("symbolize")
    (d / "prog.c").write_text(C_PROGRAM)
    (d / "klass.cc").write_text(CXX_PROGRAM)
    (d / "leaf.c").write_text(C_LIBRARY)
    subprocess.run(["cc", *BUILD, "-o", str(d / "prog"), str(d / "prog.c")], check=True)
    subprocess.run(["c++", *BUILD, "-o", str(d / "klass"), str(d / "klass.cc")], check=True)
    subprocess.run(["cc", *BUILD, "-shared", "-fPIC", "-o", str(d / "libleaf.so"), str(d / "leaf.c")], check=True)
    subprocess.run(["strip", "--strip-all", "-o", str(d / "libleaf-stripped.so"), str(d / "libleaf.so")],
                   check=True)
    subprocess.run(["strip", "--strip-all", "-o", str(d / "prog-stripped"), str(d / "prog")], check=True)
    return Binaries(d / "prog", d / "klass", d / "libleaf-stripped.so", d / "prog-stripped")


def _profile(path: Path, mappings: list[Mapping], frames: list[Frame]) -> sqlite3.Connection:
    w = ProfileWriter(path)
    w.add_mappings(enumerate(mappings, start=1))
    w.add_frames(enumerate(frames, start=1))
    w.close()
    return sqlite3.connect(path)


def _names(db: sqlite3.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM stack_profile_frame ORDER BY id")]


def _mapping(path: Path | str, build_id: str) -> Mapping:
    return Mapping(build_id, 0, 0, 0x1000, 0x9000, 0, str(path))


def test_names_from_symtab_and_demangled_cxx(binaries: Binaries, tmp_path: Path) -> None:
    # GIVEN frames inside functions of a C and a C++ executable, one outside
    # any function, and one named by an earlier pass (names are refreshed)
    c = _nm(binaries.prog)
    cxx = _nm(binaries.cxx)
    db = _profile(tmp_path / "p.db", [
        _mapping(binaries.prog, _build_id(binaries.prog)),
        _mapping(binaries.cxx, _build_id(binaries.cxx)),
    ], [
        Frame(MappingId(1), c["leaf_allocator"] + 4),
        Frame(MappingId(1), c["hidden_helper"] + 1),
        Frame(MappingId(1), c["main"] + 9),
        Frame(MappingId(2), cxx["_ZN2ns5Klass6methodEi"] + 6),
        Frame(MappingId(2), cxx["main"]),
        Frame(MappingId(1), 0x10),  # inside the ELF header: no function there
        Frame(MappingId(1), c["main"] + 1, "old_name"),  # re-named: no symbol set yet
    ])
    # WHEN names are filled in
    result = symbolize_profile(SymbolWriter(db), symbolizer=None)
    # THEN each frame has its function's (demangled) name, or the fallback
    assert _names(db) == [
        "leaf_allocator", "hidden_helper", "main", "ns::Klass::method(int)", "main", "prog+0x10", "main",
    ]
    assert [(m.mapping_id, m.frames, m.named) for m in result.mappings] == [(1, 5, 4), (2, 2, 2)]
    # AND a second run (frames without symbol rows stay open to a better
    # binary later) changes nothing
    before = _names(db)
    symbolize_profile(SymbolWriter(db), symbolizer=None)
    assert _names(db) == before


def test_stripped_files_fall_back_to_dynsym_or_the_address(binaries: Binaries, tmp_path: Path) -> None:
    # GIVEN a stripped library (exports in .dynsym, the static helper gone)
    # and a stripped executable (no defined function symbols at all)
    lib = _nm(binaries.lib_stripped, "-D")
    full = _nm(binaries.lib_stripped.with_name("libleaf.so"))
    prog = _nm(binaries.prog)
    db = _profile(tmp_path / "p.db", [
        _mapping(binaries.lib_stripped, _build_id(binaries.lib_stripped)),
        _mapping(binaries.prog_stripped, _build_id(binaries.prog_stripped)),
    ], [
        Frame(MappingId(1), lib["leaf_allocator"] + 5),
        Frame(MappingId(1), full["hidden_helper"] + 2),
        Frame(MappingId(2), prog["leaf_allocator"] + 4),
    ])
    result = symbolize_profile(SymbolWriter(db), symbolizer=None)
    assert _names(db) == [
        "leaf_allocator",
        f"libleaf-stripped.so+0x{full['hidden_helper'] + 2:x}",
        f"prog-stripped+0x{prog['leaf_allocator'] + 4:x}",
    ]
    lib_result, prog_result = result.mappings
    assert (lib_result.frames, lib_result.named) == (2, 1)
    assert prog_result.named == 0


def test_a_file_with_another_build_id_is_never_used(binaries: Binaries, tmp_path: Path) -> None:
    # GIVEN a mapping recorded with a build id the file on disk does not have
    c = _nm(binaries.prog)
    real = _build_id(binaries.prog)
    recorded = "0123456789abcdef0123456789abcdef01234567"
    db = _profile(tmp_path / "p.db", [
        _mapping(binaries.prog, recorded),
        _mapping(binaries.prog, ""),  # no recorded build id: the file is trusted
        _mapping(binaries.prog, real.upper()),  # hex case does not matter
    ], [
        Frame(MappingId(1), c["leaf_allocator"] + 4),
        Frame(MappingId(2), c["leaf_allocator"] + 4),
        Frame(MappingId(3), c["leaf_allocator"] + 4),
    ])
    result = symbolize_profile(SymbolWriter(db), symbolizer=None)
    assert _names(db) == [f"prog+0x{c['leaf_allocator'] + 4:x}", "leaf_allocator", "leaf_allocator"]
    mismatch = result.mappings[0]
    assert mismatch.outcome == "build_id_mismatch" and real in mismatch.detail and mismatch.named == 0
    assert [m.named for m in result.mappings[1:]] == [1, 1]


def test_missing_files_and_pseudo_mappings(tmp_path: Path) -> None:
    not_elf = tmp_path / "libtext.so"
    not_elf.write_text("this is not an ELF file\n")
    db = _profile(tmp_path / "p.db", [
        _mapping("/nonexistent/dir/libgone.so", "ab"),
        _mapping("[vdso]", ""),
        _mapping("", ""),
        _mapping(not_elf, ""),
    ], [
        Frame(MappingId(1), 0x1A2B),
        Frame(MappingId(2), 0x9F0),
        Frame(MappingId(3), 0x42),
        Frame(MappingId(4), 0x7),
    ])
    result = symbolize_profile(SymbolWriter(db), symbolizer=None)
    assert _names(db) == ["libgone.so+0x1a2b", "[vdso]+0x9f0", "[unknown]+0x42", "libtext.so+0x7"]
    assert [m.named for m in result.mappings] == [0, 0, 0, 0]


def test_symbol_table_lookup_edges(binaries: Binaries) -> None:
    syms = read_elf_symbols(binaries.prog)
    c = _nm(binaries.prog)
    start = c["leaf_allocator"]
    i = syms.starts.index(start)
    end = syms.ends[i]
    assert syms.lookup(start) == "leaf_allocator"
    assert syms.lookup(end - 1) == "leaf_allocator"
    assert syms.lookup(end) != "leaf_allocator"
    assert syms.lookup(0) is None
    assert syms.build_id == _build_id(binaries.prog)


def test_lookup_range_is_where_lookup_gives_the_same_answer() -> None:
    # GIVEN f at [0x100, 0x200) with a nested label at [0x150, 0x160), and g at [0x300, 0x310)
    syms = ElfSymbols.named("x", "", ".symtab", [0x100, 0x150, 0x300], [0x200, 0x160, 0x310], ["f", "label", "g"])
    # THEN each answer comes with the range that gives it, cut at the next symbol
    assert syms.lookup_range(0x120) == ("f", 0x100, 0x150)
    assert syms.lookup_range(0x155) == ("label", 0x150, 0x160)
    assert syms.lookup_range(0x170) is None  # f again, through the nested label: no one range
    assert syms.lookup_range(0x250) == ("", 0x200, 0x300)
    assert syms.lookup_range(0x50) == ("", 0, 0x100)
    assert syms.lookup_range(0x400) == ("", 0x310, 1 << 64)
    # AND inside every range given, lookup agrees at every address
    for addr in range(0, 0x400, 4):
        r = syms.lookup_range(addr)
        if r is not None:
            name, lo, hi = r
            assert lo <= addr < hi
            assert all((syms.lookup(a) or "") == name for a in range(lo, min(hi, 0x500)))


def test_a_table_read_ahead_is_the_one_read_now_unless_the_file_changed(binaries: Binaries, tmp_path: Path) -> None:
    # GIVEN a symbol table read on a thread while the target ran (symbolize/live.py)
    copy = tmp_path / "prog"
    shutil.copy(binaries.prog, copy)
    read_ahead(str(copy))
    # THEN the end's read takes that answer, equal to a read now
    ahead = read_elf_symbols_shared(str(copy))
    now = read_elf_symbols(str(copy))
    assert (ahead.starts, ahead.ends, ahead.raw_names) == (now.starts, now.ends, now.raw_names)
    assert ahead.lookup(_nm(copy)["leaf_allocator"] + 4) == "leaf_allocator"
    # AND a file replaced after the read ahead is read again, not answered from the stale read
    read_ahead(str(copy))
    shutil.copy(binaries.cxx, copy)
    assert read_elf_symbols_shared(str(copy)).lookup(_nm(copy)["main"] + 4) == "main"
    assert "leaf_allocator" not in read_elf_symbols_shared(str(copy)).raw_names
    # AND a missing file fails as read_elf_symbols does
    with pytest.raises(OSError):
        read_elf_symbols_shared(str(tmp_path / "gone"))


DEMANGLE_IN_A_FRESH_PROCESS = r"""
import os, sys
spawned = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system"):
        name = os.path.basename(str(args[0]))
        if name != "ninja":  # an editable install rebuilding on import
            spawned.append(name)
sys.addaudithook(hook)
from heapscope.symbolize.profile import cache_context
from heapscope.symbolize.symtab import demangle, demangler_available
from heapscope.symbolize.locate import Locator
print(demangle("_ZN2ns5Klass6methodEi"), demangle("_Zbad"), demangle("_Z"), demangle("main"), demangle("_Z1fv.cold"))
print(demangler_available())
cache_context(None, Locator(), None)
print(spawned)
"""


def test_demangling_starts_no_process(tmp_path: Path) -> None:
    # GIVEN a fresh producer-side interpreter that records every process it would start
    # WHEN it demangles names and builds a symbol cache's context (both look for the C++ runtime)
    out = subprocess.run([sys.executable, "-c", DEMANGLE_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                         timeout=60, check=True, cwd=tmp_path).stdout.splitlines()
    # THEN names are demangled as c++filt does, invalid ones kept, and no process was started (the
    # cxxfilt package's library search ran /sbin/ldconfig -p twice in the middle of a record)
    assert out == ["ns::Klass::method(int) _Zbad _Z main f() [clone .cold]", "True", "[]"]


def test_a_note_name_without_its_terminator_names_no_build_id(binaries: Binaries, tmp_path: Path) -> None:
    # Found by tests/fuzz (target elf): the build-id note's name "GNU\0" with its NUL overwritten
    # made the ELF library of the time raise an error of its parser's that neither reader caught.
    from heapscope.symbolize.elfinfo import read_elf_info

    data = bytearray(binaries.prog.read_bytes())
    # A note: namesz, descsz, type (3: NT_GNU_BUILD_ID), then the name.
    at = data.find((4).to_bytes(4, "little") + (20).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"GNU\0")
    assert at > 0
    data[at + 15] = ord("S")
    bad = tmp_path / "bad-note"
    bad.write_bytes(bytes(data))
    # The note is not GNU's: the file has no build id, and its symbols read as before
    assert read_elf_info(bad).build_id == ""
    syms = read_elf_symbols(bad)
    assert syms.build_id == "" and syms.starts == read_elf_symbols(binaries.prog).starts
