"""Each heap set's peaks from one read of the peak rows (the flamegraph's page of several heaps)
are what Profile.peak_values reads with the profile showing that set."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from heapscope.store.peaks_by_heap import peak_values_by_heap
from heapscope.store.reader import open_profile
from heapscope.store.select import ALL_HEAPS, select_heap
from heapscope.store.writer import ProfileWriter

SETS: dict[str, list[str] | None] = {"libc.malloc": ["libc.malloc"], "mmap": ["mmap"],
                                     "libc.malloc+mmap": ["libc.malloc", "mmap"], ALL_HEAPS: None}


def _write(path: Path, mmap_ts: int = 15) -> None:
    w = ProfileWriter(path)
    w.add_dump(1, 0, 10, "exit", [(2, 3, 300)], "libc.malloc")
    w.add_dump(1, 0, 10, "exit", [(3, 1, 4096)], "mmap")
    w.add_dump(2, 0, 10, "exit", [(2, 1, 64)], "libc.malloc")
    # process 1: callsite 2 in both heaps, its real size known in one only; process 2: malloc only
    w.add_peak(1, 15, "libc.malloc", [(2, 2, 200, 3, 300, 60, 90), (4, 1, 64, 1, 64)])
    w.add_peak(1, mmap_ts, "mmap", [(2, 1, 8192, 1, 8192), (3, 1, 4096, 1, 4096, 4000, 4000)])
    w.add_peak(2, 7, "libc.malloc", [(2, 1, 64, 1, 64, 50, 50)])
    w.close()


def _alone(path: Path) -> dict[str, dict[int, object]]:
    out: dict[str, dict[int, object]] = {}
    with open_profile(path) as prof:
        for name in SETS:
            select_heap(prof, name)
            out[name] = {u: got for u in (1, 2) if (got := prof.peak_values(u)) is not None}
    return out


def test_each_set_as_read_alone(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    _write(path)
    with open_profile(path) as prof:
        select_heap(prof, ALL_HEAPS)
        together = peak_values_by_heap(prof, SETS)
    assert together == _alone(path)
    assert together is not None and together["libc.malloc+mmap"][1][1][2].real_space == 60  # type: ignore[index]


def test_none_when_the_rows_are_not_as_record_writes_them(tmp_path: Path) -> None:
    # heaps of a process peaking at two ts (the views line them up), or a value that is text
    two = tmp_path / "two.db"
    _write(two, mmap_ts=16)
    text = tmp_path / "text.db"
    _write(text)
    db = sqlite3.connect(text)
    db.execute("UPDATE heapscope_peak_allocation SET size = 'lots' WHERE callsite_id = 4")
    db.commit()
    db.close()
    for path in (two, text):
        with open_profile(path) as prof:
            select_heap(prof, ALL_HEAPS)
            assert peak_values_by_heap(prof, SETS) is None, path.name
