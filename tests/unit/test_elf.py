"""heapscope.elf: the section headers, names, contents and build id of real files, as pyelftools
reads them; program headers and dynamic symbols; compressed sections; and damaged headers
refused with ElfError, never more."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_SH_TYPE_AMD64, ENUM_SH_TYPE_BASE
from elftools.elf.sections import NoteSection

from heapscope.elf import PT_INTERP, SHT_NOBITS, ElfError, ElfFile
from heapscope.symbolize.elfinfo import NotElfError, read_elf_info
from heapscope.symbolize.preload import has_interpreter
from heapscope.symbolize.symtab import read_elf_symbols

pytestmark = pytest.mark.timeout(120)

LIBS = Path("/usr/lib/x86_64-linux-gnu")
SYSTEM_FILES = [Path("/bin/true"), LIBS / "libc.so.6", LIBS / "libstdc++.so.6", Path(sys.executable).resolve()]

SH_TYPES = {**ENUM_SH_TYPE_BASE, **ENUM_SH_TYPE_AMD64}

PROGRAM = "#include <stdlib.h>\nint main(void) { free(malloc(16)); return 0; }\n"


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small executable with DWARF and a build id."""
    out = tmp_path_factory.mktemp("elf") / "prog"
    src = out.with_suffix(".c")
    src.write_text(PROGRAM)
    subprocess.run(["cc", "-O0", "-g", "-Wl,--build-id=sha1", "-o", str(out), str(src)], check=True, timeout=60)
    return out


