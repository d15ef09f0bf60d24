"""A small profile with a known callsite tree, written by the real ProfileWriter.

Shared by the store, view and cli unit tests. The tree (callsite ids in
brackets; frame names; "prog" and "libc.so.6" are the two mappings):

    [1] main ─┬─ [2] parse ─┬─ [3] parse ──── [4] malloc        site A
              │             │      (site E: [3] itself)
              │             └─ [8] malloc                      site D
              ├─ [5] emit ──── [6] malloc                      site B
              └─ [7] prog+0x1a2b (unsymbolized frame)          site C

Process upid 1 (pid 100), two dumps; rows are (callsite, count, size):
    ts 1000: A +2/+100, B +1/+30, C +1/+8
    ts 2000: A -1/-40 and +1/+50, B -1/-30, D +3/+300, E +1/+16
Process upid 2 (pid 200), one dump at ts 1500: B +4/+4096; buffer overran,
    a client error, and a data-loss stat.
Process upid 3 (pid 300): no dumps.

The expected numbers for every view are worked out in the tests that use it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import PyroscopeServer

from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.writer import ProfileWriter

PROG = "/usr/bin/prog"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"

SITE_A, SITE_B, SITE_C, SITE_D, SITE_E = 4, 6, 7, 8, 3


def write_known_profile(path: Path) -> Path:
    w = ProfileWriter(path)
    w.add_mappings([
        (1, Mapping("aa11", 0, 0, 0x5000, 0x9000, 0, PROG)),
        (2, Mapping("bb22", 0, 0, 0x7F000000, 0x7F100000, 0, LIBC)),
    ])
    w.add_frames([
        (1, Frame(MappingId(1), 0x1100, "main")),
        (2, Frame(MappingId(1), 0x1200, "parse")),
        (3, Frame(MappingId(1), 0x1300, "emit")),
        (4, Frame(MappingId(2), 0x9A000, "malloc")),
        (5, Frame(MappingId(1), 0x1A2B, "")),
    ])
    w.add_callsites([
        (1, 0, None, 1),
        (2, 1, 1, 2),
        (3, 2, 2, 2),
        (4, 3, 3, 4),
        (5, 1, 1, 3),
        (6, 2, 5, 4),
        (7, 1, 1, 5),
        (8, 2, 2, 4),
    ])
    prog = ProcessInfo(Upid(1), pid=100, ppid=1, name="prog", cmdline="prog --run fast", exe=PROG,
                       uid=1000, start_ts=10)
    child = ProcessInfo(Upid(2), pid=200, ppid=100, name="child", cmdline="child", exe="/usr/bin/child",
                        uid=1000, start_ts=20, end_ts=1600, parent_upid=Upid(1))
    idle = ProcessInfo(Upid(3), pid=300, ppid=100, name="idle", cmdline="", exe="/usr/bin/idle",
                       uid=1000, start_ts=30)
    for p in (prog, child, idle):
        w.add_process(p)
    w.set_process_flags(prog, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=4096,
                                           orig_sampling_interval_bytes=4096))
    w.set_process_flags(child, ProcessFlags(buffer_overran=True, client_error="ring full",
                                            unwinder="frame-pointer", sampling_interval_bytes=1,
                                            orig_sampling_interval_bytes=1))
    w.add_dump(1, 0, 1000, "periodic", [(SITE_A, 2, 100), (SITE_B, 1, 30), (SITE_C, 1, 8)], "libc.malloc")
    w.add_dump(1, 1000, 2000, "exit", [
        (SITE_A, -1, -40), (SITE_A, 1, 50), (SITE_B, -1, -30), (SITE_D, 3, 300), (SITE_E, 1, 16),
    ], "libc.malloc")
    w.add_dump(2, 0, 1500, "exit", [(SITE_B, 4, 4096)], "libc.malloc")
    w.add_stats([
        ("heap_samples", 1, "info", "producer", 9, "malloc samples"),
        ("dropped_records", 2, "data_loss", "producer", 3, "records lost"),
        ("unwinding_errors", 2, "data_loss", "client", 0, "no error: not a warning"),
    ])
    w.close()
    return path


@pytest.fixture
def known_profile(tmp_path: Path) -> Path:
    return write_known_profile(tmp_path / "known.db")


@pytest.fixture
def pyroscope() -> Iterator[PyroscopeServer]:
    """A loopback Pyroscope (tests/fleet_support.py), for the fleet's and the hosts' tests."""
    s = PyroscopeServer()
    yield s
    s.close()


@pytest.fixture
def timed_profile(known_profile: Path) -> Path:
    """The known profile with the start time `record` stores, so dumps have wall-clock times."""
    db = sqlite3.connect(known_profile)
    db.executemany("INSERT OR REPLACE INTO heapscope_metadata VALUES (?, ?)",
                   [("started_unix_ns", str(1_700_000_000_000_000_000)), ("started_monotonic_ns", "0")])
    db.commit()
    db.close()
    return known_profile
