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
offset (a frame that has not started) is the first line, as in CPython. The
walk itself is C (bookkeeping/pylines.c, in the producer's extension).
"""

from __future__ import annotations

from heapscope.records import Record

LNOTAB = 1
LINES_310 = 2
LOCATIONS = 3

FORMATS = (LNOTAB, LINES_310, LOCATIONS)


class LineTable(Record, frozen=True):
    """One code object's table; `line()` walks it in C up to the offset (bookkeeping/pylines.c).

    Nothing is decoded ahead: the producer asks once per (code object, offset)
    a resolved frame is at (bookkeeping/frames.py keeps the answer), and most
    of a process's code objects are never asked. Decoding every table whole in
    Python cost a multiprocessing Pool's four processes ~560 ms of the
    producer's loop, and the ranges ~5 MiB of its memory.
    """

    fmt: int
    first_line: int
    table: bytes

    @classmethod
    def decode(cls, fmt: int, table: bytes, first_line: int) -> LineTable:
        """The table of format `fmt`; ValueError for a format not in FORMATS."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown line table format {fmt}")
        return cls(fmt, first_line, bytes(table))

    def line(self, offset: int) -> int | None:
        """The line of the instruction at byte `offset`; None if it has none."""
        from heapscope.bookkeeping._native import addr2line  # C (pylines.c)

        return addr2line(self.fmt, self.table, self.first_line, offset)


def line_for_offset(fmt: int, table: bytes, first_line: int, offset: int) -> int | None:
    """One-shot form of LineTable.decode(...).line(offset)."""
    return LineTable.decode(fmt, table, first_line).line(offset)
