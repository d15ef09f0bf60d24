"""Lifetimes and sizes of sampled allocations, under the real client and producer.

tests/programs/lifetimes.c has three paths of known lifetimes and sizes: path_temp frees each
block right after its malloc, path_hold keeps its blocks at least HOLD_MS ms, path_never never
frees. The temporary view must rank them so, the lifetimes' medians must fall in the right
buckets, and at interval 1 the counts (heaptrack's definition included) are exact.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hs_integration import HEAPSCOPE, Programs, Recorder, run_process

from heapscope.store.reader import open_profile
from heapscope.store.select import select_heap
from heapscope.view import lifetimes as lt

pytestmark = pytest.mark.timeout(180)

MS = 1_000_000
LEAVES = {"temp_once": "path_temp", "hold_alloc": "path_hold", "never_alloc": "path_never"}


def _consts(programs: Programs) -> tuple[int, int, int, int]:
    out = subprocess.run([str(programs.path("lifetimes")), "--print-truth"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("lifetimes "))
    temp_n, hold_n, hold_ms, never_n = (int(v) for v in line.split()[1:])
    return temp_n, hold_n, hold_ms, never_n


def _rows(db: Path, threshold: int | str) -> dict[str, lt.LifetimeRow]:
    with open_profile(db) as profile:
        select_heap(profile, None)
        (p,) = profile.processes()
        lives = lt.read(profile, [p.info.upid])
        assert lives is not None
        interval = p.flags.sampling_interval_bytes if p.flags else 1
        return {r.function: r for r in lt.lifetime_rows(profile, lives, threshold, interval)}


def _report(db: Path, *args: str) -> str:
    run = run_process([*HEAPSCOPE, "report", str(db), *args], timeout=60)
    assert run.returncode == 0, run.describe()
    return run.stdout.decode()


def _stack_order(text: str) -> list[str]:
    """The paths of the temporary view's stack lines, in their order."""
    return [path for line in text.splitlines() for path in LEAVES.values() if f"> {path} >" in line]


