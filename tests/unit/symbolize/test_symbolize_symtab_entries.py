"""The function table made from a symbol table's raw entries (symbolize/_symtab.c), on tables
written here byte by byte: both ELF classes and byte orders, aliases of one address, ends of
size-0 symbols, Thumb addresses, padded and damaged entry sizes."""

from __future__ import annotations

import struct

from heapscope.symbolize._symtab import functions

FUNC, IFUNC, OBJECT = 2, 10, 1
LOCAL, GLOBAL, WEAK = 0, 1, 2
TOP = 1 << 64


def _table(entries: list[tuple[int, int, int, int, int]], is64: bool = True, order: str = "<",
           pad: int = 0) -> bytes:
    """Entries of (name offset, binding << 4 | type, section index, value, size) as the class lays them."""
    out = b""
    for name, info, shndx, value, size in entries:
        if is64:
            out += struct.pack(order + "IBBHQQ", name, info, 0, shndx, value, size)
        else:
            out += struct.pack(order + "IIIBBH", name, value, size, info, 0, shndx)
        out += b"\0" * pad
    return out


STRTAB = b"\0malloc\0__libc_malloc\0_malloc\0free\0label\0tail\0last\0"
NAME = {n.decode(): STRTAB.index(b"\0" + n + b"\0") + 1 for n in STRTAB.strip(b"\0").split(b"\0")}


def _info(binding: int, kind: int = FUNC) -> int:
    return binding << 4 | kind


def test_one_alias_per_address_the_sized_then_the_most_visible_then_fewest_underscores() -> None:
    # GIVEN four names at 0x1000: an unsized global, a sized weak `__libc_malloc`, a sized weak
    # `_malloc` and a sized weak `malloc`; two at 0x2000: a sized local, then a sized global
    entries = [
        (NAME["free"], _info(GLOBAL), 1, 0x1000, 0),
        (NAME["__libc_malloc"], _info(WEAK), 1, 0x1000, 0x40),
        (NAME["_malloc"], _info(WEAK), 1, 0x1000, 0x40),
        (NAME["malloc"], _info(WEAK), 1, 0x1000, 0x40),
        (NAME["label"], _info(LOCAL), 1, 0x2000, 0x10),
        (NAME["tail"], _info(GLOBAL), 1, 0x2000, 0x10),
    ]
    starts, ends, offsets = functions(_table(entries), STRTAB, True, True, 0, False, {1: 0x3000})
    # THEN a sized symbol beats an unsized one, a weak `malloc` its underscored aliases, a global a local
    assert starts == [0x1000, 0x2000]
    assert ends == [0x1040, 0x2010]
    assert offsets == [NAME["malloc"], NAME["tail"]]


def test_a_tie_keeps_the_first_in_the_table() -> None:
    entries = [(NAME["tail"], _info(GLOBAL), 1, 0x10, 8), (NAME["last"], _info(GLOBAL), 1, 0x10, 8)]
    assert functions(_table(entries), STRTAB, True, True, 0, False, {})[2] == [NAME["tail"]]


def test_only_defined_named_functions_count_and_come_sorted() -> None:
    # GIVEN an object, an undefined function, a nameless one, an ifunc and a function, out of order
    entries = [
        (NAME["last"], _info(GLOBAL), 1, 0x900, 4),
        (NAME["free"], _info(GLOBAL, OBJECT), 1, 0x100, 4),
        (NAME["malloc"], _info(GLOBAL), 0, 0x200, 4),
        (0, _info(GLOBAL), 1, 0x300, 4),
        (NAME["tail"], _info(GLOBAL, IFUNC), 1, 0x400, 4),
    ]
    starts, _ends, offsets = functions(_table(entries), STRTAB, True, True, 0, False, {})
    assert starts == [0x400, 0x900]
    assert offsets == [NAME["tail"], NAME["last"]]


def test_a_size_0_symbol_ends_at_the_next_start_or_its_section_end() -> None:
    # GIVEN size-0 symbols: one followed by another, one at the end of section 1 (ends 0x180),
    # one in section 2 with no end known, and one with an absolute address (SHN_ABS)
    entries = [
        (NAME["free"], _info(GLOBAL), 1, 0x100, 0),
        (NAME["label"], _info(GLOBAL), 1, 0x140, 0),
        (NAME["tail"], _info(GLOBAL), 2, 0x200, 0),
        (NAME["last"], _info(GLOBAL), 0xFFF1, 0x300, 0),
    ]
    starts, ends, _ = functions(_table(entries), STRTAB, True, True, 0, False, {1: 0x180})
    assert starts == [0x100, 0x140, 0x200, 0x300]
    assert ends == [0x140, 0x180, 0x300, TOP]


def test_an_end_past_the_address_space_is_the_true_sum() -> None:
    entries = [(NAME["last"], _info(GLOBAL), 1, TOP - 0x10, 0x20)]
    assert functions(_table(entries), STRTAB, True, True, 0, False, {})[1] == [TOP + 0x10]


def test_32_bit_big_endian_entries_and_thumb_addresses() -> None:
    # GIVEN an ARM table (big-endian, 32-bit) whose Thumb functions have bit 0 set
    entries = [(NAME["malloc"], _info(GLOBAL), 1, 0x8001, 0x20), (NAME["free"], _info(GLOBAL), 1, 0x8041, 0)]
    data = _table(entries, is64=False, order=">")
    starts, ends, offsets = functions(data, STRTAB, False, False, 0, True, {1: 0x9000})
    assert starts == [0x8000, 0x8040]
    assert ends == [0x8020, 0x9000]
    assert offsets == [NAME["malloc"], NAME["free"]]


def test_padded_entries_and_a_truncated_last_one() -> None:
    # GIVEN entries 8 bytes apart more than their size (the section's entsize), the last cut short
    entries = [(NAME["malloc"], _info(GLOBAL), 1, 0x10, 4), (NAME["free"], _info(GLOBAL), 1, 0x20, 4)]
    data = _table(entries, pad=8)
    assert functions(data, STRTAB, True, True, 32, False, {})[0] == [0x10, 0x20]
    assert functions(data[:-9], STRTAB, True, True, 32, False, {})[0] == [0x10]
    assert functions(b"", STRTAB, True, True, 0, False, {}) == ([], [], [])
    # AND an entry size past the table (up to 2**64 - 1, the fuzzer's): the first entry only
    for huge in (len(data), 1 << 40, (1 << 64) - 1):
        assert functions(data, STRTAB, True, True, huge, False, {})[0] == [0x10]


def test_a_damaged_entry_size_or_name_offset_reads_no_byte_outside() -> None:
    # GIVEN a table read with entsize 1 (every byte offset an entry) and names past the string table
    entries = [(len(STRTAB) + 100, _info(GLOBAL), 1, 0x10, 4), (NAME["free"], _info(GLOBAL), 1, 0x20, 4)] * 50
    data = _table(entries)
    starts, ends, offsets = functions(data, STRTAB, True, True, 1, False, {})
    # THEN whatever the overlapping bytes decode to, each start is kept once, in order
    assert starts == sorted(set(starts)) and len(ends) == len(offsets) == len(starts)
    assert 0x10 in starts and 0x20 in starts
