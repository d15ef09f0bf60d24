"""The first answer is the right one: what `report`, `flamegraph` and `leaks` show
without flags for programs that free their memory before exiting, with inlined code, at the
default sampling interval, and as trees of processes.

peakfree (tests/programs/peakfree.c) holds 4000 x 256 B in hold_small and 16 x 64 KiB in
hold_big at its peak, frees both, and keeps 10 x 50 B from leftover to the end.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
from hs_integration import HEAPSCOPE, Programs, Recorder, run_process

from heapscope.estimate import Estimate, estimate_count
from heapscope.store.peak_tops import peak_callsites, peak_top
from heapscope.store.reader import open_profile
from heapscope.symbolize.llvm import find_llvm_symbolizer
from heapscope.view.flamegraph import payload, profile_graphs
from heapscope.view.report import build_reports

pytestmark = pytest.mark.timeout(180)

SMALL = (4000, 4000 * 256)
BIG = (16, 16 * 65536)
LEFT = (10, 500)


def _report(db: Path, *args: str) -> str:
    run = run_process([*HEAPSCOPE, "report", str(db), *args], timeout=60)
    assert run.returncode == 0, run.describe()
    return run.stdout.decode()


def _rows(db: Path, view: str, **kw: object) -> dict[str, tuple[int, int, str]]:
    with open_profile(db) as prof:
        [r] = build_reports(prof, view, **kw)  # type: ignore[arg-type]
    return {x.function: (x.self_value, x.total_value, x.source) for x in r.rows}


def test_the_default_report_shows_the_peak_freed_before_exit(record: Recorder, programs: Programs) -> None:
    # GIVEN peakfree recorded exactly (-i 1): its peak is freed before it exits
    rec = record([programs.path("peakfree")])
    assert rec.returncode == 0, rec.describe()
    # WHEN report runs without flags
    out = _report(rec.db)
    # THEN it shows the peak, says so, and ranks the peak's functions by what they hold themselves
    assert re.search(r"\n  showing: +peak at [0-9.]+ s \(--dump peak\|end\|N\)\n", out), out
    table = out[out.index("  self  self %"):].splitlines()
    assert table[1].split()[:5] == ["1.0", "MiB", "50.6%", "1.0", "MiB"] and "hold_big" in table[1], out
    assert "hold_small" in table[2] and "1000.0 KiB" in table[2], out
    # AND root frames on every stack are left out, and named
    assert re.search(r"\n  on every stack: .*main \(left out\)\n", out), out
    assert not any(line.split()[-2:-1] == ["main"] for line in table[1:]), out
    # AND the figures are exact at interval 1, the allocations too
    space = _rows(rec.db, "space")
    assert space["hold_big"][:2] == (BIG[1], BIG[1]) and space["hold_small"][:2] == (SMALL[1], SMALL[1])
    assert "leftover" not in space
    objects = _rows(rec.db, "objects")
    assert objects["hold_big"][0] == BIG[0] and objects["hold_small"][0] == SMALL[0]
    # AND --stacks lists the peak's call stacks, largest first, each with its lines
    stacks = _report(rec.db, "--stacks")
    body = stacks[stacks.index("\n\n") + 2:].split("\n\n")
    assert body[0].startswith("  1.0 MiB (50.6%)\n      hold_big  peakfree.c:"), stacks
    assert body[1].startswith("  1000.0 KiB (49.4%)\n      hold_small  peakfree.c:"), stacks
    # AND --dump end shows the exit state: only leftover is left
    end = _rows(rec.db, "space", dump="end")
    assert end["leftover"][0] == LEFT[1] and "hold_small" not in end
    assert "showing:       end (dump 1 of 1," in _report(rec.db, "--dump", "end")


def test_leaks_and_flamegraph_say_which_state_they_show(record: Recorder, programs: Programs,
                                                        tmp_path: Path) -> None:
    rec = record([programs.path("peakfree")])
    assert rec.returncode == 0, rec.describe()
    # WHEN leaks runs: it shows the end, where unfreed means never freed
    run = run_process([*HEAPSCOPE, "leaks", str(rec.db)], timeout=60)
    assert run.returncode == 0, run.describe()
    assert "500 B in 10 allocations never freed (end (dump 1 of 1, exit," in run.stdout.decode()
    # AND the flamegraph opens at the peak, with the dumps on its timeline
    with open_profile(rec.db) as prof:
        graphs = profile_graphs(prof)
        data = payload(graphs, title="t")
    [proc] = cast(list[dict[str, Any]], data["processes"])
    start = proc["dumps"][proc["start"]]
    assert start["label"] == "peak" and start["totals"]["space"] == SMALL[1] + BIG[1]
    assert start["totals"]["objects"] == SMALL[0] + BIG[0]
    assert proc["dumps"][-1]["totals"]["space"] == LEFT[1]
    # AND the command writes the page
    out = tmp_path / "fg.html"
    run = run_process([*HEAPSCOPE, "flamegraph", str(rec.db), "-o", str(out)], timeout=60)
    assert run.returncode == 0 and out.exists(), run.describe()


def test_object_counts_are_estimates_within_their_error(record: Recorder, programs: Programs) -> None:
    # GIVEN peakfree recorded at the default interval (4096 bytes), a fixed seed
    rec = record([programs.path("peakfree")], interval=None)
    assert rec.returncode == 0, rec.describe()
    with open_profile(rec.db) as prof:
        [p] = prof.processes()
        assert p.flags is not None and p.flags.sampling_interval_bytes == 4096
        [r] = build_reports(prof, "objects")
    rows = {x.function: x.self_value for x in r.rows}
    # THEN 64 KiB blocks are recorded exactly: 16, no error
    assert rows["hold_big"] == BIG[0]
    # AND 256-byte ones, ~6% of them sampled, are estimated within 4 standard errors
    samples, est = _callsite_estimate(prof_path=rec.db, function="hold_small")
    assert 100 < samples < 600
    assert est.stderr > 0 and abs(est.value - SMALL[0]) <= 4 * est.stderr, (samples, est)
    assert abs(rows["hold_small"] - SMALL[0]) <= 4 * est.stderr
    # AND the report says they are estimates, from how many samples
    out = _report(rec.db, "--view", "objects")
    m = re.search(r"\n  objects: +~([0-9,]+) allocations \(estimate, standard error ([0-9,]+)\) from ([0-9,]+)"
                  r" samples\n", out)
    assert m, out
    assert int(m[3].replace(",", "")) == samples + BIG[0]


def _callsite_estimate(prof_path: Path, function: str) -> tuple[int, Estimate]:
    with open_profile(prof_path) as prof:
        [p] = prof.processes()
        peak = prof.peak_values(p.info.upid)
        assert peak is not None
        frames, callsites = prof.frames(), prof.callsites()
        hits = [v for cs, v in peak[1].items() if frames[callsites[cs][1]].name == function]
    [v] = hits
    return v.objects, estimate_count(v.objects, v.space, 4096, v.real_space)


INLINED_SRC = Path(__file__).parents[1] / "unit" / "symbolize" / "inlined.cpp"


@pytest.mark.skipif(find_llvm_symbolizer() is None, reason="llvm-symbolizer not installed (Debian package `llvm`)")
@pytest.mark.skipif(shutil.which("c++") is None, reason="needs c++")
def test_inlined_frames_in_report_tree_and_flamegraph(record: Recorder, tmp_path: Path) -> None:
    # GIVEN a -O2 -g program whose malloc sits in two helpers inlined into outer_fn (line 7)
    prog = tmp_path / "inl"
    src = tmp_path / "inlined.cc"
    src.write_text(INLINED_SRC.read_text())
    subprocess.run(["c++", "-O2", "-g", "-fno-omit-frame-pointer", "-o", str(prog), str(src)], check=True,
                   timeout=120)
    rec = record([prog])
    assert rec.returncode == 0, rec.describe()
    # WHEN report runs on the alloc view (the block is freed before exit)
    rows = _rows(rec.db, "alloc_space")
    # THEN the inlined functions are rows of their own, marked, each with its own line
    assert rows["inner_alloc [inlined]"][2].endswith("/inlined.cc:4")
    assert rows["middle_alloc [inlined]"][2].endswith("/inlined.cc:5")
    assert rows["app::outer_fn(unsigned long)"][2].endswith("/inlined.cc:7")
    assert rows["inner_alloc [inlined]"][0] > 0  # the innermost holds the bytes itself
    # AND --tree nests them under outer_fn with their lines
    tree = _report(rec.db, "--view", "alloc_space", "--tree", "--min-percent", "0")
    lines = tree.splitlines()
    i = next((k for k, x in enumerate(lines) if "app::outer_fn(unsigned long)" in x), None)
    assert i is not None, tree
    assert "inlined.cc:7" in lines[i]
    assert "middle_alloc [inlined]" in lines[i + 1] and "inlined.cc:5" in lines[i + 1]
    assert "inner_alloc [inlined]" in lines[i + 2] and "inlined.cc:4" in lines[i + 2]
    # AND the flamegraph's nodes do too; outer_fn's tooltip line is its own (7), not an inline's
    with open_profile(rec.db) as prof:
        data = payload(profile_graphs(prof, dump="end"), title="t")
    strings = cast(list[str], data["strings"])
    [proc] = cast(list[dict[str, Any]], data["processes"])
    named = {strings[n]: (strings[s] if s >= 0 else "") for n, s in zip(proc["name"], proc["src"], strict=True)}
    assert named["app::outer_fn(unsigned long)"].endswith("inlined.cc:7")
    assert named["inner_alloc [inlined]"].endswith("inlined.cc:4")


def test_a_shell_script_gives_a_process_table_and_merged_views(record: Recorder, programs: Programs,
                                                               tmp_path: Path) -> None:
    # GIVEN a shell script that runs peakfree twice and tiny once
    peakfree, tiny = programs.path("peakfree"), programs.path("tiny")
    script = tmp_path / "build.sh"
    script.write_text(f"#!/bin/sh\n{peakfree}\n{peakfree}\n{tiny}\n")
    script.chmod(0o755)
    rec = record(["/bin/sh", str(script)])
    assert rec.returncode == 0, rec.describe()
    # WHEN report runs: it opens with the processes ranked by peak
    out = _report(rec.db)
    head = out[:out.index("\n\n")].splitlines()
    assert re.match(r"\d+ processes, by peak", head[0]), out
    assert head[1].split() == ["pid", "peak", "allocated", "samples", "lifetime", "executable"]
    assert head[2].endswith("peakfree") and head[3].endswith("peakfree"), out
    assert head[2].split()[1:3] == ["2.0", "MiB"], out
    # AND --merge exe sums the two peakfree processes, each at its own peak
    with open_profile(rec.db) as prof:
        merged = build_reports(prof, "space", merge="exe")
    [pf] = [r for r in merged if len(r.processes) == 2]
    by_fn = {x.function: x.self_value for x in pf.rows}
    assert by_fn["hold_small"] == 2 * SMALL[1] and by_fn["hold_big"] == 2 * BIG[1]
    assert "processes merged" in _report(rec.db, "--merge", "exe")
    # AND the flamegraph has an "all processes" graph first, one root per process
    with open_profile(rec.db) as prof:
        graphs = profile_graphs(prof)
        n = len([p for p in prof.processes() if prof.dumps(p.info.upid)])
    assert graphs[0].label == "all processes"
    roots = [i for i, p in enumerate(graphs[0].tree.parent) if p < 0]
    assert len(roots) == n == len(graphs) - 1
    assert sum(graphs[0].snapshots[0].self_values["space"]) == sum(
        sum(g.snapshots[g.start].self_values["space"]) for g in graphs[1:])
    # AND the pprof export names the processes, the largest first
    pb = tmp_path / "out.pb.gz"
    run = run_process([*HEAPSCOPE, "export", str(rec.db), "-f", "pprof", "-o", str(pb)], timeout=60)
    assert run.returncode == 0, run.describe()
    raw = gzip.decompress(pb.read_bytes())
    assert b"peakfree (pid" in raw and b": peak at" in raw



DEEPLIB = '''\
def a(n):
    return b(n)


def b(n):
    return c(n)


def c(n):
    return d(n)


def d(n):
    return e(n)


def e(n):
    return [bytearray(n) for _ in range(200)]  # INNER
'''

JOB = '''\
import os
import sys

sys.path.insert(0, sys.argv[1])
import deeplib

KEEP = []


def load():
    KEEP.append(deeplib.a(5000))  # LOAD


def main():
    load()  # MAIN


main()
os._exit(0)
'''


def test_a_python_summary_line_names_the_programs_own_frame_before_library_internals(tmp_path: Path) -> None:
    # GIVEN a program whose memory is made five frames deep in a library (in a site-packages)
    from python_support import installed_pythons
    pythons = installed_pythons()
    if not pythons:
        pytest.skip("no CPython 3.8-3.13 installed")
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "deeplib.py").write_text(DEEPLIB)
    job = tmp_path / "pd_job.py"
    job.write_text(JOB)
    line = {m: i + 1 for i, ln in enumerate(JOB.splitlines()) for m in ("LOAD", "MAIN") if f"# {m}" in ln}
    inner = next(i + 1 for i, ln in enumerate(DEEPLIB.splitlines()) if "# INNER" in ln)
    # WHEN it is recorded
    run = run_process([*HEAPSCOPE, "record", "-o", str(tmp_path / "job.db"), "-i", "1", "--", str(pythons[-1]),
                       str(job), str(lib)], timeout=150)
    assert run.returncode == 0, run.describe()
    err = run.stderr.decode().splitlines()
    first = err[next(i for i, ln in enumerate(err) if "largest stacks" in ln) + 1]
    # THEN the summary's first line shows the program's own frame, then the library's innermost ones
    assert f"load (pd_job.py:{line['LOAD']}) > … > " in first, err
    assert first.endswith(f"(deeplib.py:{inner})"), err  # e, or its list comprehension before 3.12


def test_report_of_deep_templates_fits_120_columns_when_piped(record: Recorder, programs: Programs) -> None:
    # GIVEN a C++ program allocating inside deep templates (frames of thousands of characters)
    rec = record([programs.path("templates")])
    assert rec.returncode == 0, rec.describe()
    # WHEN report runs piped, as a table, as stacks and as a tree (120 columns, whatever $COLUMNS says)
    piped = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    outs = {}
    for args in ((), ("--stacks",), ("--tree",)):
        run = run_process([*HEAPSCOPE, "report", str(rec.db), *args], timeout=60, env=piped)
        assert run.returncode == 0, run.describe()
        outs[args] = run.stdout.decode()
    # THEN every line fits 120 columns, names elided in the middle
    for out in outs.values():
        assert all(len(line) <= 120 for line in out.splitlines()), out
    table = outs[()].split("  self  self %")[1].splitlines()
    assert any("std::vector<…>::_M_realloc_insert" in line for line in table), "\n".join(table)
    # AND the location column starts at the same place on every row, on the first screen
    locations = [(line, [w for w in line.split() if re.fullmatch(r"[\w.+-]+:\d+", w)]) for line in table[1:]]
    starts = {line.index(found[0]) for line, found in locations if found}
    assert len(starts) == 1 and max(starts) < 120, table
    # AND --wide gives the full names
    assert "_M_realloc_insert<std::pair<" in _report(rec.db, "--wide")


def test_flamegraph_timeline_counts_from_the_process_start(record: Recorder, programs: Programs) -> None:
    # GIVEN peakfree, whose peak is freed before its exit
    rec = record([programs.path("peakfree")])
    assert rec.returncode == 0, rec.describe()
    # WHEN the flamegraph's data is made
    with open_profile(rec.db) as prof:
        [proc] = prof.processes()
        start = proc.info.start_ts
        data = payload(profile_graphs(prof), title="t")
    [graph] = cast(list[dict[str, Any]], data["processes"])
    # THEN its timeline's 0 s is the process's start (its client's clock as it connected, the
    # records' clock: no snapshot is earlier), not its first snapshot (the peak), so the peak is
    # drawn where it happened (at the clock's resolution), before the end
    assert graph["t0"] == start > 0
    labels = [d["label"] for d in graph["dumps"]]
    peak, end = graph["dumps"][labels.index("peak")], graph["dumps"][-1]
    assert 0 <= peak["ts"] - graph["t0"] < end["ts"] - graph["t0"]
    # AND the page opens at the peak
    assert graph["start"] == labels.index("peak")


DEMO_SRC = Path(__file__).parents[2] / "examples" / "demo" / "demo.c"


def test_report_tree_lists_siblings_by_total_largest_first(record: Recorder, tmp_path: Path) -> None:
    # GIVEN examples/demo, whose main holds 8 MiB through load_index and 1 MiB through build_lookup
    # at its peak (load_index is called first but build_lookup sorts first by name)
    prog = tmp_path / "demo"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", str(prog), str(DEMO_SRC)], check=True,
                   timeout=120)
    rec = record([prog])
    assert rec.returncode == 0, rec.describe()
    # WHEN report --tree prints main's subtree
    tree = _report(rec.db, "--tree", "--min-percent", "0")
    lines = [x for x in tree.splitlines() if re.search(r"\b(load_index|build_lookup|render_cache)\b", x)]
    names = [re.search(r"(load_index|build_lookup|render_cache)", x).group(1) for x in lines]  # type: ignore[union-attr]
    # THEN the children of main come largest first, whatever their names
    assert names == ["load_index", "render_cache", "build_lookup"], tree
    # AND so does every group of siblings (a node's children follow it, one level deeper)
    all_lines = tree.splitlines()
    head = next(x for x in all_lines if x.rstrip().endswith("call tree"))
    col = head.index("call tree")
    body = all_lines[all_lines.index(head) + 1:]
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    nodes = []
    for x in body:
        if not x.startswith("  ") or len(x) <= col or x.lstrip().startswith("("):
            continue
        number, unit = x.split()[0:2]
        depth = (len(x[col:]) - len(x[col:].lstrip(" "))) // 2
        nodes.append((depth, float(number.replace(",", "")) * units[unit]))
    assert len(nodes) >= 10, tree
    last_at: dict[int, float] = {}
    for depth, total in nodes:
        if depth in last_at:
            assert total <= last_at[depth], tree
        last_at = {d: t for d, t in last_at.items() if d < depth}
        last_at[depth] = total


WRAP_INLINED_SRC = r'''
#include <stdio.h>
#include <stdlib.h>
static inline __attribute__((always_inline)) void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) abort();
  return p;
}
__attribute__((noinline)) void **parse_input(int n) {
  void **keep = calloc((size_t)n, sizeof *keep);
  for (int i = 0; i < n; i++) keep[i] = xmalloc(1000);
  __asm__ volatile("" ::: "memory");
  return keep;
}
int main(void) {
  void **keep = parse_input(300);
  printf("%p\n", (void *)keep[0]);
  return 0;
}
'''


def test_a_wrapper_inlined_into_its_caller_is_folded(record: Recorder, tmp_path: Path) -> None:
    # GIVEN a -O2 -g program whose xmalloc (a wrapper) is inlined into parse_input
    if find_llvm_symbolizer() is None:
        pytest.skip("inlined frames come from llvm-symbolizer, not installed")
    src, prog = tmp_path / "wrapinl.c", tmp_path / "wrapinl"
    src.write_text(WRAP_INLINED_SRC)
    subprocess.run(["cc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", str(prog), str(src)], check=True,
                   timeout=120)
    rec = record([prog])
    assert rec.returncode == 0, rec.describe()
    kept = _report(rec.db, "--keep-wrappers")
    assert "xmalloc [inlined]" in kept, kept  # the symbolizer did see it inlined
    # WHEN report runs with the default fold
    out = _report(rec.db)
    # THEN parse_input holds the 300 x 1000 B (and its 2,400 B array) itself, at the line that
    # called xmalloc, and the header says so
    assert "xmalloc [inlined]" not in out, out
    assert "wrappers folded into their callers: xmalloc" in out, out
    row = next(x for x in out.splitlines() if " parse_input " in x)
    assert row.split()[0:2] == ["295.3", "KiB"], out  # 302,400 B
    assert "wrapinl.c:11" in row, out
    # AND the tree and the collapsed export read the same
    assert "xmalloc [inlined]" not in _report(rec.db, "--tree", "--min-percent", "0")
    run = run_process([*HEAPSCOPE, "export", str(rec.db), "--format", "collapsed", "-o", "-"], timeout=60)
    assert run.returncode == 0 and b"xmalloc" not in run.stdout, run.describe()


def test_the_summary_rss_of_processes_run_one_after_the_other_is_not_their_sum(
        record: Recorder, programs: Programs) -> None:
    # GIVEN a shell that runs rsspeak (a 100 MiB peak) twice, one after the other
    rsspeak = programs.path("rsspeak")
    rec = record(["/bin/sh", "-c", f"{rsspeak}; {rsspeak}"], interval=None)
    assert rec.returncode == 0, rec.describe()
    prof = rec.profile()
    rss = {int(r["idx"]): int(r["value"]) for r in prof.query(
        "SELECT idx, value FROM stats WHERE name = 'peak_rss_bytes'")}
    programs_ = [int(r["upid"]) for r in prof.query("SELECT upid FROM process WHERE name = 'rsspeak'")]
    assert len(programs_) == 2, rec.describe()
    # WHEN record sums up
    line = next(ln for ln in rec.stderr.decode().splitlines() if " of RSS " in ln)
    # THEN the RSS it gives was resident at one time: the shell and one rsspeak, not both, and
    # the line says it is a sum of peaks, of which processes
    said = re.search(r"of RSS (\S+) MiB", line)
    assert said is not None, line
    biggest = max(rss[u] for u in programs_)
    assert float(said[1]) * 2**20 < biggest + min(rss[u] for u in programs_) / 2, (line, rss)
    assert float(said[1]) * 2**20 >= biggest * 0.99, (line, rss)
    assert "in the processes that ran at one time" in line and "each one's peak, summed" in line, line


def test_the_summary_reads_every_processs_peak_in_one_pass(record: Recorder, programs: Programs) -> None:
    """`record`'s summary asked for each process's peak and stacks in turn: on a build (113
    processes, ~100k peak rows) that was 113 scans of the peak table and 113 stack walks, 1-4 s
    after make's exit. One of each now, and each process gets what its own queries said."""
    from heapscope.view.peaks import PEAK_CALLSITES, peak_stacks

    exe = str(programs.path("peakfree"))
    rec = record(["sh", "-c", f"{exe}; {exe}; {exe}"])
    assert rec.returncode == 0, rec.describe()
    reads = {"peak": 0, "walk": 0}

    def count(sql: str) -> None:
        reads["peak"] += "FROM heapscope_peak_allocation" in sql
        reads["walk"] += sql.lstrip().startswith("WITH RECURSIVE walk")

    with open_profile(rec.db) as prof:
        procs = [(int(p.info.upid), False, p.info.exe) for p in prof.processes()]
        prof.sql_connection().set_trace_callback(count)
        peaks = peak_stacks(prof, procs, 3, 4)
        prof.sql_connection().set_trace_callback(None)
        assert reads == {"peak": 1, "walk": 1}, reads
        held = [upid for upid, (total, _lines) in peaks.items() if total >= SMALL[1] + BIG[1]]
        assert len(held) == 3, peaks
        for upid, _python, _exe in procs:
            whole = peak_callsites(prof, upid)
            if whole is None:
                assert upid not in peaks
                continue
            positive = sorted(((size, cs) for cs, size in whole[1] if size > 0), key=lambda r: (-r[0], r[1]))
            total, _lines = peaks[upid]
            assert total == sum(size for size, _cs in positive), (upid, total, positive)
            top = [(cs, size) for size, cs in positive][:PEAK_CALLSITES]
            assert peak_top(prof, upid, PEAK_CALLSITES) == (total, top)
        # AND the largest line of a peakfree process names where its bytes were held
        assert all(any("hold_" in text for text, _ in peaks[upid][1]) for upid in held), peaks