def _theirs(path: Path) -> tuple[list[tuple[object, ...]], str]:
    """(name, type number, flags, addr, offset, size, link, entsize) of each section, and the build
    id, as pyelftools reads them."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        rows: list[tuple[object, ...]] = []
        build_id = ""
        for s in elf.iter_sections():
            h = s.header
            kind = h["sh_type"]  # a name pyelftools knows, else the number
            rows.append((s.name, SH_TYPES.get(kind, kind), h["sh_flags"], h["sh_addr"], h["sh_offset"],
                         h["sh_size"], h["sh_link"], h["sh_entsize"]))
            if isinstance(s, NoteSection) and not build_id:
                build_id = next((str(n["n_desc"]) for n in s.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID"), "")
        return rows, build_id


def _ours(path: Path) -> tuple[list[tuple[object, ...]], str]:
    with open(path, "rb") as f:
        elf = ElfFile(f)
        rows: list[tuple[object, ...]] = [(s.name, s.type, s.flags, s.addr, s.offset, s.size, s.link, s.entsize)
                                          for s in elf.sections]
        return rows, elf.build_id()


@pytest.mark.parametrize("path", SYSTEM_FILES, ids=lambda p: p.name)
def test_the_sections_and_build_id_are_pyelftools_own(path: Path) -> None:
    assert _ours(path) == _theirs(path)
    assert _ours(path)[1]  # every one of these has a build id


def test_a_compiled_programs_sections_contents_and_build_id(program: Path) -> None:
    assert _ours(program) == _theirs(program)
    with open(program, "rb") as f, open(program, "rb") as g:
        ours, theirs = ElfFile(f), ELFFile(g)
        for s in ours.sections:
            if s.type != SHT_NOBITS:  # no contents in the file (pyelftools reads what follows)
                assert ours.data(s) == theirs.get_section(s.index).data(), s.name


def test_a_32_bit_file_reads_as_pyelftools_reads_it(tmp_path: Path) -> None:
    # GIVEN an object with two functions, turned into a 32-bit ELF file (x32) by objcopy
    src = tmp_path / "o.c"
    src.write_text("int f(int x) { return x + 1; }\nint g(void) { return 2; }\n")
    obj, obj32 = tmp_path / "o.o", tmp_path / "o32.o"
    subprocess.run(["cc", "-c", "-g", "-o", str(obj), str(src)], check=True, timeout=60)
    subprocess.run(["objcopy", "-O", "elf32-x86-64", str(obj), str(obj32)], check=True, timeout=60)
    with open(obj32, "rb") as f:
        assert ElfFile(f).elfclass == 32
    # THEN its sections are pyelftools', and its symbol table is read in its 32-bit layout
    assert _ours(obj32) == _theirs(obj32)
    syms = read_elf_symbols(obj32)
    assert syms.source == ".symtab" and sorted(syms.lookup(a) or "" for a in syms.starts) == ["f", "g"]


def test_a_compressed_section_is_inflated(program: Path, tmp_path: Path) -> None:
    # GIVEN the program with its DWARF compressed (SHF_COMPRESSED, zlib)
    packed = tmp_path / "packed"
    subprocess.run(["objcopy", "--compress-debug-sections=zlib", str(program), str(packed)], check=True, timeout=60)
    with open(packed, "rb") as f, open(program, "rb") as g:
        elf, plain = ElfFile(f), ElfFile(g)
        info = next(s for s in elf.sections if s.name == ".debug_info")
        assert info.flags & 0x800
        # THEN its contents are the uncompressed program's
        assert elf.data(info) == plain.data(next(s for s in plain.sections if s.name == ".debug_info"))
    assert read_elf_info(packed).has_dwarf


def test_program_headers_and_dynamic_symbols(program: Path) -> None:
    with open(program, "rb") as f:
        elf = ElfFile(f)
        # a dynamically linked program asks for a loader; it calls malloc but does not define it
        assert PT_INTERP in elf.segment_types()
        assert not elf.defines_function("malloc")
    with open(LIBS / "libc.so.6", "rb") as f:
        libc = ElfFile(f)
        assert libc.defines_function("malloc") and libc.defines_function("free")
        assert not libc.defines_function("no_such_function") and not libc.defines_function("mallo")


def test_damaged_section_headers_do_not_hide_the_program_headers(program: Path, tmp_path: Path) -> None:
    # GIVEN a program whose section table is said to lie far past the end of the file
    bad = _patched(program, tmp_path / "bad", 0x28, "<Q", 1 << 40)
    with open(bad, "rb") as f:
        elf = ElfFile(f)
        # THEN its program headers still say it needs a loader; its sections are refused
        assert PT_INTERP in elf.segment_types()
        with pytest.raises(ElfError):
            elf.sections  # noqa: B018
    assert has_interpreter(str(bad))


def test_a_program_that_defines_its_own_malloc_exports_it(tmp_path: Path) -> None:
    # GIVEN a program with a malloc of its own (the linker exports it: libc refers to malloc);
    # attaching refuses such a program (producer/attach.py)
    src = tmp_path / "own.c"
    src.write_text("#include <stddef.h>\nstatic char pool[1 << 16]; static size_t used;\n"
                   "void *malloc(size_t n) { void *p = pool + used; used += (n + 15) & ~(size_t)15; return p; }\n"
                   "void free(void *p) { (void)p; }\nint main(void) { return malloc(8) == NULL; }\n")
    exe = tmp_path / "own"
    subprocess.run(["cc", "-O0", "-o", str(exe), str(src)], check=True, timeout=60)
    with open(exe, "rb") as f:
        assert ElfFile(f).defines_function("malloc")


def _patched(path: Path, out: Path, at: int, fmt: str, value: int) -> Path:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, at, value)
    out.write_bytes(bytes(data))
    return out


def _shoff(path: Path) -> tuple[int, int, int]:
    """(e_shoff, e_shentsize, e_shnum) of a 64-bit little-endian file."""
    data = path.read_bytes()
    return struct.unpack_from("<Q", data, 0x28)[0], *struct.unpack_from("<HH", data, 0x3A)


def test_more_sections_than_the_header_counts_are_found_in_section_0(program: Path, tmp_path: Path) -> None:
    # GIVEN e_shnum 0 and the count in section 0's sh_size (how a file of 0xff00+ sections says it)
    shoff, _size, count = _shoff(program)
    moved = _patched(program, tmp_path / "a", 0x3C, "<H", 0)
    moved = _patched(moved, tmp_path / "b", shoff + 32, "<Q", count)
    # THEN the same sections (but section 0's own size, which now holds the count)
    ours, theirs = _ours(moved)[0], _ours(program)[0]
    assert len(ours) == count and ours[1:] == theirs[1:]


@pytest.mark.parametrize("damage", ["truncated", "magic", "section past the end", "section count", "header size",
                                    "compression"])
def test_damaged_headers_are_refused_with_one_error(program: Path, tmp_path: Path, damage: str) -> None:
    shoff, size, count = _shoff(program)
    bad = tmp_path / "bad"
    if damage == "truncated":
        bad.write_bytes(program.read_bytes()[:shoff + size * 2])
    elif damage == "magic":
        _patched(program, bad, 0, "<I", 0x464C457E)
    elif damage == "section past the end":
        _patched(program, bad, shoff + size * (count - 1) + 32, "<Q", 1 << 62)
    elif damage == "section count":
        _patched(program, bad, 0x3C, "<H", 0xFFFE)
    elif damage == "header size":
        _patched(program, bad, 0x3A, "<H", 8)
    else:  # a compressed section whose header claims 2**40 bytes
        packed = tmp_path / "packed"
        subprocess.run(["objcopy", "--compress-debug-sections=zlib", str(program), str(packed)], check=True,
                       timeout=60)
        with open(packed, "rb") as f:
            info = next(s for s in ElfFile(f).sections if s.name == ".debug_info")
        _patched(packed, bad, info.offset + 8, "<Q", 1 << 40)
        with open(bad, "rb") as f, pytest.raises(ElfError):
            elf = ElfFile(f)
            elf.data(next(s for s in elf.sections if s.name == ".debug_info"))
        return
    with open(bad, "rb") as f, pytest.raises(ElfError):
        ElfFile(f).sections  # noqa: B018  # read when first asked
    with pytest.raises(NotElfError):
        read_elf_info(bad)
