"""`heapscope live`'s memory sparklines come from the trackers' series (a point per 10 ms of
activity), as the profile's: a peak held a fraction of a second, between two of the view's
one-a-second snapshots, is shown. Driven in tmux as tests/integration/test_live.py's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_live import Fifo, Tmux, live  # noqa: F401  (live: the fixture)

from heapscope.units import format_bytes

X = 64 * 64 * 1024  # memphases.c: phase one; phase two holds 2X for 150 ms, then frees it
MARK = 8192


@pytest.mark.timeout(300)
def test_live_shows_a_peak_between_snapshots(live: Callable[..., tuple[Tmux, Fifo]],  # noqa: F811
                                             tmp_path: Path) -> None:
    tmux, fifo = live(program="memphases", interval=None)
    tmux.wait_for("threads [t]: all")
    fifo.step()  # the phases: 2X held 150 ms, all freed but two marks; then it waits
    peak = format_bytes(2 * X + MARK)
    # THEN once the phases are over (a snapshot may have caught phase two's hold, or not: the
    # series has it either way), the peak is still shown
    tmux.wait_for(lambda s: f"unreleased {format_bytes(2 * MARK)} (peak shown {peak})" in s)
    tmux.keys("q")
    tmux.wait_for("view closed: profiling stopped; waiting for pid")
    fifo.step()  # the target exits
    assert tmux.exit_status() == 0
