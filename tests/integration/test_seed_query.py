"""The example query of Perfetto's heapprofd docs (docs/profile.md) runs unchanged on our profile."""

from __future__ import annotations

from typing import Any

import pytest
from hs_integration import SEED_EXAMPLE_QUERY, Programs, Recorder


@pytest.mark.timeout(120)
def test_seed_example_query_rows(programs: Programs, record: Recorder) -> None:
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
    by_name: dict[str, list[Any]] = {fn: [] for fn in truth}
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
