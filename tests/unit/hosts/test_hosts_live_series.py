"""hosts/live/snapshot.py memory_columns: the live view's sparklines from the trackers' series."""

from __future__ import annotations

import pytest

pytest.importorskip("textual", reason="needs textual: pip install '.[live]'")

from heapscope.hosts.live.snapshot import ProcessView, memory_columns  # noqa: E402

MS = 1_000_000


def view(pid: int, series: list[tuple[int, int, int, int]], running: bool = True) -> ProcessView:
    return ProcessView(pid, "p", running, (), series[-1][2] if series else 0, series[-1][3] if series else 0,
                       series=tuple(series))


def test_a_peak_between_points_is_kept_and_ends_carry_on() -> None:
    # GIVEN one process: a 1000-byte spike within its first 10 ms, 10 bytes left, nothing for
    # 80 ms, then 500 bytes at 90 ms
    v = view(1, [(0, 1000, 10, 1000), (90 * MS, 500, 500, 1500)])
    u, a = memory_columns([v], 10)
    # THEN the first column shows the spike, the quiet ones what it left, the last the rise
    assert u == [1000, 10, 10, 10, 10, 10, 10, 10, 10, 500]
    assert a == [1000] * 9 + [1500]


def test_processes_add_and_an_ended_one_leaves_nothing_after_its_end() -> None:
    ended = view(1, [(0, 100, 100, 100), (40 * MS, 100, 60, 100)], running=False)
    running = view(2, [(0, 5, 5, 5), (90 * MS, 7, 7, 12)])
    u, _a = memory_columns([ended, running], 10)
    assert u[:5] == [105, 105, 105, 105, 105] and u[5:9] == [5, 5, 5, 5] and u[9] == 7


def test_no_series_no_columns() -> None:
    assert memory_columns([view(1, [])], 10) == ([], [])
