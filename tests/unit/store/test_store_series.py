"""store/series.py: several heaps' points summed into one series, a series thinned, and the
memory samples and series of every heap read at once."""

from __future__ import annotations

from pathlib import Path

from store_support import two_callsite_writer

from heapscope.store.reader import open_profile
from heapscope.store.select import ALL_HEAPS, select_heap
from heapscope.store.series import (
    memory_samples_by_heap,
    memory_samples_by_process,
    memory_series,
    memory_series_by_heap,
    samples_of,
    series_of,
    sum_heaps,
    thin_series,
)


def test_heaps_sum_as_their_latest_points_left_them() -> None:
    # GIVEN malloc's heap at 0 and 20, Python's at 10 (heap, ts, largest, end, allocated)
    rows = [("libc.malloc", 0, 100, 80, 100), ("python.pymalloc", 10, 50, 40, 50),
            ("libc.malloc", 20, 90, 10, 110)]
    # THEN each point is its heap's largest plus the others' ends, and every heap's end
    assert sum_heaps(rows) == [(0, 100, 80, 100), (10, 80 + 50, 120, 150), (20, 40 + 90, 50, 160)]


def test_heaps_with_a_point_at_one_ts_make_one_point() -> None:
    rows = [("a", 5, 10, 10, 10), ("b", 5, 20, 20, 20)]
    assert sum_heaps(rows) == [(5, 30, 30, 30)]


def test_thinning_keeps_the_peak_and_the_last_values() -> None:
    pts = [(k, 1000 if k == 7 else k, k // 2, 10 * k) for k in range(100)]
    thin = thin_series(pts, 10)
    assert len(thin) == 10
    assert [p[0] for p in thin] == list(range(0, 100, 10))
    assert max(p[1] for p in thin) == 1000
    assert thin[-1][2:] == (99 // 2, 990)
    assert thin_series(pts, 0) == pts and thin_series(pts, 100) == pts


def test_every_heaps_samples_read_once_pick_what_each_heap_shown_reads(tmp_path: Path) -> None:
    """The flamegraph reads the memory samples of every heap once (memory_samples_by_heap) and
    gives each heap, and each sum of heaps, its own (samples_of): the same rows in the same order
    as memory_samples_by_process reads with that heap shown, the order a page's sampling and
    sort keep."""
    w = two_callsite_writer(tmp_path / "p.db")
    for upid in (1, 2):
        for heap in ("libc.malloc", "mmap", "libc.malloc"):  # rows of the heaps interleaved
            w.add_dump(upid, 0, 10, "exit", [(1, 1, 64)], heap)
            w.add_memory(upid, heap, [5, 64, 64, 64],
                         [1 if heap == "mmap" else 2, upid, None, 64, 1, 2, upid + 3, 9, 4096, 2])
    w.commit()
    w.close()
    with open_profile(tmp_path / "p.db") as prof:
        by_heap = memory_samples_by_heap(prof, [1, 2])
        for shown, among in (("libc.malloc", ["libc.malloc"]), ("mmap", ["mmap"]),
                             ("libc.malloc+mmap", ["libc.malloc", "mmap"]), (ALL_HEAPS, None)):
            select_heap(prof, shown)
            read = memory_samples_by_process(prof, [1, 2])
            assert samples_of(by_heap, among) == read, shown
        assert len(samples_of(by_heap, None)[2]) == 6
        assert memory_samples_by_heap(prof, [2]).keys() == {2}


def test_every_heaps_series_read_once_sum_as_each_heap_shown_reads(tmp_path: Path) -> None:
    """The flamegraph reads the series points of every heap once (memory_series_by_heap) and sums
    each heap's, and each sum of heaps', (series_of): what memory_series reads with it shown."""
    w = two_callsite_writer(tmp_path / "p.db")
    for upid in (1, 2):
        for k, heap in enumerate(("libc.malloc", "mmap", "libc.malloc")):  # heaps interleaved
            w.add_dump(upid, 0, 10, "exit", [(1, 1, 64)], heap)
            # points at their own times and at one shared time (20), each heap's own values
            w.add_memory(upid, heap, [10 * k + upid, 100 * k + 7, 50 * k, 300 * k + upid, 20, 64 + k, 32 + k, 999 + k],
                         [])
    w.commit()
    w.close()
    with open_profile(tmp_path / "p.db") as prof:
        points = memory_series_by_heap(prof, [1, 2])
        assert points.keys() == {1, 2}
        for shown, among in (("libc.malloc", ["libc.malloc"]), ("mmap", ["mmap"]),
                             ("libc.malloc+mmap", ["libc.malloc", "mmap"]), (ALL_HEAPS, None)):
            select_heap(prof, shown)
            got = series_of(points, among)
            for upid in (1, 2):
                assert got[upid] == memory_series(prof, upid), (shown, upid)
                assert len(got[upid]) > 1
        assert series_of(points, ["brk"]) == {}  # a heap without points: no series
        assert memory_series_by_heap(prof, [2]).keys() == {2}
