"""symbolize.profile.symbolize_profile on profiles written by the real ProfileWriter, with
frames at real addresses of programs compiled here: inline chains into
stack_profile_symbol, Perfetto's symbol-set semantics, libc through Debian's debug
files, and the symbol-table fallback without llvm-symbolizer."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from symbolize_progs import (
    INLINED_SOURCE,
    LINE_INNER,
    LINE_MIDDLE,
    LINE_OUTER,
    OTHER_SOURCE,
    build_id,
    build_id_path,
    compile_cxx,
    malloc_call_pc,
    needs_toolchain,
    split_debug,
)

from heapscope.model import Frame, Mapping, MappingId
from heapscope.store.writer import ProfileWriter, SymbolWriter
from heapscope.symbolize.llvm import find_llvm_symbolizer
from heapscope.symbolize.profile import symbolize_profile

LLVM = find_llvm_symbolizer()
needs_llvm = pytest.mark.skipif(LLVM is None, reason="llvm-symbolizer not installed (Debian package `llvm`)")
pytestmark = [needs_toolchain, pytest.mark.timeout(120)]

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _profile(path: Path, mappings: list[Mapping], frames: list[Frame]) -> sqlite3.Connection:
    w = ProfileWriter(path)
    w.add_mappings(enumerate(mappings, start=1))
    w.add_frames(enumerate(frames, start=1))
    w.close()
    return sqlite3.connect(path)


def _mapping(path: Path | str, bid: str) -> Mapping:
    return Mapping(bid, 0, 0, 0x1000, 0x9000, 0, str(path))


def _symbols(db: sqlite3.Connection, frame_id: int) -> list[tuple[int, str, str, int, int]]:
    """(id - symbol_set_id, name, basename of file, line, inlined) of a frame's symbol set, by id."""
    rows = db.execute(
        "SELECT s.id - s.symbol_set_id, s.name, s.source_file, s.line_number, s.inlined"
        " FROM stack_profile_symbol s JOIN stack_profile_frame f ON f.symbol_set_id = s.symbol_set_id"
        " WHERE f.id = ? ORDER BY s.id", (frame_id,)).fetchall()
    return [(d, n, Path(f).name if f else "", ln, i) for d, n, f, ln, i in rows]


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_cxx(INLINED_SOURCE, tmp_path_factory.mktemp("profile") / "prog")


@needs_llvm
def test_inlined_frame_gets_one_symbol_row_per_function(prog: Path, tmp_path: Path) -> None:
    # GIVEN a frame at outer_fn's call of malloc, which two inlined helpers made
    pc = malloc_call_pc(prog)
    db = _profile(tmp_path / "p.db", [_mapping(prog, build_id(prog))], [Frame(MappingId(1), pc)])
    # WHEN the profile is symbolized
    report = symbolize_profile(SymbolWriter(db), debug_roots=[])
    # THEN the frame has three rows, innermost first with id == symbol_set_id, the outer one not inlined
    assert _symbols(db, 1) == [
        (0, "inner_alloc", "prog.cc", LINE_INNER, 1),
        (1, "middle_alloc", "prog.cc", LINE_MIDDLE, 1),
        (2, "app::outer_fn(unsigned long)", "prog.cc", LINE_OUTER, 0),
    ]
    # AND the frame is named after the outermost function
    assert db.execute("SELECT name FROM stack_profile_frame WHERE id = 1").fetchone()[0] == (
        "app::outer_fn(unsigned long)")
    assert [(m.outcome, m.frames, m.with_lines, m.named) for m in report.mappings] == [("symbolized", 1, 1, 1)]
    assert report.problems() == []
    # AND a second run has nothing left to do and adds no rows
    assert symbolize_profile(SymbolWriter(db), debug_roots=[]).frames == 0
    assert db.execute("SELECT COUNT(*) FROM stack_profile_symbol").fetchone()[0] == 3


@needs_llvm
def test_separate_debug_file_under_binary_path(prog: Path, tmp_path: Path) -> None:
    # GIVEN the profile recorded a stripped binary; its debug file is in DIR/.build-id
    split = split_debug(prog, tmp_path / "split")
    sym = tmp_path / "sym"
    split.debug.rename(build_id_path(sym, split.build_id))
    pc = malloc_call_pc(prog)
    db = _profile(tmp_path / "p.db", [_mapping(split.stripped, split.build_id)], [Frame(MappingId(1), pc)])
    # WHEN symbolized without the binary path, the frame gets only the fallback name
    first = symbolize_profile(SymbolWriter(db), debug_roots=[])
    assert first.mappings[0].outcome == "no_debug_info"
    assert db.execute("SELECT name, symbol_set_id FROM stack_profile_frame").fetchone() == (f"prog+0x{pc:x}", None)
    # WHEN symbolized again with it
    second = symbolize_profile(SymbolWriter(db), [str(sym)], debug_roots=[])
    # THEN the frame is upgraded to the full inline chain
    assert second.mappings[0].file == str(build_id_path(sym, split.build_id))
    assert [s[1] for s in _symbols(db, 1)] == ["inner_alloc", "middle_alloc", "app::outer_fn(unsigned long)"]