@pytest.mark.parametrize("clock", ["default", "monotonic"])
def test_interval_1_counts_are_exact(programs: Programs, record: Recorder, clock: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The default clock is the TSC where producer/tsc.py finds it usable, converted by the producer
    if clock == "monotonic":
        monkeypatch.setenv("HEAPSCOPE_CLOCK", "monotonic")
    temp_n, hold_n, hold_ms, never_n = _consts(programs)
    rec = record([programs.path("lifetimes")], interval=1)
    assert rec.returncode == 0, rec.describe()
    # the records' times are CLOCK_MONOTONIC ns, whichever clock stamped them: the peak (a
    # malloc's ts) falls within the process's life
    with sqlite3.connect(rec.db) as db:
        ((start, end, peak),) = db.execute(
            "SELECT start_ts, end_ts, (SELECT MAX(ts) FROM heapscope_peak_allocation) FROM process").fetchall()
    db.close()
    assert start <= peak <= end, (start, peak, end)
    rows = _rows(rec.db, lt.HEAPTRACK)
    temp, hold, never = rows["temp_once"], rows["hold_alloc"], rows["never_alloc"]
    # every allocation counted, none estimated
    assert (temp.alloc.value, hold.alloc.value, never.alloc.value) == (temp_n, hold_n, never_n)
    assert temp.alloc.stderr == hold.alloc.stderr == 0
    # heaptrack's definition: each temp block is freed before its thread's next malloc, no held
    # block is (path_never's mallocs come between)
    assert (temp.temp.value, hold.temp.value, never.temp.value) == (temp_n, 0, 0)
    assert (temp.held.value, hold.held.value, never.held.value) == (0, 0, never_n)
    # lifetimes: the holds' median and p90 at HOLD_MS or more, the temps' median under 1 ms
    assert hold.median is not None and hold.median[0] >= hold_ms * MS
    assert temp.median is not None and temp.median[1] is not None and temp.median[1] <= MS
    assert never.median is None
    # the temporary view (1 ms) ranks path_temp first and alone: nothing held was freed so soon
    text = _report(rec.db, "--view", "temporary")
    assert _stack_order(text) == ["path_temp"], text
    text = _report(rec.db, "--view", "temporary", "--temporary", "heaptrack")
    assert f"{temp_n:,}" in text and _stack_order(text) == ["path_temp"], text


def test_sizes_at_interval_1(programs: Programs, record: Recorder) -> None:
    temp_n, hold_n, _hold_ms, never_n = _consts(programs)
    rec = record([programs.path("lifetimes")], interval=1)
    assert rec.returncode == 0, rec.describe()
    with open_profile(rec.db) as profile:
        (p,) = profile.processes()
        lives = lt.read(profile, [p.info.upid])
        assert lives is not None
        sizes = {(r.lo, r.hi): r.allocations.value for r in lt.size_rows(lives.values(), 1)}
    # 256 B, 4096 B and 100000 B, each in its power-of-two bucket, every allocation
    assert sizes == {(256, 512): temp_n, (4096, 8192): hold_n, (65536, 131072): never_n}
    text = _report(rec.db, "--sizes", "--focus", "path_hold")
    assert "4.0 KiB-8.0 KiB" in text and "256 B-512 B" not in text, text


@pytest.mark.parametrize("seed", [1, 20240601])
def test_default_interval_ranks_and_medians_within_error(programs: Programs, record: Recorder, seed: int) -> None:
    temp_n, hold_n, hold_ms, never_n = _consts(programs)
    rec = record([programs.path("lifetimes")], interval=None, seed=seed)
    assert rec.returncode == 0, rec.describe()
    rows = _rows(rec.db, MS)
    temp, hold, never = rows["temp_once"], rows["hold_alloc"], rows["never_alloc"]
    # the temps' allocations are estimated (256 B < the interval) within 4 standard errors; the
    # blocks of at least the interval are recorded exactly
    assert abs(temp.alloc.value - temp_n) <= 4 * temp.alloc.stderr, temp
    assert (hold.alloc.value, never.alloc.value) == (hold_n, never_n)
    # nearly every temp is freed within 1 ms (a preempted one may not be); none of the others
    assert temp.temp.value >= 0.9 * temp.alloc.value and hold.temp.value == never.temp.value == 0
    assert hold.median is not None and hold.median[0] >= hold_ms * MS
    assert temp.median is not None and temp.median[1] is not None and temp.median[1] <= MS
    assert never.held.value == never_n and never.median is None
    text = _report(rec.db, "--view", "temporary")
    assert _stack_order(text) == ["path_temp"], text
    assert "± " in text, text  # estimates carry their standard error


def test_a_profile_without_lifetimes_says_so(programs: Programs, record: Recorder, tmp_path: Path) -> None:
    # GIVEN a profile as written before the lifetime tables
    rec = record([programs.path("lifetimes")], interval=1)
    assert rec.returncode == 0, rec.describe()
    with sqlite3.connect(rec.db) as db:
        db.execute("DROP TABLE heapscope_callsite_lifetime")
        db.execute("DROP TABLE heapscope_callsite_size")
    db.close()
    # THEN the lifetime views say it in one line, and the other views read it as before
    for args in (("--view", "temporary"), ("--lifetimes",), ("--sizes",)):
        run = run_process([*HEAPSCOPE, "report", str(rec.db), *args], timeout=60)
        out = run.stdout.decode()
        assert run.returncode == 0, run.describe()
        assert out.strip().endswith("record the program again for --view temporary, --lifetimes and --sizes")
        assert len(out.splitlines()) == 1 and not run.stderr, run.describe()
    assert "never_alloc" in _report(rec.db)


@pytest.mark.parametrize("args", [("--temporary", "soon"), ("--view", "temporary", "--temporary", "0ms"),
                                  ("--lifetimes", "--sizes"), ("--temporary", "1ms")])
def test_bad_lifetime_options_get_one_line(programs: Programs, record: Recorder, args: tuple[str, ...]) -> None:
    rec = record([programs.path("tiny")], interval=1)
    assert rec.returncode == 0, rec.describe()
    run = run_process([*HEAPSCOPE, "report", str(rec.db), *args, *(("--lifetimes",) if "soon" in args else ())],
                      timeout=60)
    assert run.returncode != 0 and len(run.stderr.strip().splitlines()) == 1, run.describe()
    assert b"Traceback" not in run.stderr


def test_diff_of_temporary_per_function(programs: Programs, record: Recorder) -> None:
    # GIVEN lifetimes.c's profile and one of a program without its paths
    before = record([programs.path("lifetimes")], interval=1)
    after = record([programs.path("tiny")], interval=1)
    assert before.returncode == after.returncode == 0, before.describe() + after.describe()
    run = run_process([*HEAPSCOPE, "diff", str(before.db), str(after.db), "--view", "temporary"], timeout=60)
    assert run.returncode == 0, run.describe()
    text = run.stdout.decode()
    # THEN temp_once's temporary bytes are the largest shrink, to nothing, its allocations exact
    shrinks = text.split("largest shrinks:", 1)[1].splitlines()
    assert "temp_once" in shrinks[2] and "-4.9 MiB" in shrinks[2] and " 0 B " in shrinks[2], text
    assert "hold_alloc" not in text and "never_alloc" not in text, text
    one = run_process([*HEAPSCOPE, "diff", str(before.db), "--dump-a", "1", "--view", "temporary"], timeout=60)
    assert one.returncode != 0 and b"two profiles" in one.stderr, one.describe()


def test_flamegraph_has_the_temporary_view_and_node_sizes(programs: Programs, record: Recorder) -> None:
    from heapscope.view.flamegraph import payload, render_html
    from heapscope.view.flamegraph_heaps import heap_graphs

    temp_n, _hold_n, _hold_ms, _never_n = _consts(programs)
    rec = record([programs.path("lifetimes")], interval=1)
    assert rec.returncode == 0, rec.describe()
    with open_profile(rec.db) as profile:
        heaps, at = heap_graphs(profile)
        data = payload(heaps[at].graphs, title="t")
    assert data["views"] == ["space", "alloc_space", "objects", "alloc_objects", "temporary"]
    procs: Any = data["processes"]
    strings: Any = data["strings"]
    (proc,) = procs
    names = [strings[k] for k in proc["name"]]
    temp, hold = names.index("temp_once"), names.index("hold_alloc")
    # the temporary view: path_temp's bytes (nearly all freed within 1 ms), none of path_hold's
    for dump in proc["dumps"]:
        sp = dump["self"]["temporary"]
        selfs = {}
        i = 0
        for k in range(0, len(sp), 2):
            i += sp[k]
            selfs[i] = sp[k + 1]
        assert 0.9 * temp_n * 256 <= selfs[temp] <= temp_n * 256 and hold not in selfs, selfs
    # each node's sizes: (node, bucket, allocations, bytes), temp_once's 20000 in [256, 512)
    sizes = proc["sizes"]
    entries = [tuple(sizes[k:k + 4]) for k in range(0, len(sizes), 4)]
    assert (temp, 8, temp_n, temp_n * 256) in entries and (hold, 12, 200, 200 * 4096) in entries, entries
    assert "sizesHtml" in render_html(data)


def test_flamegraph_reads_each_new_table_once_for_all_processes(programs: Programs, record: Recorder,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The page read the lifetime, size and memory-sample tables once per process: on a build's
    profile (113 processes, ~700k rows) that was 25 s of a 34 s page. One read each now, and
    every process still gets its own figures."""
    from heapscope.view.flamegraph_heaps import heap_graphs

    exe = str(programs.path("lifetimes"))
    rec = record(["sh", "-c", f"{exe}; {exe}; {exe}"], interval=1)
    assert rec.returncode == 0, rec.describe()
    tables = ("heapscope_callsite_lifetime", "heapscope_callsite_size", "heapscope_memory_sample")
    reads = dict.fromkeys(tables, 0)

    def count(sql: str) -> None:  # the check of the rows' types (store/lifetimes.py) is not a read of them
        for t in tables:
            reads[t] += (sql.lstrip().upper().startswith("SELECT") and (f"FROM {t}" in sql or f"FROM main.{t}" in sql)
                         and "typeof(" not in sql)

    from store_support import read_in_c

    read_in_c(monkeypatch, count)
    with open_profile(rec.db) as profile:
        profile.sql_connection().set_trace_callback(count)
        heaps, at = heap_graphs(profile)
        graphs = [g for g in heaps[at].graphs if g.memory is not None]
    assert len(graphs) >= 3, [g.label for g in heaps[at].graphs]
    assert all(g.sizes and g.memory is not None and g.memory.node for g in graphs), [g.label for g in graphs]
    assert reads == dict.fromkeys(tables, 1), reads
    # Past MAX_IN_LIST processes the tables are read whole and filtered: the same answers.
    from heapscope.store.lifetimes import read_lifetimes_by_process
    from heapscope.store.series import memory_samples_by_process

    real = [g.upid for g in graphs]
    many = [*real, *range(10**6, 10**6 + 600)]
    with open_profile(rec.db) as profile:
        lives, lives_many = read_lifetimes_by_process(profile, real), read_lifetimes_by_process(profile, many)
        assert {u: {cs: (v.freed, v.held, v.sizes) for cs, v in d.items()} for u, d in lives.items()} == \
            {u: {cs: (v.freed, v.held, v.sizes) for cs, v in d.items()} for u, d in lives_many.items()}
        assert memory_samples_by_process(profile, real) == memory_samples_by_process(profile, many)


def test_flamegraph_temporary_view_and_size_tooltip_in_chromium(programs: Programs, record: Recorder,
                                                                tmp_path: Path) -> None:
    from test_views import browser

    temp_n, _hold_n, _hold_ms, _never_n = _consts(programs)
    rec = record([programs.path("lifetimes")], interval=1)
    assert rec.returncode == 0, rec.describe()
    html = tmp_path / "lifetimes.html"
    run = run_process([*HEAPSCOPE, "flamegraph", str(rec.db), "-o", str(html)], timeout=60)
    assert run.returncode == 0, run.describe()
    res = browser(tmp_path, html, [
        {"do": "click", "selector": "#views button[data-view='temporary']"},
        {"do": "eval", "js": "[window.heapscope.state.view, window.heapscope.rootTotal()]"},
        {"do": "hoverFrame", "name": "temp_once"},
        {"do": "eval", "js": "document.getElementById('tip').innerText"},
        {"do": "screenshot", "path": str(tmp_path / "temporary.png")},
        {"do": "click", "selector": "#views button[data-view='space']"},
        {"do": "hoverFrame", "name": "never_alloc"},
        {"do": "eval", "js": "document.getElementById('tip').innerText"},
    ])
    r = res["results"]
    # the temporary view: path_temp's bytes, nearly all freed within 1 ms
    assert r[1][0] == "temporary" and 0.9 * temp_n * 256 <= r[1][1] <= temp_n * 256, r[1]
    # each tooltip has the node's size histogram: 20,000 in 256 B-512 B; 50 in 64-128 KiB
    assert "sizes asked for" in r[3] and "256 B–512 B" in r[3] and f"{temp_n:,}" in r[3], r[3]
    assert "64.0 KiB–128.0 KiB" in r[7] and "\t50\t" in r[7], r[7]


def test_lifetime_rows_as_written_and_damaged_read_alike(programs: Programs, record: Recorder,
                                                         tmp_path: Path) -> None:
    """The lifetime, size and memory-sample rows are taken as they come when SQLite says all of
    them have the types `record` writes (one check in SQL, not one per value: a build's
    flamegraph spent ~4 s there); any other value goes through the checks: one read as before,
    damage a ProfileError."""
    from heapscope.errors import ProfileError
    from heapscope.store.lifetimes import life_sums, life_sums_by_process, read_lifetimes_by_process
    from heapscope.store.series import memory_samples_by_process

    rec = record([programs.path("lifetimes")], interval=1)
    assert rec.returncode == 0, rec.describe()

    def lives(db: Path) -> tuple[object, object, object]:
        with open_profile(db) as profile:
            upids = [int(p.info.upid) for p in profile.processes()]
            read = read_lifetimes_by_process(profile, upids)
            sums = life_sums_by_process(profile, upids, 1_000_000)  # the flamegraph's: summed in SQL
            assert sums == {u: life_sums(d, 1_000_000) for u, d in read.items()}
            return ({u: {int(cs): (sorted(v.freed.items(), key=repr), sorted(v.held.items(), key=repr), v.unknown,
                                   v.heaptrack, v.sizes) for cs, v in d.items()}
                     for u, d in read.items()},
                    memory_samples_by_process(profile, upids), sums)

    fast = lives(rec.db)
    assert fast[0] and fast[1] and fast[2], fast
    # WHEN counts are stored as text, sizes as floats (values.py reads them)
    odd = tmp_path / "odd.db"
    odd.write_bytes(rec.db.read_bytes())
    db = sqlite3.connect(odd)
    db.execute("UPDATE heapscope_callsite_lifetime SET count = CAST(count AS TEXT), size = size * 1.0")
    db.execute("UPDATE heapscope_callsite_size SET count = CAST(count AS TEXT)")
    db.execute("UPDATE heapscope_memory_sample SET weight = CAST(weight AS TEXT), size = size * 1.0")
    db.commit()
    db.close()
    # THEN the figures are the same
    assert lives(odd) == fast
    # AND a value that is no number (text, a blob) is a ProfileError naming its column
    for table, column, value in (("heapscope_callsite_size", "hi", "'junk'"),
                                 ("heapscope_memory_sample", "alloc_ts", "X'00'")):
        bad = tmp_path / f"{column}.db"
        bad.write_bytes(odd.read_bytes())
        db = sqlite3.connect(bad)
        db.execute(f"UPDATE {table} SET {column} = {value} WHERE rowid = (SELECT MIN(rowid) FROM {table})")
        db.commit()
        db.close()
        with pytest.raises(ProfileError, match=f"{table}.{column}"):
            lives(bad)
        if table == "heapscope_callsite_size":
            with open_profile(bad) as profile, pytest.raises(ProfileError, match=f"{table}.{column}"):
                life_sums_by_process(profile, [int(p.info.upid) for p in profile.processes()], 1_000_000)
