"""The parts of an ELF file heapscope reads: its class, byte order and machine, its section
headers and their names, a section's bytes, its GNU build id, whether it asks for a dynamic
loader (PT_INTERP) and whether it defines a function in its dynamic symbols.

Read with `struct` from the file header down, every offset and size checked against the
file's length before anything is read. pyelftools, which did this before, took 40-80 ms of CPU
to import in every recording that located a module or named a frame from a symbol table: most
of `record`'s end after a short program's exit.

May import: nothing of heapscope.
"""

from __future__ import annotations

import os
import struct
import zlib
from operator import itemgetter

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import BinaryIO

SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHF_COMPRESSED = 0x800
PT_INTERP = 3
ET_EXEC, ET_DYN = 2, 3
STT_FUNC, STT_GNU_IFUNC = 2, 10
EM_ARM = 40
NT_GNU_BUILD_ID = 3
_SHN_XINDEX = 0xFFFF
_ELFCOMPRESS_ZLIB = 1
MAX_SECTIONS = 1 << 20  # a header claiming more is not a file we can use
MAX_INFLATED = 1 << 30  # a compressed section's stated size beyond this is damage
MAX_SEGMENTS = 4096

# e_type .. e_shstrndx, after e_ident (16 bytes); a section header; a compression header
_HEADER = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_SECTION = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
_CHDR = {1: "III", 2: "IIQQ"}
# A symbol: 32-bit name, value, size, info, other, shndx; 64-bit name, info, other, shndx, value,
# size; and where (name, info, shndx, value, size) are in each.
_SYMBOL = {1: ("IIIBBH", itemgetter(0, 3, 5, 1, 2)), 2: ("IBBHQQ", itemgetter(0, 1, 3, 4, 5))}


class ElfError(ValueError):
    """Not an ELF file, or one whose headers do not hold together."""


class Section:
    """One section header, with its name from the section name table."""

    __slots__ = ("index", "name", "type", "flags", "addr", "offset", "size", "link", "entsize")

    def __init__(self, index: int, name: str, fields: tuple[int, ...]) -> None:
        self.index = index
        self.name = name
        _name, self.type, self.flags, self.addr, self.offset, self.size, self.link, _info, _align, self.entsize = fields


