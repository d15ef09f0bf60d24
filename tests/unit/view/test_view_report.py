"""view.report: exact self and total values per function for all four views.

The tree and the dumps are drawn in tests/unit/conftest.py. At the last dump
(ts 2000) of upid 1 the leaf callsites hold:

    site  path                         space objects alloc_space alloc_objects
    A     main parse parse malloc        110       2         150             3
    B     main emit malloc                 0       0          30             1
    C     main prog+0x1a2b                 8       1           8             1
    D     main parse malloc              300       3         300             3
    E     main parse parse                16       1          16             1

`parse` recurses on the paths of A and E: its total counts each of them once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heapscope.errors import HeapscopeError
from heapscope.model import Upid
from heapscope.store.reader import open_profile
from heapscope.view.report import build_process_report, build_reports

LIBC = "libc.so.6"

# (function, library, self, total) in report order.
EXPECTED = {
    "space": (434, [
        ("parse", "prog", 16, 426),  # A + D + E, A and E once despite the recursion
        ("malloc", LIBC, 410, 410),  # A + D (+ B, which is 0)
        ("prog+0x1a2b", "prog", 8, 8),
        # emit holds nothing: B was freed
    ]),
    "alloc_space": (504, [
        ("malloc", LIBC, 480, 480),
        ("parse", "prog", 16, 466),
        ("emit", "prog", 0, 30),
        ("prog+0x1a2b", "prog", 8, 8),
    ]),
    "objects": (7, [
        ("parse", "prog", 1, 6),
        ("malloc", LIBC, 5, 5),
        ("prog+0x1a2b", "prog", 1, 1),
    ]),
    "alloc_objects": (9, [
        ("malloc", LIBC, 7, 7),  # ties with parse on total; more self first
        ("parse", "prog", 1, 7),
        ("prog+0x1a2b", "prog", 1, 1),
        ("emit", "prog", 0, 1),
    ]),
}


@pytest.mark.parametrize("view", sorted(EXPECTED))
def test_self_and_total_per_view(known_profile: Path, view: str) -> None:
    with open_profile(known_profile) as prof:
        reports = build_reports(prof, view, sort="total")
    by_upid = {r.process.info.upid: r for r in reports}
    r = by_upid[Upid(1)]
    total, rows = EXPECTED[view]
    assert r.view_total == total
    assert r.ts == 2000 and r.dump_count == 2
    assert [(x.function, x.library, x.self_value, x.total_value) for x in r.rows] == rows
    assert r.common == ["main"]  # on every stack, so left out


def test_default_ranks_by_self_at_the_end_without_a_peak(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        [r] = build_reports(prof, "space", pid=100)
    assert r.state.startswith("end (dump 2 of 2,") and r.state.endswith("no peak recorded")
    assert [(x.function, x.self_value, x.total_value) for x in r.rows] == [
        ("malloc", 410, 410), ("parse", 16, 426), ("prog+0x1a2b", 8, 8)]


def test_at_the_first_dump(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        proc = prof.processes()[0]
        r = build_process_report(prof, proc, "space", ts=1000, sort="total")
    assert r.view_total == 138
    assert [(x.function, x.self_value, x.total_value) for x in r.rows] == [
        ("malloc", 130, 130), ("parse", 0, 100), ("emit", 0, 30), ("prog+0x1a2b", 8, 8),
    ]


def test_second_process_and_its_warnings(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        [r] = build_reports(prof, "space", pid=200)
    assert r.view_total == 4096
    assert [(x.function, x.self_value, x.total_value) for x in r.rows] == [("malloc", 4096, 4096)]
    assert r.common == ["main", "emit"]
    assert r.warnings == ["buffer overran", "client error: ring full", "dropped_records = 3"]


def test_process_without_dumps(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        [r] = build_reports(prof, "alloc_space", pid=300)
    assert (r.ts, r.dump_count, r.view_total, r.rows, r.warnings) == (None, 0, 0, [], [])


def test_unknown_pid_lists_the_pids_present(known_profile: Path) -> None:
    with open_profile(known_profile) as prof, pytest.raises(HeapscopeError) as e:
        build_reports(prof, "space", pid=4242)
    assert "no process with pid 4242 (pids present: 100, 200, 300)" in str(e.value)


def test_unknown_view(known_profile: Path) -> None:
    with open_profile(known_profile) as prof, pytest.raises(HeapscopeError, match="unknown view"):
        build_reports(prof, "bytes")


def test_focus_and_ignore_on_a_callsite_without_its_row(known_profile: Path) -> None:
    """Found by the readers fuzz target: dump rows naming a callsite whose row is gone (a damaged
    profile) made --focus and --ignore end in KeyError. No function of its path can match: --focus
    leaves it out, --ignore keeps it (its bytes still count in the process's total)."""
    import re
    import sqlite3

    db = sqlite3.connect(known_profile)
    db.execute("DELETE FROM stack_profile_callsite WHERE id = 8")  # SITE_D: main parse malloc, 300 bytes
    db.commit()
    db.close()
    with open_profile(known_profile) as prof:
        kept = build_reports(prof, "space", pid=100, sort="total")[0]
        focused = build_reports(prof, "space", pid=100, focus=re.compile("parse"), sort="total")[0]
        ignored = build_reports(prof, "space", pid=100, ignore=re.compile("emit"), sort="total")[0]
    assert kept.view_total == 434
    assert focused.view_total == 434 - 300 - 8  # D has no path; C (prog+0x1a2b) has no parse
    assert ignored.view_total == 434
