"""Allocator wrappers folded into their callers (view/wrappers.py), in every view, on a real
recording of tests/programs/wrappers.c: parse_input allocates 300 x 1000 B through xmalloc,
build_index 100 x 2000 B through xcalloc, name_copy 500 x 10 B through xstrdup > xmalloc, and
pool_fill 10 x 4000 B through pool_alloc > xmalloc (the program's own wrapper). Nothing is freed.
"""

from __future__ import annotations

import json
import re
import shutil
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


def test_two_callers_under_five_shared_frames_are_told_apart(record: Recorder, programs: Programs) -> None:
    # GIVEN a program whose two callers of xmalloc share the five frames above them
    rec = record([programs.path("sharedwrap")])
    assert rec.returncode == 0, rec.describe()
    # WHEN report runs without flags
    out = heapscope("report", rec.db)
    # THEN its first self rows are the callers, with the ground truth's bytes, not xmalloc
    table = out[out.index("  self  self %"):].splitlines()[1:3]
    assert [line.split()[-3] for line in table] == ["read_symbols", "read_strings"], out
    assert [line.split()[0] + " " + line.split()[1] for line in table] == ["195.3 KiB", "97.7 KiB"], out
    # AND record's summary has one line for each, and the lines differ where the stacks do
    err = rec.stderr.decode().splitlines()
    start = next(i for i, ln in enumerate(err) if "largest stacks" in ln) + 1
    first, second = err[start], err[start + 1]
    assert first.endswith("> pass_four > read_symbols"), err
    assert second.endswith("> pass_four > read_strings"), err


SQL = b"""CREATE TABLE t(a INTEGER, b TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<200000)
INSERT INTO t SELECT x, hex(randomblob(16)) FROM c;
SELECT count(*) FROM (SELECT b FROM t ORDER BY b);
"""


def test_sqlite3_shell_through_its_static_wrappers(record: Recorder, tmp_path: Path) -> None:
    # GIVEN the sqlite3 shell inserting and sorting 200k rows, its allocations through
    # sqlite3Malloc > sqlite3MemMalloc (static: no symbol in a stripped libsqlite3)
    sqlite3 = shutil.which("sqlite3")
    if sqlite3 is None:
        pytest.skip("no sqlite3 shell: apt-get install sqlite3")
    rec = record([sqlite3, str(tmp_path / "t.db")], interval=None, input=SQL, timeout=150)
    assert rec.returncode == 0, rec.describe()
    assert b"200000" in rec.stdout
    # WHEN report runs without flags, piped
    out = heapscope("report", rec.db)
    table = out[out.index("  self  self %"):].splitlines()[1:4]
    functions = [line.split()[-3] for line in table]
    # THEN its first self rows are not sqlite's wrappers
    assert not any(re.fullmatch(r"sqlite3(Malloc|MemMalloc|Realloc|MallocZero|_malloc64)", f) for f in functions), out
    assert "sqlite3Malloc" in out.split("\n", 1)[0], out  # folded, and said so
    # AND every row fits 120 columns
    assert all(len(line) <= 120 for line in out.splitlines()), out
    # AND a row left as libsqlite3.so.0+0x... (its static functions, when the library has no
    # symbols for them) comes with a line that says why and how to name it
    if any(f.startswith("libsqlite3.so") and "+0x" in f for f in functions):
        head = out[:out.index("  self  self %")]
        assert "unnamed:" in head and "libsqlite3.so.0+0x… (static functions, no symbol in the file)" in head, out
        assert "heapscope symbolize" in head, out
