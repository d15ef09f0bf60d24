"""Memory over time on real recordings: the series a profile keeps (heapscope_memory_series,
the tracker's), the samples behind a range of it, and the flamegraph page's chart and range
selection driven in headless chromium.

memphases.c's ground truth: X = 64 x 64 KiB allocated at its start and held HOLD, freed, an
8 KiB mark, HOLD later 2X held HOLD, freed, a second mark. Blocks of 64 KiB and 8 KiB are above
the default sampling interval, so each is sampled at its size: the series' figures are exact but
for libc's own few small allocations (at most SLACK). Times are checked only against the
program's own waits (a nanosleep lasts at least its time), never against a deadline.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hs_integration import Programs, Recorder
from test_views import browser, heapscope

from heapscope.store.reader import open_profile
from heapscope.store.series import memory_samples, memory_series

pytestmark = pytest.mark.timeout(180)

X = 64 * 64 * 1024
MARK = 8192
HOLD_MS = 150
SLACK = 64 * 1024  # libc's own sampled allocations, and one 64 KiB block of rounding
CLOCK_NS = 10_000_000  # the client's clock is CLOCK_MONOTONIC_COARSE: a tick or two of it


def recorded(record: Recorder, programs: Programs) -> Path:
    rec = record([programs.path("memphases")], interval=None)
    assert rec.returncode == 0, rec.describe()
    return rec.db


def near(value: int, expected: int) -> bool:
    return abs(value - expected) <= SLACK


def test_series_of_known_phases_has_their_shape(record: Recorder, programs: Programs) -> None:
    db = recorded(record, programs)
    with open_profile(db) as prof:
        (proc,) = prof.processes()
        pts = memory_series(prof, proc.info.upid)
        samples = memory_samples(prof, proc.info.upid)
    assert [p[0] for p in pts] == sorted(p[0] for p in pts)
    # THEN X first, a valley of one mark, then 2X and a mark, and last two marks
    first = next(k for k, p in enumerate(pts) if p[1] >= X - SLACK)
    assert near(pts[first][1], X), pts
    valley = next(k for k in range(first, len(pts)) if pts[k][2] <= MARK + SLACK)
    assert near(pts[valley][2], MARK), pts
    top = max(range(len(pts)), key=lambda k: pts[k][1])
    assert top > valley and near(pts[top][1], 2 * X + MARK), pts
    assert near(pts[-1][2], 2 * MARK), pts
    assert near(pts[-1][3], 3 * X + 2 * MARK), pts
    # ... the free at least HOLD after phase one (dated by its arrival at the reader: later than
    # it was, never earlier), phase two at least 2 HOLD after it
    hold = HOLD_MS * 1_000_000 - CLOCK_NS
    assert pts[valley][0] - pts[first][0] >= hold and pts[top][0] - pts[first][0] >= 2 * hold, pts
    # AND the samples hold both phases: phase one's X freed at the valley, phase two's 2X after it
    by_callsite: dict[int, list[tuple[int, int | None, int]]] = {}
    for callsite, alloc_ts, free_ts, size, weight in samples:
        by_callsite.setdefault(callsite, []).append((alloc_ts, free_ts, size * weight))
    sums = sorted(((sum(s for *_, s in rows), cs) for cs, rows in by_callsite.items()), reverse=True)
    (two, cs_two), (one, cs_one) = sums[:2]
    assert (two, one) == (2 * X, X)
    assert all(f is not None and f >= pts[valley][0] and a < pts[valley][0] for a, f, _ in by_callsite[cs_one])
    assert all(f is not None and a >= pts[first][0] + 2 * hold for a, f, _ in by_callsite[cs_two])


def test_series_points_are_spans_of_activity(record: Recorder, programs: Programs) -> None:
    db = recorded(record, programs)
    with open_profile(db) as prof:
        (proc,) = prof.processes()
        ts = [p[0] for p in memory_series(prof, proc.info.upid)]
    # THEN a point per 10 ms span with activity at most: none closer than a span (the cap of
    # 4096 points and their merging are tests/unit/bookkeeping/test_series.py's)
    assert 4 <= len(ts) <= 4096
    assert all(b - a >= 10_000_000 for a, b in zip(ts, ts[1:], strict=False)), ts


def test_flamegraph_chart_and_range_selection(record: Recorder, programs: Programs, tmp_path: Path) -> None:
    db = recorded(record, programs)
    html = tmp_path / "m.html"
    heapscope("flamegraph", db, "-o", html)
    hs = "window.heapscope"
    space = f"{hs}.rootTotal('space')"
    drawn = f"['phase_one', 'phase_two', 'mark'].filter(n => {hs}.frameCentre(n) !== null)"
    hold = HOLD_MS / 1000
    # Times on the page count from the process's start; phase one begins at the first point.
    t1 = f"({hs}.memory.series().t[0] / 1e6)"
    res = browser(tmp_path, html, [
        {"do": "eval", "js": f"[{hs}.memory.series(), document.getElementById('memory').hidden]"},
        # a drag over the first half of phase one: what it allocated there, held at its end
        {"do": "drag", "js": f"({{x0: {hs}.memory.xOf({t1} - 0.002), x1: {hs}.memory.xOf({t1} + {hold / 2}),"
                             f" y: {hs}.memory.yMid()}})"},
        {"do": "eval", "js": f"[{hs}.memory.range(), {space}, {drawn}]"},
        {"do": "screenshot", "path": str(tmp_path / "range.png")},
        # the switch: allocated and freed within it (nothing, phase one is freed later)
        {"do": "click", "selector": "#mem-mode button[data-mode='freed']"},
        {"do": "eval", "js": f"[{hs}.memory.range(), {space}]"},
        # phase one and its free (dated by its arrival: up to 0.8 HOLD late), then the mark after it
        {"do": "eval", "js": f"{hs}.memory.select({t1} - 0.002, {t1} + {1.8 * hold}, 'freed') && [{space}, {drawn}]"},
        {"do": "eval", "js": f"{hs}.memory.select({t1} - 0.002, {t1} + {1.8 * hold}, 'held') && [{space}, {drawn}]"},
        # a dump of the timeline again: the range is left
        {"do": "eval", "js": f"{hs}.state.dump = 0; [{hs}.memory.range()]"},
    ])
    r = res["results"]
    series, hidden = r[0]
    assert not hidden and max(series["u"]) >= 2 * X
    first = series["t"][0] / 1e6
    (start, end, mode), held, names = r[2]
    assert abs(start - (first - 0.002)) < 0.01 and abs(end - (first + hold / 2)) < 0.02 and mode == "held"
    assert near(held, X) and names == ["phase_one"], r[2]
    assert r[5][0][2] == "freed" and r[5][1] < SLACK
    assert near(r[6][0], X) and "phase_one" in r[6][1] and "phase_two" not in r[6][1]
    assert near(r[7][0], MARK) and r[7][1] == ["mark"]
    assert r[8] == [None]


def test_profile_without_series_still_reads(record: Recorder, programs: Programs, tmp_path: Path) -> None:
    db = recorded(record, programs)
    with sqlite3.connect(db) as c:  # as written before the series
        c.execute("DROP TABLE heapscope_memory_series")
        c.execute("DROP TABLE heapscope_memory_sample")
    c.close()
    with open_profile(db) as prof:
        (proc,) = prof.processes()
        assert memory_series(prof, proc.info.upid) == [] and memory_samples(prof, proc.info.upid) == []
    html = tmp_path / "old.html"
    heapscope("flamegraph", db, "-o", html)
    assert "phase_two" in heapscope("report", db)
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "[window.heapscope.memory.series(), document.getElementById('memory').hidden]"},
    ])
    assert res["results"][0] == [None, True]
    assert json.dumps(res["errors"]) == "[]"
