"""store/series.py: several heaps' points summed into one series, and a series thinned."""

from __future__ import annotations

from heapscope.store.series import sum_heaps, thin_series


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