class ElfFile:
    """An open ELF file's headers: byte order, class, machine, type; its sections and program
    headers when first asked (a damaged section table does not hide the program headers).
    Raises ElfError."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.file_size = os.fstat(f.fileno()).st_size
        ident = self._read(0, 16)
        if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError("not an ELF file")
        self.elfclass = 32 if ident[4] == 1 else 64
        self.little_endian = ident[5] == 1
        self._order = "<" if self.little_endian else ">"
        header = struct.Struct(self._order + _HEADER[ident[4]])
        (self.type, self.machine, _version, _entry, self._phoff, self._shoff, _flags, _ehsize, self._phentsize,
         self._phnum, self._shentsize, self._shnum, self._shstrndx) = header.unpack(self._read(16, header.size))
        self._sections: list[Section] | None = None

    @property
    def sections(self) -> list[Section]:
        """Every section header, in order, with its name."""
        if self._sections is None:
            self._sections = self._read_sections()
        return self._sections

    def _read_sections(self) -> list[Section]:
        entry = struct.Struct(self._order + _SECTION[1 if self.elfclass == 32 else 2])
        shoff, shentsize, shnum, shstrndx = self._shoff, self._shentsize, self._shnum, self._shstrndx
        if shoff == 0:
            return []  # no section headers (a stripped-to-the-bone file): nothing to read
        if shentsize < entry.size:
            raise ElfError(f"section headers of {shentsize} bytes")
        first = entry.unpack(self._read(shoff, entry.size))
        if shnum == 0:  # more than 0xff00 sections: the count is in section 0's sh_size
            shnum = first[5]
        if shstrndx == _SHN_XINDEX:
            shstrndx = first[6]
        if shnum > MAX_SECTIONS:
            raise ElfError(f"{shnum} sections")
        table = self._read(shoff, shnum * shentsize)
        rows = [entry.unpack_from(table, i * shentsize) for i in range(shnum)]
        for i, row in enumerate(rows):
            if row[1] != SHT_NOBITS and (row[4] > self.file_size or row[5] > self.file_size - row[4]):
                raise ElfError(f"section {i} lies past the end of the file")
        names = b""
        if 0 < shstrndx < shnum and rows[shstrndx][1] != SHT_NOBITS:
            names = self._read(rows[shstrndx][4], rows[shstrndx][5])
        return [Section(i, _cstring(names, row[0]), row) for i, row in enumerate(rows)]

    def _read(self, offset: int, size: int) -> bytes:
        if offset > self.file_size or size > self.file_size - offset:
            raise ElfError(f"{size} bytes at {offset} lie past the end of the file")
        self._f.seek(offset)
        data = self._f.read(size)
        if len(data) != size:
            raise ElfError(f"{size} bytes at {offset}: the file ended")
        return data

    def data(self, section: Section) -> bytes:
        """The section's contents, inflated when it is compressed (zlib; other kinds: ElfError)."""
        if section.type == SHT_NOBITS:
            return b""
        raw = self._read(section.offset, section.size)
        if not section.flags & SHF_COMPRESSED:
            return raw
        chdr = struct.Struct(self._order + _CHDR[1 if self.elfclass == 32 else 2])
        if len(raw) < chdr.size:
            raise ElfError(f"section {section.name or section.index}: no room for its compression header")
        fields = chdr.unpack_from(raw)
        kind, size = fields[0], fields[1] if self.elfclass == 32 else fields[2]
        if kind != _ELFCOMPRESS_ZLIB or size > MAX_INFLATED:
            raise ElfError(f"section {section.name or section.index}: compression {kind}, {size} bytes")
        try:
            out = zlib.decompressobj().decompress(raw[chdr.size:], size)
        except zlib.error as e:
            raise ElfError(f"section {section.name or section.index}: {e}") from e
        if len(out) != size:
            raise ElfError(f"section {section.name or section.index}: {len(out)} bytes inflated, not {size}")
        return out

    def segment_types(self) -> list[int]:
        """p_type of each program header, in order."""
        if self._phnum > MAX_SEGMENTS or (self._phnum and self._phentsize < 4):
            raise ElfError(f"{self._phnum} program headers of {self._phentsize} bytes")
        table = self._read(self._phoff, self._phnum * self._phentsize)
        return [struct.unpack_from(self._order + "I", table, i * self._phentsize)[0] for i in range(self._phnum)]

    def linked_data(self, section: Section) -> bytes:
        """The contents of the section `section` links to (a symbol table's strings); b"" when none."""
        return self.data(self.sections[section.link]) if section.link < len(self.sections) else b""

    def symbols(self, table: Section) -> Iterator[tuple[int, int, int, int, int]]:
        """(name offset, info, section index, value, size) of each entry of a symbol table, decoded
        in bulk (a big C++ binary has several 100k)."""
        data = self.data(table)
        layout, pick = _SYMBOL[1 if self.elfclass == 32 else 2]
        entry = struct.Struct(self._order + layout)
        stride = table.entsize or entry.size
        count = (len(data) - entry.size) // stride + 1 if len(data) >= entry.size else 0
        rows = (entry.iter_unpack(data[:count * entry.size]) if stride == entry.size
                else (entry.unpack_from(data, k * stride) for k in range(count)))
        return map(pick, rows)

    def defines_function(self, name: str) -> bool:
        """Whether the dynamic symbol table defines a function (or an ifunc) called `name`."""
        wanted = name.encode() + b"\0"
        for table in self.sections:
            if table.type == SHT_DYNSYM:
                names = self.linked_data(table)
                for name_at, info, shndx, _value, _size in self.symbols(table):
                    if shndx and (info & 0xF) in (STT_FUNC, STT_GNU_IFUNC) and \
                            names[name_at:name_at + len(wanted)] == wanted:
                        return True
        return False

    def build_id(self) -> str:
        """The GNU build id of the first note section that holds one, lower-case hex; '' if none."""
        for section in self.sections:
            if section.type == SHT_NOTE and (found := _note_build_id(self.data(section), self._order)):
                return found
        return ""


def _note_build_id(notes: bytes, order: str) -> str:
    """The NT_GNU_BUILD_ID of a note section's contents (name `GNU`), hex; '' when none.
    Each note: namesz, descsz, type (4 bytes each), then the name and the descriptor, each
    padded to 4 bytes."""
    head = struct.Struct(order + "III")
    at = 0
    while at + head.size <= len(notes):
        namesz, descsz, kind = head.unpack_from(notes, at)
        name_at = at + head.size
        desc_at = name_at + (namesz + 3) // 4 * 4
        end = desc_at + (descsz + 3) // 4 * 4
        if desc_at + descsz > len(notes):
            return ""
        if kind == NT_GNU_BUILD_ID and notes[name_at:name_at + namesz].rstrip(b"\0") == b"GNU":
            return notes[desc_at:desc_at + descsz].hex()
        at = end
    return ""


def _cstring(table: bytes, offset: int) -> str:
    if offset >= len(table):
        return ""
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")
