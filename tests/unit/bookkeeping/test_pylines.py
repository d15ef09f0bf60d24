"""bookkeeping/pylines.py against each installed CPython's own PyCode_Addr2Line.

Each CPython 3.8-3.13 found (pyenv, and Debian's /usr/bin/python3.11) compiles
a few sources, including two large stdlib modules, and dumps every code
object's raw line table with the line its C PyCode_Addr2Line() gives for
every byte offset (called through ctypes.pythonapi). The decoder must give
the same line for every offset.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from python_support import installed_pythons

from heapscope.bookkeeping.pylines import FORMATS, LINES_310, LNOTAB, LOCATIONS, LineTable, line_for_offset

PYTHONS = installed_pythons()

# Run by the interpreter under test; prints one JSON document.
DUMPER = r'''
import ctypes, inspect, json, sys, asyncio.tasks as tasks

addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int

SOURCE = """
def far(x):
    a = 1
""" + "\n" * 300 + """
    b = 2
    for i in range(x):
        if i:
            continue
        a += i
""" + "\n" * 200 + """
    return (a,
            b,
            [j for j in range(3)],
            lambda: 4)

class K:
    def m(self):
        try:
            return 1 / 0
        except ZeroDivisionError:
            pass
        finally:
            self.x = 2
    async def co(self):
        async with self:
            yield 1

def gen():
    yield from range(3)
"""

def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)

out = []
for name, src in (("sample", SOURCE), ("inspect", open(inspect.__file__).read()),
                  ("tasks", open(tasks.__file__).read())):
    for co in codes(compile(src, name, "exec")):
        table = co.co_linetable if sys.version_info >= (3, 10) else co.co_lnotab
        size = len(co.co_code)
        lines = [addr2line(co, off) for off in range(-2, size + 4)]
        out.append([co.co_firstlineno, table.hex(), lines])
print(json.dumps({"version": list(sys.version_info[:2]), "codes": out}))
'''


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_decoder_matches_addr2line(python: Path) -> None:
    res = subprocess.run([str(python), "-c", DUMPER], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    minor = doc["version"][1]
    fmt = LNOTAB if minor <= 9 else LINES_310 if minor == 10 else LOCATIONS
    checked = 0
    for first_line, table_hex, lines in doc["codes"]:
        table = LineTable.decode(fmt, bytes.fromhex(table_hex), first_line)
        for off, want in enumerate(lines, start=-2):
            got = table.line(off)
            assert (got if got is not None else -1) == want, (first_line, off, table_hex)
            checked += 1
    assert checked > 10000


def test_locations_by_hand() -> None:
    # first line 10; entries (head byte: 1 kkkk lll):
    #   short form kind 0, 1 unit, column byte      -> line 10, bytes [0, 2)
    #   one-line kind 12 (delta +2), 2 units, 2 cols -> line 12, bytes [2, 6)
    #   no-column kind 13, svarint -3 (7), 1 unit    -> line 9,  bytes [6, 8)
    #   long form kind 14, +70 (svarint 140 = 0x4c 0x02), end 0, cols 0, 0
    #                                                -> line 79, bytes [8, 10)
    #   no location kind 15, 1 unit                  -> None,    bytes [10, 12)
    table = bytes([0x80, 5, 0x80 | 12 << 3 | 1, 1, 2, 0x80 | 13 << 3, 7,
                   0x80 | 14 << 3, 0x4C, 0x02, 0, 0, 0, 0x80 | 15 << 3])
    lines = [line_for_offset(LOCATIONS, table, 10, off) for off in range(-1, 13, 1)]
    assert lines == [10, 10, 10, 12, 12, 12, 12, 9, 9, 79, 79, None, None, None]
    # A cut table keeps its whole entries.
    assert line_for_offset(LOCATIONS, table[:9], 10, 6) == 9
    assert line_for_offset(LOCATIONS, table[:9], 10, 8) is None


def test_lnotab_and_310_by_hand() -> None:
    # lnotab: at byte 0 line 5; +4 bytes -> line 6; +0 bytes, -2 lines -> 4
    assert [line_for_offset(LNOTAB, bytes([4, 1, 0, 0xFE]), 5, o) for o in (-1, 0, 3, 4, 9)] == [5, 5, 5, 4, 4]
    # 3.10: [0, 4) line +1 = 6; [4, 6) no line; [6, 8) line 6 - 3 = 3
    t = bytes([4, 1, 2, 0x80, 2, 0xFD])
    assert [line_for_offset(LINES_310, t, 5, o) for o in (-1, 0, 3, 4, 6, 7, 8)] == [5, 6, 6, None, 3, 3, None]


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError):
        LineTable.decode(99, b"", 1)


def test_any_bytes_read_as_a_line_or_none() -> None:
    # The tables come from the target's memory through the client: a cut, stale or garbage
    # table must give a line or None at every offset, never a crash or an exception (the walk
    # is C, bookkeeping/pylines.c; reads past the end count as 0 and stop the walk)
    import random

    rng = random.Random(12)
    tables = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 48))) for _ in range(2000)]
    tables += [bytes([0x80 | 14 << 3]) + b"\x7f" * 40, bytes([0x80 | 13 << 3]) + b"\xff" * 20, b"\x00" * 7]
    for table in tables:
        for fmt in FORMATS:
            for off in (-3, 0, 1, 2, 7, 50, 1 << 40):
                got = line_for_offset(fmt, table, 1000, off)
                assert got is None or isinstance(got, int)
    # AND an offset past the table is None for the range formats (LNOTAB: the last line, as CPython)
    assert line_for_offset(LOCATIONS, bytes([0x80, 5]), 3, 2) is None
    assert line_for_offset(LINES_310, bytes([2, 1]), 3, 2) is None
    assert line_for_offset(LNOTAB, bytes([2, 1]), 3, 9) == 4
