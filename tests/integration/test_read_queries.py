"""The reader's one-pass queries (every process's peak rows, per-process sums, the callsite
table taken as read) give what the straightforward per-process SQL gives, on a real
recording of several processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hs_integration import Programs, Recorder

from heapscope.store.reader import open_profile
from heapscope.store.select import select_heap

pytestmark = pytest.mark.timeout(180)


def _recorded(record: Recorder, programs: Programs, tmp_path: Path) -> Path:
    script = tmp_path / "several.sh"
    script.write_text(f"#!/bin/sh\n{programs.path('tiny')}\n{programs.path('growth')} 2\n"
                      f"{programs.path('tiny')}\n")
    rec = record(["/bin/sh", str(script)], interval=4096)
    assert rec.returncode == 0, rec.describe()
    return rec.db


def test_one_pass_reads_agree_with_per_process_queries(record: Recorder, programs: Programs,
                                                       tmp_path: Path) -> None:
    # GIVEN a recording of a shell and the three programs it runs
    db = _recorded(record, programs, tmp_path)
    raw = sqlite3.connect(db)
    with open_profile(db) as prof:
        select_heap(prof, None)
        upids = [p.info.upid for p in prof.processes()]
        assert len(upids) >= 4
        # WHEN the reader reads every process's peak, end and callsites its fast way
        peaks = {u: prof.peak_values(u) for u in upids}
        peak_sums, end_sums, callsites = prof.peak_sums(), prof.end_sums(), prof.callsites()
        # THEN each agrees with the query of one process at a time
        for u in upids:
            rows = raw.execute(
                "SELECT callsite_id, SUM(size), SUM(count), SUM(alloc_size), SUM(alloc_count), MAX(ts)"
                " FROM heapscope_peak_allocation WHERE upid = ? GROUP BY callsite_id", (u,)).fetchall()
            got = peaks[u]
            if not rows:
                assert got is None and u not in peak_sums
                continue
            assert got is not None and got[0] == max(r[5] for r in rows)
            assert {cs: (v.space, v.objects, v.alloc_space, v.alloc_objects) for cs, v in got[1].items()} == {
                r[0]: (r[1], r[2], r[3], r[4]) for r in rows}
            assert peak_sums[u] == sum(r[1] for r in rows)
            last = raw.execute("SELECT MAX(ts_end) FROM heap_profile WHERE upid = ?", (u,)).fetchone()[0]
            end = prof.callsite_values(u, last) if last is not None else {}
            assert end_sums.get(u, (0, 0, 0)) == (sum(v.space for v in end.values()),
                                                  sum(v.alloc_space for v in end.values()),
                                                  sum(v.alloc_objects for v in end.values()))
        assert callsites == {r[0]: (r[1], r[2]) for r in raw.execute(
            "SELECT id, parent_id, frame_id FROM stack_profile_callsite")}
        assert sum(1 for v in end_sums.values() if v[1] > 0) >= 3
    raw.close()
