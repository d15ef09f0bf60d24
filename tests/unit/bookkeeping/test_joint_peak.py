"""One peak for the heaps of one process (tracker.h: hs_tracker_share_peak).

libc.malloc and python.pymalloc are disjoint heaps whose sum is the program's
memory: their peak is the moment that sum is largest, and each heap's peak
rows are its state at that moment, not at its own peak.
"""

from __future__ import annotations

from typing import Any

import pytest

from heapscope.bookkeeping.rows import WINDOW_ROW

pytestmark = pytest.mark.timeout(60)

S1, S2, S3 = 0x1111, 0x2222, 0x3333
A, B, C, D = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 0x7F00_0000_4000


def two(make_heap: Any, dump_at_max: bool = False) -> tuple[Any, Any]:
    m, p = make_heap(dump_at_max=dump_at_max), make_heap(dump_at_max=dump_at_max)
    p.t.share_peak(m.t)
    m.t.set_callsite(S1, 1)
    p.t.set_callsite(S2, 2)
    p.t.set_callsite(S3, 3)
    return m, p


def test_heaps_peaking_apart_have_one_peak_at_their_largest_sum(make_heap: Any) -> None:
    # GIVEN malloc's heap holds 800 then frees it (its own peak: 800 at ts 2), then
    # Python's holds 500 + 400 (its own peak: 900 at ts 4), with 100 of malloc's held throughout
    m, p = two(make_heap)
    m.malloc(1, A, 100, S1, ts=1)
    m.malloc(2, B, 800, S1, ts=2)
    m.free(3, B)
    p.malloc(1, C, 500, S2, ts=3)
    p.malloc(2, D, 400, S3, ts=4)
    p.free(3, C)
    # THEN the peak is 100 + 900 at ts 4 (not 800 + 100 + 900), for both heaps alike
    for h in (m, p):
        st = h.stats()
        assert (st["peak_unfreed"], st["peak_ts"], st["peak_heaps"], st["joint_unfreed"]) == (1000, 4, 2, 500)
    assert m.stats()["current_unfreed"] == 100 and p.stats()["current_unfreed"] == 400
    # AND each heap's rows are its state at that moment: malloc's freed block not in it
    assert m.peak() == {1: (1, 100, 2, 900)}
    assert p.peak() == {2: (1, 500, 1, 500), 3: (1, 400, 1, 400)}
    # AND a later high in one heap moves the peak of both
    m.malloc(4, B, 700, S1, ts=9)
    assert m.stats()["peak_unfreed"] == 1200 and p.stats()["peak_ts"] == 9
    assert m.peak() == {1: (2, 800, 3, 1600)}
    assert p.peak() == {2: (0, 0, 1, 500), 3: (1, 400, 1, 400)}


def test_a_tracker_that_has_not_shared_keeps_its_own_peak(make_heap: Any) -> None:
    m, p = make_heap(), make_heap()
    m.t.set_callsite(S1, 1)
    p.t.set_callsite(S2, 2)
    m.malloc(1, A, 800, S1, ts=2)
    m.free(2, A)
    p.malloc(1, C, 500, S2, ts=3)
    assert (m.stats()["peak_unfreed"], p.stats()["peak_unfreed"]) == (800, 500)
    assert m.t.peak_group != p.t.peak_group and m.stats()["peak_heaps"] == 1


def test_only_a_tracker_without_ops_shares_a_peak(make_heap: Any) -> None:
    m, p, q = make_heap(), make_heap(), make_heap()
    m.malloc(1, A, 100, S1, ts=1)
    with pytest.raises(ValueError):
        m.t.share_peak(p.t)  # m has booked something under its own peak
    p.t.share_peak(m.t)
    p.t.share_peak(m.t)  # again: nothing to do
    with pytest.raises(ValueError):
        p.t.share_peak(q.t)  # p shares m's already
    with pytest.raises(TypeError):
        p.t.share_peak(object())
    assert p.t.peak_group == m.t.peak_group != q.t.peak_group
    # AND a tracker that joins late starts from the others' state: the peak is theirs
    assert p.stats()["peak_unfreed"] == 100 and p.peak() == {}
    p.t.set_callsite(S2, 2)
    p.malloc(1, B, 50, S2, ts=5)
    assert m.stats()["peak_unfreed"] == 150 and m.stats()["peak_ts"] == 5


def test_closing_one_tracker_leaves_the_other_working(make_heap: Any) -> None:
    m, p = two(make_heap)
    m.malloc(1, A, 100, S1, ts=1)
    p.malloc(1, C, 500, S2, ts=3)
    p.t.close()
    m.malloc(2, B, 10, S1, ts=4)
    st = m.stats()
    assert (st["peak_heaps"], st["joint_unfreed"], st["current_unfreed"]) == (1, 110, 110)
    assert st["peak_unfreed"] == 600  # the peak reached with the other heap stays


def test_dump_at_max_dumps_both_heaps_at_the_joint_peak(make_heap: Any) -> None:
    m, p = two(make_heap, dump_at_max=True)
    m.malloc(1, A, 800, S1, ts=1)
    m.free(2, A)
    p.malloc(1, C, 900, S2, ts=3)
    # THEN SUM(size) over both heaps' dumps is the joint peak, 900 (not 800 + 900)
    assert m.dump() == []
    assert p.dump() == [(2, 1, 900)]


def window(h: Any) -> dict[int, tuple[int, ...]]:
    return {row[0] or row[1]: tuple(row[2:]) for row in WINDOW_ROW.iter_unpack(h.t.window())}


def test_a_window_is_one_for_both_heaps(make_heap: Any) -> None:
    # GIVEN 100 held by malloc's heap before the window
    m, p = two(make_heap)
    m.malloc(1, A, 100, S1, ts=1)
    p.t.new_window()  # from either tracker: the window of both
    # WHEN in the window malloc's heap takes 300 and frees it, then Python's takes 200
    m.malloc(2, B, 300, S1, ts=2)
    m.free(3, B)
    p.malloc(1, C, 200, S2, ts=3)
    # THEN the window's peak is 300 above its start (not 300 + 200), the same for both
    for h in (m, p):
        st = h.stats()
        assert (st["window_base"], st["window_peak"], st["joint_unfreed"]) == (100, 400, 300)
    assert window(m) == {1: (300, 1, 0, 0, 300)}
    assert window(p) == {2: (0, 0, 200, 1, 200)}
    # AND the next window keeps the process's peak (400) with both heaps' rows there
    m.t.new_window()
    p.free(2, C)
    for h in (m, p):
        assert (h.stats()["peak_unfreed"], h.stats()["peak_ts"]) == (400, 2)
    assert m.peak() == {1: (2, 400, 2, 400)}
    assert p.peak() == {}
