"""What the locator needs to know about one ELF file, read from its headers only.

Owns: build id, "has DWARF", and the `.gnu_debuglink` (file name + CRC) of a
file, plus the CRC32 that debuglink checks use. Reads section headers and two
small sections; never the symbol tables or the DWARF itself, so that scanning
a directory tree for build ids (`--index`) stays cheap.
"""

from __future__ import annotations

import os
import struct
import zlib

from elftools.common.exceptions import ELFError

from heapscope.records import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:  # pyelftools' ELF classes cost ~30 ms to import: loaded when a file is read
    from pathlib import Path
    from typing import Any

    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import Section

_ELF_MAGIC = b"\x7fELF"
_DWARF_SECTIONS = (".debug_info", ".zdebug_info")


class NotElfError(Exception):
    """The file is not an ELF object, or its headers cannot be read."""


class ElfInfo(Record, frozen=True):
    path: str
    build_id: str  # hex, "" when the file has no NT_GNU_BUILD_ID note
    has_dwarf: bool  # a .debug_info with contents (not NOBITS)
    has_symtab: bool  # .symtab or .dynsym present
    debuglink: str  # file name from .gnu_debuglink, "" when none
    debuglink_crc: int  # CRC32 of the debug file the link names


# What pyelftools raises for a file it cannot read: its own ELFError, and for
# sizes it takes from the file as told (a section's sh_size, a compressed
# section's ch_size near 2**63) OverflowError or MemoryError from read().
ELF_READ_ERRORS = (ELFError, struct.error, ValueError, IndexError, OverflowError, MemoryError)


def read_errors() -> tuple[type[Exception], ...]:
    """ELF_READ_ERRORS and the parser's own ConstructError (a note whose name lacks its
    terminator raises ArrayError: tests/fuzz, target elf). Imported here, as ELFFile is:
    elftools.construct costs ~18 ms, which a path that reads no file must not pay."""
    from elftools.construct.core import ConstructError

    return (*ELF_READ_ERRORS, ConstructError)


def check_section_bounds(elf: ELFFile, file_size: int) -> None:
    """Raise ELFError when a section's contents would lie past the end of the file.

    pyelftools reads sh_size bytes when asked for a section's data: checked
    here first, a corrupt size is an unreadable file rather than a
    multi-gigabyte read.
    """
    for i, header in enumerate(section_headers(elf)):
        if header["sh_type"] == "SHT_NOBITS":
            continue
        offset, size = header["sh_offset"], header["sh_size"]
        if offset > file_size or size > file_size - offset:
            raise ELFError(f"section {section_name(elf, header) or i} lies past the end of the file")


def section_headers(elf: ELFFile) -> list[Any]:
    """Every section header, parsed once. pyelftools' iter_sections() builds a section object
    for each (a hash section's whole table parsed on the way): ~2/3 of the time of reading
    a big binary's symbols. Its header reader is a private method, used while it exists."""
    get_header = getattr(elf, "_get_section_header", None)
    if get_header is None:
        return [s.header for s in elf.iter_sections()]
    return [get_header(i) for i in range(elf.num_sections())]


def section_name(elf: ELFFile, header: Any) -> str:
    """The name of the section of `header` (from the section name table)."""
    get_name = getattr(elf, "_get_section_name", None)
    if get_name is None:
        return next((str(s.name) for s in elf.iter_sections() if s.header == header), "")
    return str(get_name(header))


def is_elf(path: str | Path) -> bool:
    """True when `path` is a regular file starting with the ELF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == _ELF_MAGIC
    except OSError:
        return False


def read_elf_info(path: str | Path) -> ElfInfo:
    """Raises OSError when the file cannot be opened, NotElfError when it is not ELF."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        if f.read(4) != _ELF_MAGIC:
            raise NotElfError(f"{path}: not an ELF file")
        f.seek(0)
        try:
            elf = ELFFile(f)
            check_section_bounds(elf, os.fstat(f.fileno()).st_size)
            build_id = ""
            has_dwarf = has_symtab = False
            link, crc = "", 0
            for i, header in enumerate(section_headers(elf)):
                kind = header["sh_type"]
                if kind == "SHT_NOTE":
                    if not build_id:
                        build_id = note_build_id(elf.get_section(i))
                    continue
                if kind in ("SHT_SYMTAB", "SHT_DYNSYM"):
                    has_symtab = True
                    continue
                name = section_name(elf, header)
                if name in _DWARF_SECTIONS and kind != "SHT_NOBITS" and header["sh_size"] > 0:
                    has_dwarf = True
                elif name == ".gnu_debuglink":
                    link, crc = _parse_debuglink(elf.get_section(i).data(), elf.little_endian)
        except read_errors() as e:
            raise NotElfError(f"{path}: not a readable ELF file ({e})") from e
    return ElfInfo(str(path), build_id, has_dwarf, has_symtab, link, crc)


def _parse_debuglink(data: bytes, little_endian: bool) -> tuple[str, int]:
    """`.gnu_debuglink` = file name, NUL, padding to 4 bytes, CRC32 (file byte order)."""
    end = data.find(b"\0")
    if end <= 0:
        return "", 0
    crc_at = (end + 4) & ~3
    if crc_at + 4 > len(data):
        return "", 0
    (crc,) = struct.unpack_from("<I" if little_endian else ">I", data, crc_at)
    return data[:end].decode("utf-8", "replace"), crc


def file_crc32(path: str | Path) -> int:
    """The CRC32 `.gnu_debuglink` stores for a debug file (zlib's polynomial, whole file)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc & 0xFFFFFFFF


def note_build_id(section: Section) -> str:
    """The GNU build id held by a note section, lower-case hex; '' when it holds none."""
    from elftools.elf.sections import NoteSection

    if not isinstance(section, NoteSection):
        return ""
    for note in section.iter_notes():
        if note["n_type"] == "NT_GNU_BUILD_ID":
            return str(note["n_desc"]).lower()
    return ""
