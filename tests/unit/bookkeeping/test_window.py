"""Peak windows of the heap tracker (tracker.h: hs_tracker_new_window, hs_tracker_window).

The pytest plugin starts a window at each test's start and reads at its
end what the test added: at the test's own peak, and still held at its end.
The process's peak over all windows must survive the windows.
"""

from __future__ import annotations

from typing import Any

import pytest

from heapscope.bookkeeping.rows import WINDOW_ROW

pytestmark = pytest.mark.timeout(60)

S1, S2, S3 = 0x1111, 0x2222, 0x3333
A, B, C, D = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 0x7F00_0000_4000


def window(h: Any) -> dict[int, tuple[int, ...]]:
    """callsite id (or stack id when it has none) -> (peak_size, peak_count, end_size, end_count, alloc_size)"""
    return {row[0] or row[1]: tuple(row[2:]) for row in WINDOW_ROW.iter_unpack(h.t.window())}


def test_window_peak_and_end_are_relative_to_its_start(make_heap: Any) -> None:
    # GIVEN 1000 bytes held before the window (callsite 1)
    h = make_heap()
    h.malloc(1, A, 1000, S1, ts=1)
    h.t.set_callsite(S1, 1)
    h.t.new_window()
    st = h.stats()
    assert (st["window_base"], st["window_peak"]) == (1000, 1000)
    # WHEN the window frees A, allocates 300 + 200 (callsite 2) then frees the 300
    h.malloc(2, B, 300, S2, ts=2)
    h.t.set_callsite(S2, 2)
    h.free(3, A)
    h.malloc(4, C, 200, S2, ts=3)
    h.free(5, B)
    # THEN the window's peak is 1300 (B before A's free), and its rows say what each
    # callsite held there and at the end, relative to the start
    st = h.stats()
    assert (st["window_base"], st["window_peak"], st["current_unfreed"]) == (1000, 1300, 200)
    assert window(h) == {1: (0, 0, -1000, -1, 0), 2: (300, 1, 200, 1, 500)}
    assert (st["peak_unfreed"], st["peak_ts"]) == (1300, 2)
    # AND a window that only frees has its peak at its start
    h.t.new_window()
    h.free(6, C)
    st = h.stats()
    assert (st["window_base"], st["window_peak"], st["peak_unfreed"]) == (200, 200, 1300)
    assert window(h) == {2: (0, 0, -200, -1, 0)}


def test_window_peak_above_its_start(make_heap: Any) -> None:
    # GIVEN 100 held (callsite 1), then a window that goes to 100 + 700 and drops to 100 + 50
    h = make_heap()
    h.malloc(1, A, 100, S1)
    h.t.set_callsite(S1, 1)
    h.t.new_window()
    h.malloc(2, B, 400, S2, ts=5)
    h.malloc(3, C, 300, S3, ts=6)
    h.free(4, B)
    h.free(5, C)
    h.malloc(6, D, 50, S2, ts=7)
    h.t.set_callsite(S2, 2)
    h.t.set_callsite(S3, 3)
    # THEN its peak is 700 above its start, split by callsite; at its end 50 is still held
    st = h.stats()
    assert st["window_peak"] - st["window_base"] == 700
    assert st["current_unfreed"] - st["window_base"] == 50
    assert window(h) == {2: (400, 1, 50, 1, 450), 3: (300, 1, 0, 0, 300)}
    # AND peak() follows the window, the process's peak being this window's
    assert h.peak() == {1: (1, 100, 1, 100), 2: (1, 400, 1, 400), 3: (1, 300, 1, 300)}
    assert (st["peak_unfreed"], st["peak_ts"]) == (800, 6)


def test_process_peak_survives_later_windows(make_heap: Any) -> None:
    # GIVEN a first window that peaks at 900 (callsite 1), then frees it all
    h = make_heap()
    h.t.new_window()
    h.malloc(1, A, 900, S1, ts=3)
    h.t.set_callsite(S1, 1)
    h.free(2, A)
    # WHEN two more windows peak lower (200, callsite 2)
    h.t.new_window()
    h.malloc(3, B, 200, S2, ts=8)
    h.t.set_callsite(S2, 2)
    h.t.new_window()
    assert window(h) == {}
    # THEN the process's peak is still the first window's, rows included
    st = h.stats()
    assert (st["peak_unfreed"], st["peak_ts"]) == (900, 3)
    assert h.peak() == {1: (1, 900, 1, 900)}
    # AND a window that passes it becomes the process's peak
    h.malloc(4, C, 800, S1, ts=9)
    st = h.stats()
    assert (st["peak_unfreed"], st["peak_ts"], st["window_peak"]) == (1000, 9, 1000)
    assert h.peak() == {1: (1, 800, 2, 1700), 2: (1, 200, 1, 200)}


def test_stack_resolved_inside_a_window_keeps_its_start(make_heap: Any) -> None:
    # GIVEN S1 holds 500 and has no callsite when the window starts
    h = make_heap()
    h.malloc(1, A, 500, S1)
    h.t.new_window()
    # WHEN the window adds 100 on S1, then S1 is resolved to callsite 7 (new)
    h.malloc(2, B, 100, S1)
    h.t.set_callsite(S1, 7)
    # THEN the window sees +100 on callsite 7, not +600
    assert window(h) == {7: (100, 1, 100, 1, 100)}


def test_unresolved_stacks_are_rows_by_stack_id(make_heap: Any) -> None:
    h = make_heap()
    h.t.new_window()
    h.malloc(1, A, 64, S3)
    assert [(cs, sid) for cs, sid, *_ in WINDOW_ROW.iter_unpack(h.t.window())] == [(0, S3)]
