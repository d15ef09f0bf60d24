"""A heap's memory over time (bookkeeping/tracker_series.c) through the Tracker: ops in, points
and kept samples out."""

from __future__ import annotations

import pytest

from heapscope.bookkeeping._native import Tracker
from heapscope.bookkeeping.rows import NOT_FREED, SAMPLE_ROW, SERIES_ROW

pytestmark = pytest.mark.timeout(60)

MS = 1_000_000
STEP = 10 * MS  # HS_SERIES_STEP_NS
CAP = 4096  # HS_SERIES_CAP
SAMPLES_CAP = 16384  # HS_SAMPLES_CAP
S1, S2 = 0x1111, 0x2222


def series(t: Tracker) -> list[tuple[int, int, int, int]]:
    return list(SERIES_ROW.iter_unpack(t.series()))


def samples(t: Tracker) -> list[tuple[int, int, int, int, int, int]]:
    return list(SAMPLE_ROW.iter_unpack(t.samples()))


class Ops:
    """Plays the ring reader: gapless seqs, addresses of its own."""

    def __init__(self, t: Tracker) -> None:
        self.t, self.seq, self.addr = t, 0, 0x10000

    def malloc(self, size: int, ts: int, stack: int = S1) -> int:
        self.seq += 1
        self.addr += 64
        self.t.malloc(self.seq, self.addr, size, size, stack, ts, 0)
        return self.addr

    def free(self, addr: int) -> None:
        self.seq += 1
        self.t.free(self.seq, addr, 0)


def test_phases_give_points_with_their_peaks() -> None:
    # GIVEN 1000 bytes allocated at 100 ms, held, freed after a malloc at 300 ms, 2000 at 500 ms
    t = Tracker()
    ops = Ops(t)
    first = ops.malloc(1000, 100 * MS)
    marker = ops.malloc(1, 300 * MS)
    ops.free(first)
    ops.malloc(2000, 500 * MS)
    ops.free(marker)
    # THEN one point per 10 ms span with activity: the span's first ts, its largest unreleased
    # bytes, those at its end, and what was allocated in all at its end
    assert series(t) == [(100 * MS, 1000, 1000, 1000), (300 * MS, 1001, 1, 1001), (500 * MS, 2001, 2000, 3001)]


def test_a_span_keeps_its_largest_value() -> None:
    # GIVEN a rise and a fall within one 10 ms span, then an op in the next
    t = Tracker()
    ops = Ops(t)
    a = ops.malloc(500, 0)
    b = ops.malloc(700, 1 * MS)
    ops.free(a)
    ops.free(b)
    ops.malloc(10, STEP)
    # THEN the first point holds the peak (1200) and its end (0)
    assert series(t) == [(0, 1200, 0, 1200), (STEP, 10, 10, 1210)]


def test_points_stay_bounded_and_keep_the_peak() -> None:
    # GIVEN a long run: an op every 10 ms for 5 * CAP spans, each freed at once but for one
    # block held over two spans in the middle (the peak)
    t = Tracker()
    ops = Ops(t)
    n = 5 * CAP
    peak_at = n // 2 + 7
    held = 0
    for k in range(n):
        size = 1_000_000 if k == peak_at else 100
        addr = ops.malloc(size, k * STEP)
        if k == peak_at:
            held = addr
        else:
            ops.free(addr)
        if k == peak_at + 1:
            ops.free(held)
    pts = series(t)
    # THEN at most CAP points, in time order, evenly spread over the run, the peak still there
    assert CAP // 2 <= len(pts) <= CAP
    assert [p[0] for p in pts] == sorted(p[0] for p in pts)
    assert max(p[1] for p in pts) == 1_000_000 + 100
    assert sum(p[1] == 1_000_000 + 100 for p in pts) == 1  # both spans merged into one point
    assert pts[-1][3] == 100 * (n - 1) + 1_000_000
    gaps = {b[0] - a[0] for a, b in zip(pts, pts[1:], strict=False)}
    assert len(gaps) <= 2  # the step of the merged points, and that of the open point's span


def test_samples_carry_their_times_and_stack() -> None:
    # GIVEN a sample freed later and one still live
    t = Tracker()
    ops = Ops(t)
    a = ops.malloc(100, 20 * MS, S1)
    ops.malloc(300, 50 * MS, S2)
    ops.free(a)
    t.set_callsite(S1, 7)
    # THEN the freed one has its malloc's span and the free's time (the heap's latest ts);
    # the live one is not freed; both stand for themselves (weight 1)
    assert sorted(samples(t)) == [(0, S2, 50 * MS, NOT_FREED, 300, 1), (7, 0, 20 * MS, 50 * MS, 100, 1)]


def test_samples_thinned_past_the_cap_stay_unbiased() -> None:
    # GIVEN 4 * SAMPLES_CAP samples of 10 bytes, each freed at once
    t = Tracker()
    ops = Ops(t)
    n = 4 * SAMPLES_CAP
    for k in range(n):
        ops.free(ops.malloc(10, k * 1000))
    rows = samples(t)
    # THEN at most SAMPLES_CAP kept, each standing for the same number, and their weighted
    # bytes estimate the freed bytes (the hash keeps each with probability 1/weight)
    assert len(rows) <= SAMPLES_CAP
    weights = {r[5] for r in rows}
    assert len(weights) == 1 and weights.pop() >= 4
    est = sum(r[4] * r[5] for r in rows)
    assert abs(est - 10 * n) < 0.05 * 10 * n


def test_a_free_is_dated_by_its_own_time() -> None:
    # GIVEN a block allocated at 10 ms whose free, sent at 200 ms, arrives at 300 ms
    t = Tracker()
    t.malloc(1, 0x1000, 4096, 4096, S1, 10 * MS, 10 * MS)
    t.free(2, 0x1000, 300 * MS, 200 * MS)
    # THEN the drop is a point of its own at 200 ms, and the sample's free is then
    assert series(t) == [(10 * MS, 4096, 4096, 4096), (200 * MS, 0, 0, 4096)]
    assert samples(t) == [(0, S1, 10 * MS, 200 * MS, 4096, 1)]


def test_a_free_arriving_before_the_latest_malloc_counts_at_it() -> None:
    # GIVEN a free whose arrival clock reads earlier than the latest malloc's ts
    t = Tracker()
    t.malloc(1, 0x1000, 100, 100, S1, 50 * MS, 0)
    t.free(2, 0x1000, 20 * MS)
    # THEN it counts at the latest op's time, in the open span
    assert series(t) == [(50 * MS, 100, 0, 100)]
    assert samples(t)[0][3] == 50 * MS


def test_live_samples_past_the_cap_are_thinned_too() -> None:
    # GIVEN a program that never frees: 4 * SAMPLES_CAP live samples of 10 bytes
    t = Tracker()
    ops = Ops(t)
    n = 4 * SAMPLES_CAP
    for k in range(n):
        ops.malloc(10, k * 1000)
    rows = samples(t)
    # THEN at most 2 * SAMPLES_CAP rows (HS_SAMPLES_OUT), all live, weighted to the live bytes
    assert len(rows) <= 2 * SAMPLES_CAP
    assert {r[3] for r in rows} == {NOT_FREED}
    weights = {r[5] for r in rows}
    assert len(weights) == 1 and weights.pop() >= 2
    assert abs(sum(r[4] * r[5] for r in rows) - 10 * n) < 0.05 * 10 * n
