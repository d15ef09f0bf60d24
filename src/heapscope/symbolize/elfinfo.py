"""What the locator needs to know about one ELF file, read from its headers only.

Owns: build id, "has DWARF", and the `.gnu_debuglink` (file name + CRC) of a
file, plus the CRC32 that debuglink checks use. Reads section headers and two
small sections; never the symbol tables or the DWARF itself, so that scanning
a directory tree for build ids (`--index`) stays cheap.
"""

from __future__ import annotations

import struct
import zlib

from heapscope.elf import SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB, ElfError, ElfFile
from heapscope.records import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from pathlib import Path

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


def is_elf(path: str | Path) -> bool:
    """True when `path` is a regular file starting with the ELF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == _ELF_MAGIC
    except OSError:
        return False


def read_elf_info(path: str | Path) -> ElfInfo:
    """Raises OSError when the file cannot be opened, NotElfError when it is not ELF."""
    with open(path, "rb") as f:
        if f.read(4) != _ELF_MAGIC:
            raise NotElfError(f"{path}: not an ELF file")
        try:
            elf = ElfFile(f)
            build_id = elf.build_id()
            has_dwarf = has_symtab = False
            link, crc = "", 0
            for section in elf.sections:
                if section.type in (SHT_SYMTAB, SHT_DYNSYM):
                    has_symtab = True
                elif section.name in _DWARF_SECTIONS and section.type != SHT_NOBITS and section.size > 0:
                    has_dwarf = True
                elif section.name == ".gnu_debuglink":
                    link, crc = _parse_debuglink(elf.data(section), elf.little_endian)
        except ElfError as e:
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