def test_the_summary_reads_the_stacks_of_the_processes_it_shows_only(programs: Programs, tmp_path: Path) -> None:
    """`record`'s end read the largest stacks of every process (a build's 113: ~0.5 s after make's
    exit) for the six at most its summary shows. Every process still gets its peak, ranked as
    before; only the largest PEAKS_SHOWN + 1 get their stacks."""
    from heapscope import api
    from heapscope.session.core import PEAKS_SHOWN

    exe = str(programs.path("peakfree"))
    out = tmp_path / "p.db"
    summary = api.record(["sh", "-c", "; ".join([exe] * (PEAKS_SHOWN + 4))], out)
    assert summary.exit_status == 0, summary
    with open_profile(out) as prof:
        totals = {int(p.info.pid): (peak_top(prof, int(p.info.upid), 1) or (0, []))[0] for p in prof.processes()}
    assert len(summary.peaks) >= PEAKS_SHOWN + 4, summary.peaks
    assert [pk.peak_bytes for pk in summary.peaks] == sorted((pk.peak_bytes for pk in summary.peaks), reverse=True)
    assert all(pk.peak_bytes == totals[pk.pid] for pk in summary.peaks), (summary.peaks, totals)
    assert all(pk.top for pk in summary.peaks[:PEAKS_SHOWN + 1]), summary.peaks
    assert not any(pk.top for pk in summary.peaks[PEAKS_SHOWN + 1:]), summary.peaks
    assert any("hold_" in text for text, _ in summary.peaks[0].top), summary.peaks[0]


def test_a_recording_with_no_summary_to_show_reads_no_peaks_back(programs: Programs, tmp_path: Path) -> None:
    """`record -q` prints no summary, yet its end read every process's peak and largest stacks
    back from the profile, importing the reader to do so: ~5 ms of every recording with samples."""
    from heapscope.producer.config import RecordConfig
    from heapscope.session import Recording, RecordingOptions

    exe = str(programs.path("peakfree"))
    summaries = []
    # GIVEN the same program recorded with the summary's peaks asked for, and without
    for peaks in (True, False):
        options = RecordingOptions(symbolize=False, forward_signals=False, peaks=peaks)
        with Recording(RecordConfig(), tmp_path / f"peaks-{peaks}.db", options) as rec:
            rec.start([exe])
            assert rec.run_until_exit() == 0
        summaries.append(rec.summary)
    # THEN both sampled it, and only the first read its peaks back
    asked, not_asked = summaries
    assert asked.samples > 0 and not_asked.samples > 0, summaries
    assert asked.peaks and not not_asked.peaks, summaries