@needs_llvm
def test_mismatching_build_id_is_refused_and_reported(prog: Path, tmp_path: Path) -> None:
    # GIVEN the recorded path now holds a rebuild of the program
    other = compile_cxx(OTHER_SOURCE, tmp_path / "prog")
    db = _profile(tmp_path / "p.db", [_mapping(other, build_id(prog))], [Frame(MappingId(1), malloc_call_pc(prog))])
    # WHEN symbolized
    report = symbolize_profile(SymbolWriter(db), debug_roots=[])
    # THEN nothing of the rebuild is used: no symbols, the fallback name, the mismatch reported
    assert db.execute("SELECT COUNT(*) FROM stack_profile_symbol").fetchone()[0] == 0
    assert db.execute("SELECT name FROM stack_profile_frame").fetchone()[0].startswith("prog+0x")
    (m,) = report.problems()
    assert (m.outcome, m.build_id) == ("build_id_mismatch", build_id(prog))
    assert build_id(other) in m.detail


def test_without_llvm_symbolizer_names_come_from_the_symbol_table(prog: Path, tmp_path: Path) -> None:
    # GIVEN frames of the program, and no llvm-symbolizer
    pc = malloc_call_pc(prog)
    db = _profile(tmp_path / "p.db", [_mapping(prog, build_id(prog)), _mapping("[vdso]", "")],
                  [Frame(MappingId(1), pc), Frame(MappingId(2), 0x10), Frame(MappingId(1), 0, "FILTERED")])
    # WHEN symbolized
    report = symbolize_profile(SymbolWriter(db), debug_roots=[], symbolizer=None)
    # THEN the frame has its function name from .symtab, no symbol rows; [vdso] the fallback; FILTERED stays
    assert [r[0] for r in db.execute("SELECT name FROM stack_profile_frame ORDER BY id")] == [
        "app::outer_fn(unsigned long)", "[vdso]+0x10", "FILTERED"]
    assert db.execute("SELECT COUNT(*) FROM stack_profile_symbol").fetchone()[0] == 0
    assert [(m.outcome, m.named) for m in report.mappings] == [("no_symbolizer", 1), ("not_a_file", 0)]


@needs_llvm
@pytest.mark.skipif(not Path(LIBC).exists(), reason=f"no {LIBC}")
def test_libc_symbolized_from_debian_debug_files(tmp_path: Path) -> None:
    # GIVEN a frame inside libc's malloc, and Debian's libc6-dbg files in /usr/lib/debug
    bid = build_id(Path(LIBC))
    if not Path(f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug").exists():
        pytest.skip("libc6-dbg is not installed (its /usr/lib/debug/.build-id file for libc is missing)")
    from heapscope.symbolize.symtab import read_elf_symbols

    libc_symbols = read_elf_symbols(LIBC)
    malloc_at = libc_symbols.starts[libc_symbols.raw_names.index("malloc")]
    db = _profile(tmp_path / "p.db", [_mapping(LIBC, bid)], [Frame(MappingId(1), malloc_at + 4)])
    # WHEN symbolized with the default debug root
    report = symbolize_profile(SymbolWriter(db))
    # THEN the frame has a source file and line from the debug file
    assert report.mappings[0].file.startswith("/usr/lib/debug/.build-id/")
    (_, name, file, line, inlined) = _symbols(db, 1)[-1]
    assert name in ("malloc", "__libc_malloc")
    assert file == "malloc.c" and line > 0 and inlined == 0


def test_the_symbolizer_reads_the_mappings_it_asks_for(tmp_path: Path) -> None:
    """`record` symbolizes as each process ends: it read every mapping each time (a build's
    ~1,100, 66 times); now those of its frames, in lists of at most MAX_IN_LIST ids."""
    from heapscope.store.values import MAX_IN_LIST

    w = ProfileWriter(tmp_path / "p.db")
    w.add_mappings([(i, Mapping(f"{i:040x}".upper(), 0, 0, 0x1000 * i, 0x1000 * i + 0x800, 0, f"/lib/m{i}.so"))
                    for i in range(1, 2 * MAX_IN_LIST + 2)])
    symbols = w.symbols()
    assert symbols.mappings([3, 7, 99999]) == {3: ("/lib/m3.so", f"{3:040x}"), 7: ("/lib/m7.so", f"{7:040x}")}
    many = list(range(2, 2 * MAX_IN_LIST + 2))
    assert symbols.mappings(many) == {i: v for i, v in symbols.mappings().items() if i != 1}
    assert symbols.mappings([]) == {}
    w.close()
