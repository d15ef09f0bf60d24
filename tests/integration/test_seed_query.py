"""The example query of seed 001 ("Example SQL Queries") runs unchanged on our profile."""

from __future__ import annotations

import pytest

# Copied verbatim from the seed (Perfetto's heapprofd docs).
SEED_EXAMPLE_QUERY = """\
select a.callsite_id, a.ts, a.upid, f.name, f.rel_pc, m.build_id, m.name as mapping_name,
sum(a.size) as space_size, sum(a.count) as space_count
from heap_profile_allocation a join
stack_profile_callsite c ON (a.callsite_id = c.id) join
stack_profile_frame f ON (c.frame_id = f.id) join
stack_profile_mapping m ON (f.mapping = m.id)
group by 1, 2, 3, 4, 5, 6, 7 order by space_size desc;
"""


@pytest.mark.timeout(120)
def test_seed_example_query_rows(programs, record):
    binary = programs.path("tiny")
    rec = record([binary], interval=1)
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    upid = profile.only_upid("tiny")
    rows = profile.query(SEED_EXAMPLE_QUERY)
    assert rows, "the seed's query returned no rows"
    assert list(rows[0].keys()) == [
        "callsite_id", "ts", "upid", "name", "rel_pc", "build_id", "mapping_name", "space_size", "space_count",
    ]
    sizes = [r["space_size"] for r in rows]
    assert sizes == sorted(sizes, reverse=True), "rows are not ordered by space_size desc"

    truth = programs.truth("tiny")
    by_name: dict[str, list] = {fn: [] for fn in truth}
    for r in rows:
        if r["upid"] == upid and r["name"] in by_name:
            by_name[r["name"]].append(r)
    for fn, t in truth.items():
        mine = by_name[fn]
        assert len(mine) == 1, f"{fn}: expected one row (one call site, one dump), got {[dict(r) for r in mine]}"
        row = mine[0]
        assert (row["space_size"], row["space_count"]) == (t.space, t.objects), (
            f"{fn}: space_size/space_count expected {t.space}/{t.objects}, got {dict(row)}"
        )
        assert row["mapping_name"] == str(binary) or row["mapping_name"].endswith("/tiny"), dict(row)
        assert row["rel_pc"] > 0, dict(row)
