"""Allocator wrappers folded into their callers (view/wrappers.py), in every view, on a real
recording of tests/programs/wrappers.c: parse_input allocates 300 x 1000 B through xmalloc,
build_index 100 x 2000 B through xcalloc, name_copy 500 x 10 B through xstrdup > xmalloc, and
pool_fill 10 x 4000 B through pool_alloc > xmalloc (the program's own wrapper). Nothing is freed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs, Recorder, run_process

from heapscope.store.reader import open_profile
from heapscope.view.flamegraph import payload, profile_graphs
from heapscope.view.leaks import find_leaks
from heapscope.view.report import build_reports
from heapscope.view.wrappers import fold_wrappers

pytestmark = pytest.mark.timeout(180)

FOLDED = {"parse_input": 300_000, "build_index": 200_000, "pool_alloc": 40_000, "name_copy": 5_000}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rec = Recorder(tmp_path_factory.mktemp("wrappers"))([Programs().path("wrappers")])
    assert rec.returncode == 0, rec.describe()
    return rec.db


def heapscope(*args: object) -> str:
    run = run_process([*HEAPSCOPE, *map(str, args)], timeout=120)
    assert run.returncode == 0, run.describe()
    return run.stdout.decode() + run.stderr.decode()


def _selfs(db: Path, keep: bool = False, extra: tuple[str, ...] = ()) -> dict[str, int]:
    with open_profile(db) as profile:
        fold_wrappers(profile, keep, extra)
        [r] = build_reports(profile, "space")
    return {row.function: row.self_value for row in r.rows if row.self_value}


def test_the_report_names_the_callers_of_the_wrappers(db: Path) -> None:
    # GIVEN a program whose every allocation goes through a wrapper
    # WHEN report runs without flags
    out = heapscope("report", db)
    # THEN its header says which wrappers were folded, and the self column opens with the callers
    assert "wrappers folded into their callers: xcalloc, xmalloc, xstrdup (--keep-wrappers shows them)" in out
    table = out[out.index("  self  self %"):].splitlines()[1:5]
    assert [line.split()[-3] for line in table] == ["parse_input", "build_index", "pool_alloc", "name_copy"], out
    assert "xmalloc" not in out.split("wrappers folded")[1].split("\n", 1)[1]
    # AND the figures are the ground truth's, exactly (interval 1)
    assert _selfs(db) == FOLDED


def test_keep_wrappers_shows_them_and_fold_adds_a_projects_own(db: Path) -> None:
    kept = _selfs(db, keep=True)
    assert kept == {"xmalloc": 345_000, "xcalloc": 200_000}
    out = heapscope("report", db, "--keep-wrappers")
    assert "wrappers folded" not in out and " xmalloc " in out
    assert _selfs(db, extra=("pool_alloc",)) == {**{k: v for k, v in FOLDED.items() if k != "pool_alloc"},
                                                 "pool_fill": 40_000}
    assert "pool_alloc, xcalloc" in heapscope("report", db, "--fold", "pool_a.*")


def test_leaks_diff_flamegraph_and_exports_fold_them_too(db: Path, tmp_path: Path) -> None:
    # leaks: each stack starts at the caller
    with open_profile(db) as profile:
        fold_wrappers(profile)
        [pl] = find_leaks(profile, None, None)
        assert sorted(leak.stack[0].function for leak in pl.leaks) == sorted(FOLDED)
        # the flamegraph's data has no wrapper frame left
        graph = json.dumps(payload(profile_graphs(profile), title="t"))
        assert "xmalloc" not in graph and "parse_input" in graph
    assert "wrappers folded into their callers" in heapscope("leaks", db)
    assert "wrappers folded into their callers" in heapscope("diff", db, db)
    # the exports' default view: collapsed stacks end at the callers
    collapsed = heapscope("export", db, "--format", "collapsed", "-o", "-")
    leaves = {line.rsplit(" ", 1)[0].split(";")[-1] for line in collapsed.splitlines() if ";" in line}
    assert leaves == {"parse_input", "build_index", "pool_alloc", "name_copy"}, collapsed
    assert "xmalloc" in heapscope("export", db, "--format", "collapsed", "-o", "-", "--keep-wrappers")
    page = tmp_path / "f.html"
    assert "wrote" in heapscope("flamegraph", db, "-o", page)
