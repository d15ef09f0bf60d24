"""CPython line tables: instruction byte offset -> source line, outside the target.

The client (client/pyframes.c) sends each code object once with its raw line
table and first line, and each Python frame as (code object, byte offset of
the instruction it is at). This module turns an offset into a line with the
same rules as that version's PyCode_Addr2Line(), for the three formats:

    LNOTAB     3.8, 3.9   co_lnotab: pairs (address delta >= 0, line delta as
                          int8); an address past the query stops the walk
    LINES_310  3.10       co_linetable: pairs (range length in bytes, line
                          delta as int8; -128 = the range has no line)
    LOCATIONS  3.11+      co_linetable, the location table: entries of
                          1 + (code units - 1) in the first byte's low 3 bits,
                          a kind in bits 3-6, then varints (Objects/locations.md)

The numbers match enum hs_py_line_format in client/pyframes.h. A negative
offset (a frame that has not started) is the first line, as in CPython.
"""

from __future__ import annotations

import bisect
from array import array

from heapscope.slots import FrozenSlots

LNOTAB = 1
LINES_310 = 2
LOCATIONS = 3

FORMATS = (LNOTAB, LINES_310, LOCATIONS)


def _int8(b: int) -> int:
    return b - 256 if b >= 128 else b


def _lnotab_line(table: bytes, first_line: int, offset: int) -> int:
    line = first_line
    addr = 0
    for i in range(0, len(table) - 1, 2):
        addr += table[i]
        if addr > offset:
            break
        line += _int8(table[i + 1])
    return line


def _ranges_310(table: bytes, first_line: int) -> list[tuple[int, int, int | None]]:
    ranges: list[tuple[int, int, int | None]] = []
    line = first_line
    end = 0
    for i in range(0, len(table) - 1, 2):
        start, end = end, end + table[i]
        delta = _int8(table[i + 1])
        if delta == -128:
            ranges.append((start, end, None))
        else:
            line += delta
            ranges.append((start, end, line))
    return [r for r in ranges if r[0] < r[1]]


def _varint(table: bytes, i: int) -> tuple[int, int]:
    # Past the end of a cut table: reads as 0 and returns i > len(table).
    b = table[i] if i < len(table) else 0
    i += 1
    value = b & 63
    shift = 6
    while b & 64:
        b = table[i] if i < len(table) else 0
        i += 1
        value |= (b & 63) << shift
        shift += 6
    return value, i


def _svarint(table: bytes, i: int) -> tuple[int, int]:
    value, i = _varint(table, i)
    return (-(value >> 1) if value & 1 else value >> 1), i


def _ranges_locations(table: bytes, first_line: int) -> list[tuple[int, int, int | None]]:
    ranges: list[tuple[int, int, int | None]] = []
    line = first_line
    addr = 0
    i = 0
    n = len(table)
    while i < n:  # a cut table (IndexError below) keeps its whole entries
        head = table[i]
        i += 1
        kind = (head >> 3) & 15
        length = ((head & 7) + 1) * 2
        entry: int | None
        if kind == 15:  # no location
            entry = None
        elif kind == 14:  # long form: line delta, end line delta, columns
            delta, i = _svarint(table, i)
            line += delta
            entry = line
            for _ in range(3):
                _, i = _varint(table, i)
        elif kind == 13:  # no column: line delta only
            delta, i = _svarint(table, i)
            line += delta
            entry = line
        elif kind >= 10:  # one-line form: line delta kind - 10, two columns
            line += kind - 10
            entry = line
            i += 2
        else:  # short form: same line, one column byte
            entry = line
            i += 1
        if i > n:
            break
        ranges.append((addr, addr + length, entry))
        addr += length
    return ranges


_NO_LINE = -(1 << 63)  # a range without a line, in LineTable._lines


class LineTable(FrozenSlots):
    """One code object's table, decoded once; `line()` per frame is a bisect.

    The ranges are kept as three arrays of machine integers: a process's
    code objects hold ~100k of them, which as tuples took ~5 MiB of the
    producer's memory (issue 13).
    """

    __slots__ = ("fmt", "first_line", "table", "_starts", "_ends", "_lines")
    fmt: int
    first_line: int
    table: bytes
    _starts: array[int]
    _ends: array[int]
    _lines: array[int]  # _NO_LINE: the range has no line

    def __init__(self, fmt: int, first_line: int, table: bytes,
                 _ranges: list[tuple[int, int, int | None]] | None = None) -> None:
        set_field = object.__setattr__
        set_field(self, "fmt", fmt)
        set_field(self, "first_line", first_line)
        set_field(self, "table", table)
        ranges = _ranges or []
        set_field(self, "_starts", array("q", [r[0] for r in ranges]))
        set_field(self, "_ends", array("q", [r[1] for r in ranges]))
        set_field(self, "_lines", array("q", [_NO_LINE if r[2] is None else r[2] for r in ranges]))

    @classmethod
    def decode(cls, fmt: int, table: bytes, first_line: int) -> LineTable:
        if fmt == LNOTAB:
            return cls(fmt, first_line, bytes(table))
        if fmt == LINES_310:
            ranges = _ranges_310(table, first_line)
        elif fmt == LOCATIONS:
            ranges = _ranges_locations(table, first_line)
        else:
            raise ValueError(f"unknown line table format {fmt}")
        return cls(fmt, first_line, bytes(table), ranges)

    def line(self, offset: int) -> int | None:
        """The line of the instruction at byte `offset`; None if it has none."""
        if offset < 0:
            return self.first_line
        if self.fmt == LNOTAB:
            return _lnotab_line(self.table, self.first_line, offset)
        k = bisect.bisect_right(self._starts, offset) - 1
        if k < 0 or offset >= self._ends[k]:
            return None
        line = self._lines[k]
        return None if line == _NO_LINE else line


def line_for_offset(fmt: int, table: bytes, first_line: int, offset: int) -> int | None:
    """One-shot form of LineTable.decode(...).line(offset)."""
    return LineTable.decode(fmt, table, first_line).line(offset)
