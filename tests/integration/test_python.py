"""Python frames in the stacks, end to end, under every installed CPython 3.8-3.13.

The target (tests/programs/python/known.py) makes N bytearrays of a size of
its own in each of several Python functions (plain, freed, generator,
coroutine, thread, method), and calls a C extension (array) from Python.
At interval 1 the four views of each function's bytearray callsites are
exact and the innermost Python frame has the function's name and the line
of the marked statement; at 4096 they are within the sampler's 4-SD bounds.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Profile, Programs, run_process

PROGRAM = Path(__file__).parents[1] / "programs" / "python" / "known.py"
INTERVAL = 4096


def _interpreters() -> list[str]:
    found: list[str] = []
    root = None
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        root = Path(out.stdout.strip()) if out.returncode == 0 else None
    for minor in range(8, 14):
        if root is not None:
            for d in sorted((root / "versions").glob(f"3.{minor}.*")):
                exe = d / "bin" / "python3"
                if exe.exists():
                    found.append(str(exe))
        system = Path(f"/usr/bin/python3.{minor}")
        if system.exists():
            found.append(str(system))
    return found


INTERPRETERS = _interpreters()


def _version(python: str) -> tuple[int, int]:
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30, check=True)
    major, minor = out.stdout.split()
    return int(major), int(minor)


def _markers() -> dict[str, int]:
    lines = PROGRAM.read_text().splitlines()
    return {line.split("# ALLOC ")[1].strip(): i + 1 for i, line in enumerate(lines) if "# ALLOC " in line}


def _truth(python: str) -> dict[str, tuple[int, int, bool, bool]]:
    """function -> (count, request size, kept, served by pymalloc)."""
    out = subprocess.run([python, str(PROGRAM), "--print-truth"], capture_output=True, text=True,
                         timeout=30, check=True)
    return {k: (v[0], v[1], v[2], v[3]) for k, v in json.loads(out.stdout).items()}


def _record(tmp_path: Path, python: str, interval: int, extra: tuple[str, ...] = (),
            env: dict[str, str] | None = None) -> Path:
    db = tmp_path / f"py{interval}.db"
    argv = [*HEAPSCOPE, "record", "-o", str(db), "-i", str(interval), "--seed", "7", *extra,
            "--", python, str(PROGRAM)]
    if env is not None:
        argv = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
    run = run_process(argv, timeout=150)
    assert run.returncode == 0, run.describe()
    return db


def _paths(profile: Profile) -> dict[int, list[tuple[str, str, str | None, int | None]]]:
    """callsite -> frames leaf first: (name, type, source file, line)."""
    rows = profile.query(
        """
        WITH RECURSIVE
          leaf(id) AS (SELECT DISTINCT callsite_id FROM heap_profile_allocation),
          walk(leaf_id, id, depth) AS (
            SELECT id, id, 0 FROM leaf
            UNION ALL
            SELECT walk.leaf_id, c.parent_id, walk.depth + 1
            FROM walk JOIN stack_profile_callsite c ON c.id = walk.id
            WHERE c.parent_id IS NOT NULL AND walk.depth < 1000)
        SELECT walk.leaf_id AS leaf_id, f.name AS name, COALESCE(f.type, '') AS type,
               s.source_file AS file, s.line_number AS line
        FROM walk
        JOIN stack_profile_callsite c ON c.id = walk.id
        JOIN stack_profile_frame f ON f.id = c.frame_id
        LEFT JOIN stack_profile_symbol s ON s.id = f.symbol_set_id
        ORDER BY walk.leaf_id, walk.depth
        """)
    out: dict[int, list[tuple[str, str, str | None, int | None]]] = defaultdict(list)
    for r in rows:
        out[r["leaf_id"]].append((r["name"] or "", r["type"], r["file"], r["line"]))
    return out


def _python_leaves(profile: Profile) -> dict[int, tuple[list[str], tuple[str, str | None, int | None] | None]]:
    """callsite with allocations -> (native frame names from the leaf up to the innermost Python
    frame, that frame as (name, source file, line), or None when the path has none).

    One read of the callsite and frame tables, then a walk in Python: at interval 1 a profile
    holds hundreds of thousands of callsites, and a recursive query expanding every leaf's whole
    path took minutes and gigabytes; only the part below the innermost Python frame is needed."""
    parent: dict[int, int | None] = {}
    frame_of: dict[int, int] = {}
    for r in profile.query("SELECT id, parent_id, frame_id FROM stack_profile_callsite"):
        parent[r["id"]] = r["parent_id"]
        frame_of[r["id"]] = r["frame_id"]
    where: dict[int, tuple[str | None, int | None]] = {}
    for r in profile.query("SELECT symbol_set_id, source_file, line_number FROM stack_profile_symbol ORDER BY id"):
        where.setdefault(r["symbol_set_id"], (r["source_file"], r["line_number"]))
    frames: dict[int, tuple[str, bool, int | None]] = {
        r["id"]: (r["name"] or "", r["type"] == "python", r["symbol_set_id"])
        for r in profile.query("SELECT id, name, type, symbol_set_id FROM stack_profile_frame")}
    out: dict[int, tuple[list[str], tuple[str, str | None, int | None] | None]] = {}
    for r in profile.query("SELECT DISTINCT callsite_id FROM heap_profile_allocation"):
        leaf = node = r["callsite_id"]
        natives: list[str] = []
        found: tuple[str, str | None, int | None] | None = None
        for _ in range(1000):
            if node is None:
                break
            name, python, symbols = frames[frame_of[node]]
            if python:
                file, line = where.get(symbols, (None, None)) if symbols is not None else (None, None)
                found = (name, file, line)
                break
            natives.append(name)
            node = parent[node]
        out[leaf] = (natives, found)
    return out


def _views_by_python_site(profile: Profile, bytearrays: bool = True) -> dict[tuple[str, int | None], list[int]]:
    """(innermost Python function, line) -> [alloc_space, alloc_objects, space, objects] of the
    callsites under it; with bytearrays, only those with a native frame naming bytearray between
    it and the leaf (the line also grows a list)."""
    views = {r["callsite_id"]: r for r in profile.query(
        "SELECT callsite_id, SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a_s,"
        " SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS a_o, SUM(size) AS s, SUM(count) AS o"
        " FROM heap_profile_allocation GROUP BY callsite_id")}
    out: dict[tuple[str, int | None], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for cs, (native_leaf, py) in _python_leaves(profile).items():
        if py is None:
            continue
        name, file, line = py
        wanted = not bytearrays or any("bytearray" in n.lower() for n in native_leaf)
        if file == str(PROGRAM) and wanted:
            v = views[cs]
            acc = out[(name, line)]
            for i, x in enumerate((v["a_s"], v["a_o"], v["s"], v["o"])):
                acc[i] += int(x)
    return out


def _expected_name(fn: str, minor: int) -> str:
    # Code objects have a qualified name from 3.11; before, the plain name.
    return fn if minor >= 11 else fn.rsplit(".", 1)[-1]


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_python_functions_exact_at_interval_1(tmp_path: Path, python: str) -> None:
    _, minor = _version(python)
    db = _record(tmp_path, python, 1)
    profile = Profile(db)
    got = _views_by_python_site(profile)
    got_all = _views_by_python_site(profile, bytearrays=False)
    markers = _markers()
    problems = []
    for fn, (n, size, kept, pymalloc) in _truth(python).items():
        key = (_expected_name(fn, minor), markers[fn])
        want = [n * size, n, n * size if kept else 0, n if kept else 0]
        have = got_all.get(key) if pymalloc else got.get(key)
        if have != want:
            problems.append(f"{key}: want {want}, got {have}")
    stats = profile.stats()
    assert stats.get("python_frames") == 1, stats
    assert stats.get("python_allocators") == 1, stats
    assert stats.get("python_walks_invalid") == 0, stats
    assert not problems, "\n".join([*problems, f"all python sites: {dict(got)}"])
    _check_extension_frames(profile, python)


def _check_extension_frames(profile: Profile, python: str) -> None:
    """C extension frames (array's) stay between the Python caller and the leaf."""
    where = subprocess.run([python, "-c", "import array; print(getattr(array, '__file__', ''))"],
                           capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    if not where:
        return  # array is built into this interpreter: no extension module of its own
    line = _markers()["extension"]
    found = 0
    for natives, py in _python_leaves(profile).values():
        # leaf first: native frames of array's code, then the Python caller at the marked line.
        if py is None or py[0] != "extension" or py[2] != line:
            continue
        if any(name.startswith("array_") for name in natives):
            found += 1
    assert found >= 1, "no stack with array's native frames under extension()"


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_python_functions_within_bounds_at_4096(tmp_path: Path) -> None:
    python = INTERPRETERS[-1]
    _, minor = _version(python)
    profile = Profile(_record(tmp_path, python, INTERVAL))
    got = _views_by_python_site(profile)
    markers = _markers()
    problems = []
    got_all = _views_by_python_site(profile, bytearrays=False)
    for fn, (n, size, _kept, pymalloc) in _truth(python).items():
        v = (got_all if pymalloc else got).get((_expected_name(fn, minor), markers[fn]), [0, 0, 0, 0])
        truth = n * size
        sd = math.sqrt(INTERVAL * truth)
        if abs(v[0] - truth) > 4 * sd:
            problems.append(f"{fn}: alloc_space {v[0]} vs {truth} (SD {sd:.0f})")
        p = 1 - math.exp(-size / INTERVAL)
        mean, csd = n * p, math.sqrt(n * p * (1 - p))
        if abs(v[1] - mean) > 4 * csd:
            problems.append(f"{fn}: alloc_objects {v[1]}, expected about {mean:.0f} (SD {csd:.0f})")
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_unknown_layout_gives_native_stacks_and_one_line(tmp_path: Path) -> None:
    python = INTERPRETERS[-1]
    db = tmp_path / "unknown.db"
    env = dict(os.environ, HEAPSCOPE_TEST_PY_HEXVERSION=str(0x030E00F0))  # "3.14"
    run = subprocess.run([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--", python, str(PROGRAM)],
                         env=env, capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stderr
    assert "python frames: off, CPython 3.14" in run.stderr, run.stderr
    assert "seen " in run.stderr and " of RSS " in run.stderr, run.stderr
    profile = Profile(db)
    assert profile.query("SELECT COUNT(*) AS n FROM stack_profile_frame WHERE type = 'python'")[0]["n"] == 0
    rows = profile.query("SELECT description FROM stats WHERE name = 'python_frames'")
    assert len(rows) == 1 and "3.14" in rows[0]["description"], rows
    heap = profile.query("SELECT SUM(size) AS s FROM heap_profile_allocation WHERE size > 0")[0]["s"]
    assert heap and heap > 0


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
def test_views_show_python_frames(tmp_path: Path) -> None:
    python = INTERPRETERS[-1]
    db = _record(tmp_path, python, 1)
    line = _markers()["kept"]

    def cli(*args: str) -> str:
        out = subprocess.run([*HEAPSCOPE, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    report = cli("report", "--view", "alloc_space", "--focus", "^kept$", str(db))
    assert "kept" in report and "known.py" in report, report
    assert "memory:        seen " in report, report  # the heaps' peak against the peak RSS
    peak_rss = Profile(db).stats().get("peak_rss_bytes", 0)
    assert peak_rss > 10 * 2**20, peak_rss  # the program holds more than 10 MiB at its end
    by_file = cli("report", "--view", "alloc_space", "--top", "500", "--focus", r"programs/python/known\.py$",
                  str(db))
    assert "kept" in by_file, by_file
    ignored = cli("report", "--view", "alloc_space", "--top", "500", "--ignore", r"known\.py$", str(db))
    assert " kept " not in ignored, ignored
    only = cli("report", "--python-only", "--view", "alloc_space", "--top", "200", str(db))
    assert "kept" in only and "PyByteArray_Resize" not in only, only
    tree = cli("report", "--tree", "--python-only", "--min-percent", "0", "--view", "alloc_space", str(db))
    assert "kept  [known.py]" in tree and "PyByteArray_Resize" not in tree, tree
    collapsed = tmp_path / "out.collapsed"
    cli("export", str(db), "--format", "collapsed", "-o", str(collapsed))
    assert any("kept" in ln for ln in collapsed.read_text().splitlines())
    flame = tmp_path / "flame.html"
    cli("flamegraph", str(db), "-o", str(flame))
    python_flame = tmp_path / "python.html"
    cli("flamegraph", "--python-only", str(db), "-o", str(python_flame))
    assert python_flame.stat().st_size > 0
    packed = re.search(r'<script id="hs-data" type="text/plain">([^<]*)</script>', flame.read_text())
    assert packed is not None
    data = json.loads(gzip.decompress(base64.b64decode(packed.group(1))))
    # kept() is at 'def' + 1 or + 2.
    assert {f"{PROGRAM}:{line - 1}", f"{PROGRAM}:{line}"} & set(data["strings"]), "no kept() file:line"
    # Python frames are nodes per line, in both pages: main at each line it called from, not
    # at the first one seen (native frames still merge per function)
    calls = {f"{PROGRAM}:{_program_line(c)}" for c in ("kept()", "small()", "Holder().method()", "extension()")}
    for page in (flame, python_flame):
        packed = re.search(r'<script id="hs-data" type="text/plain">([^<]*)</script>', page.read_text())
        assert packed is not None
        strings = set(json.loads(gzip.decompress(base64.b64decode(packed.group(1))))["strings"])
        assert calls <= strings, (page.name, calls - strings)
    native_tree = cli("report", "--tree", "--native", "--min-percent", "0", str(db))
    assert {int(m) for m in re.findall(r"  main  \[known\.py\]  known\.py:(\d+)", native_tree)} >= \
        {_program_line(c) for c in ("kept()", "Holder().method()")}, native_tree
    if shutil.which("go"):
        pprof = tmp_path / "out.pb.gz"
        cli("export", str(db), "--format", "pprof", "-o", str(pprof))
        out = subprocess.run(["go", "tool", "pprof", "-lines", "-top", str(pprof)], capture_output=True,
                             text=True, timeout=120)
        assert f"known.py:{line}" in out.stdout, out.stdout + out.stderr
        # the module's own frame keeps its name: pprof took `<module>` for C++ template
        # arguments and showed `<unknown>` (with the system name equal to the name)
        out = subprocess.run(["go", "tool", "pprof", "-traces", str(pprof)], capture_output=True, text=True,
                             timeout=120)
        frames = {ln.strip() for ln in out.stdout.splitlines()}
        assert "<module>" in frames and "<unknown>" not in frames, out.stdout[-3000:] + out.stderr


WORKERS = Path(__file__).parents[1] / "programs" / "python" / "workers.py"
METHODS = ("fork", "spawn", "forkserver")


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_multiprocessing_workers_exact_at_interval_1(tmp_path: Path, python: str) -> None:
    """A worker of each start method is a process of its own, with Python frames; at interval 1
    the bytearrays each worker function makes are exact (the fork child restarts the client)."""
    db = tmp_path / "workers.db"
    # Interval 1 on three interpreters' start-ups keeps the producer busy: a larger ring and a
    # longer bound on the wait for ring space keep a loaded machine from stopping a client.
    run = run_process(["env", "HEAPSCOPE_MAX_WAIT_MS=120000", *HEAPSCOPE, "record", "-o", str(db), "-i", "1",
                       "--shmem-size", "64M", "--", python, str(WORKERS), *METHODS], timeout=250)
    assert run.returncode == 0, run.describe()
    profile = Profile(db)
    lines = WORKERS.read_text().splitlines()
    markers = {t.split("# ALLOC ")[1].strip(): i + 1 for i, t in enumerate(lines) if "# ALLOC " in t}
    truth = json.loads(subprocess.run([python, str(WORKERS), "--print-truth"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout)
    views = {r["callsite_id"]: (int(r["a_s"]), int(r["a_o"]), int(r["s"])) for r in profile.query(
        "SELECT callsite_id, SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a_s,"
        " SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS a_o, SUM(size) AS s"
        " FROM heap_profile_allocation GROUP BY callsite_id")}
    upid_of = {r["callsite_id"]: r["upid"] for r in profile.query(
        "SELECT DISTINCT callsite_id, upid FROM heap_profile_allocation")}
    got: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    upids: dict[str, set[int]] = defaultdict(set)
    for cs, (native, py) in _python_leaves(profile).items():
        if py is None:
            continue
        name, file, ln = py
        if file == str(WORKERS) and name in truth and ln == markers[name] and \
                any("bytearray" in n.lower() for n in native):
            for i, x in enumerate(views[cs]):
                got[name][i] += x
            upids[name].add(upid_of[cs])
    want = {fn: [n * size, n, n * size] for fn, (n, size) in truth.items()}
    errors = [tuple(r) for r in profile.query("SELECT upid, client_error, disconnected FROM heapscope_process")]
    assert dict(got) == want, (dict(got), profile.processes_text(), errors)
    # Each worker is a process of its own, none of them the parent's.
    assert all(len(u) == 1 for u in upids.values()), upids
    assert len(set().union(*upids.values())) == len(METHODS), upids
    stats = profile.stats()
    assert stats.get("python_walks_invalid") == 0, stats


# --- the Python view: report's default for a Python program --------------------------------------------------------


def _program_line(text: str, program: Path = PROGRAM) -> int:
    """The line of `program` that is exactly `text` once stripped."""
    return next(i + 1 for i, ln in enumerate(program.read_text().splitlines()) if ln.strip() == text)


def _rows(report: str) -> list[tuple[str, str, str]]:
    """The table rows of a `report` of one process: (function, location, library), cut at the
    header's columns (a frozen module's location has blanks)."""
    lines = report.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["self", "self"])
    head = lines[at]
    fn, loc, lib = head.index("function"), head.index("location"), head.index("library")
    out = []
    for ln in lines[at + 1:]:
        if not ln.strip() or ln.strip().startswith("("):
            break
        out.append((ln[fn:loc].strip(), ln[loc:lib].strip(), ln[lib:].strip()))
    return out


def _human(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
def test_report_defaults_to_python_lines_and_native_shows_libpython(tmp_path: Path) -> None:
    from heapscope.store.reader import open_profile
    from heapscope.view.report import build_reports

    python = INTERPRETERS[-1]
    _, minor = _version(python)
    db = tmp_path / "known.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--seed", "7", "--", python, str(PROGRAM)],
                      timeout=150)
    assert run.returncode == 0, run.describe()
    markers = _markers()

    def cli(*args: str) -> str:
        out = subprocess.run([*HEAPSCOPE, *args, str(db)], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    # WHEN the profile of a Python program is reported without a flag
    report = cli("report", "--view", "alloc_space", "--top", "200")
    # THEN the header says which view, how to get the other, and the rows are Python lines
    assert "view:          Python frames (native frames folded into the Python line that called them;" \
           " --native shows them)" in report, report
    rows = _rows(report)
    assert len(rows) > 12, report
    assert not [r for r in rows if r[2].startswith(("python3", "libpython"))], report
    located = {(r[0], r[1]) for r in rows}
    for fn in ("kept", "worker", "Holder.method", "coro", "gen"):
        assert (_expected_name(fn, minor), f"known.py:{markers[fn]}") in located, (fn, report)
    # AND a row's self is what the stacks whose innermost Python frame is that line hold, the
    # native code it called included (read here from the tables, not through the views)
    truth = _views_by_python_site(Profile(db), bytearrays=False)
    with open_profile(db) as prof:
        [r] = build_reports(prof, "alloc_space", python_only=None)
    assert r.python_only and r.has_python
    by_line = {(x.function, x.source): x.self_value for x in r.rows}
    for fn, (n, size, _kept, _pymalloc) in _truth(python).items():
        name = _expected_name(fn, minor)
        got = by_line.get((name, f"{PROGRAM}:{markers[fn]}"))
        assert got == truth[(name, markers[fn])][0] and got >= n * size, (fn, got, truth.get((name, markers[fn])))
    # AND `make`-like functions are rows per line: no two rows of one function share a line
    assert len(by_line) == len(r.rows)

    # WHEN --native asks for every frame
    native = cli("report", "--native", "--view", "alloc_space", "--top", "12")
    # THEN libpython's (or python3's) frames are rows, and the header says how to get back
    assert any(r[2].startswith(("python3", "libpython")) for r in _rows(native)), native
    assert "view:          every frame, native and Python (without --native: Python frames only" in native
    assert cli("report", "--python-only", "--view", "alloc_space", "--top", "200") == report

    # AND --tree follows the table: Python frames at their lines; --stacks keeps each stack in full
    tree = cli("report", "--tree", "--min-percent", "0", "--view", "alloc_space")
    assert f"kept  [known.py]  known.py:{markers['kept']}" in tree, tree
    assert "PyByteArray" not in tree and "PyByteArray" in cli("report", "--tree", "--native", "--min-percent", "0")
    stacks = cli("report", "--stacks", "--top", "3")
    assert "view:          each stack in full, Python frames among the native ones" in stacks, stacks
    assert "_PyEval_EvalFrameDefault" in stacks or "PyObject" in stacks, stacks
    # AND each stack shows its frames at their own lines: main at the line of each call it made
    # (merged by function, every main read the line of whichever stack came first)
    calls = {_program_line(c) for c in ("kept()", "small()", "Holder().method()", "extension()")}
    mains = {int(m) for m in re.findall(r"^ +main +known\.py:(\d+) ", cli("report", "--stacks", "--top", "60"), re.M)}
    assert calls <= mains, (calls, mains)

    # AND the record summary's largest stacks are Python lines: Holder.method's 400 x 1500 bytes,
    # held to the end, called from main() at its line and main from the module
    err = run.stderr.decode()
    at = next(i for i, ln in enumerate(err.splitlines()) if "largest stacks" in ln)
    lines = err.splitlines()[at + 1:at + 4]
    want = (f"<module> (known.py:{_program_line('main()')}) > main (known.py:{_program_line('Holder().method()')})"
            f" > {_expected_name('Holder.method', minor)} (known.py:{markers['Holder.method']})")
    mine = [ln for ln in lines if ln.endswith(want)]
    assert len(mine) == 1, err
    assert _human(" ".join(mine[0].split()[1:3])) >= 0.95 * 400 * 1500, mine  # shown to 3-4 digits
    assert not any("PyObject" in ln or "_Py" in ln for ln in lines), err
    assert all(re.search(r" \(\S[^()]*:\d+\)$", ln) for ln in lines), err  # each ends at a Python line


RECURSE = '''\
import os
KEEP = []


def leaf():
    KEEP.append(bytearray(100000))  # LEAF


def rec(depth):
    if depth == 0:
        for _ in range(20):
            leaf()  # BOTTOM
        return
    rec(depth - 1)  # DOWN


def main():
    for depth in (5, 6):
        rec(depth)  # CALL
    KEEP.append([bytearray(20000) for _ in range(10)])


main()
os._exit(0)
'''


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_summary_merges_stacks_of_one_python_place_and_collapses_recursion(tmp_path: Path) -> None:
    # GIVEN a program whose largest memory is made at one line below a recursion of two depths
    program = tmp_path / "recurse.py"
    program.write_text(RECURSE)
    marks = {ln.split("# ")[1]: i + 1 for i, ln in enumerate(RECURSE.splitlines()) if "# " in ln}
    db = tmp_path / "recurse.db"
    # WHEN it is recorded
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--", INTERPRETERS[-1], str(program)],
                      timeout=150)
    assert run.returncode == 0, run.describe()
    err = run.stderr.decode().splitlines()
    at = next(i for i, ln in enumerate(err) if "largest stacks" in ln)
    # THEN its first line is that place: the two depths' stacks as one line (6 + 7 runs of rec's
    # line, counted as a range) holding both's 40 bytearrays, the module's line cut to `…`
    first = err[at + 1]
    assert first.endswith(f"… > main (recurse.py:{marks['CALL']}) > rec (recurse.py:{marks['DOWN']}) ×5-6"
                          f" > rec (recurse.py:{marks['BOTTOM']}) > leaf (recurse.py:{marks['LEAF']})"), err
    assert _human(" ".join(first.split()[1:3])) >= 0.95 * 40 * 100000, first  # shown to 2 digits
    # AND no other line is the same place
    assert not any(f"(recurse.py:{marks['LEAF']})" in ln for ln in err[at + 2:at + 4]), err


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_leaks_header_of_a_python_program_names_both_heaps(tmp_path: Path) -> None:
    db = _record(tmp_path, INTERPRETERS[-1], INTERVAL)
    out = subprocess.run([*HEAPSCOPE, "leaks", str(db)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()[0]
    # (+ mmap from CPython 3.11: its frame stack's chunks are mapped outside pymalloc)
    assert head.startswith("heap: libc.malloc + python.pymalloc") and \
        head.endswith(" (every heap of the profile, their sum; --heap NAME for one)"), out.stdout


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_native_process_beside_a_python_one_keeps_the_native_view(tmp_path: Path, programs: Programs) -> None:
    # GIVEN a Python script that runs a C program (a build script running a compiler, say)
    basic = programs.path("basic")
    script = tmp_path / "runs.py"
    script.write_text(f"import subprocess\nKEEP = [bytearray(300000)]\nsubprocess.run([{str(basic)!r}], check=True)\n")
    db = tmp_path / "both.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--", INTERPRETERS[-1], str(script)],
                      timeout=150)
    assert run.returncode == 0, run.describe()
    pids = {r["name"]: r["pid"] for r in Profile(db).query("SELECT pid, name FROM process")}
    assert "basic" in pids, pids

    def cli(*args: str) -> str:
        out = subprocess.run([*HEAPSCOPE, "report", *args, str(db)], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    # WHEN the profile is reported without a flag
    both = cli("--top", "50")
    # THEN the Python process shows its lines and the C program its functions, as before
    python_part, native_part = (both.split(f"\npid {pids['basic']} ")[i] for i in (0, 1))
    assert "view:          Python frames" in python_part and "runs.py:2" in python_part, both
    assert "view:" not in native_part and "alloc_small" in native_part, both
    only = cli("--pid", str(pids["basic"]))
    assert only == cli("--pid", str(pids["basic"]), "--native"), only
    assert _rows(only)[0][0] in ("alloc_big", "path_b"), only  # 1 MiB of basic.c's kept at the peak
    # AND the record summary gives the C program its native stacks
    err = run.stderr.decode()
    assert "> path_b > path_c > alloc_big" in err, err


THROUGH_C = '''
import sys
KEEP = []


def down(depth):
    if depth == 0:
        KEEP.append(bytearray(1 << 20))  # LEAF
        return 0
    return sum(map(down, [depth - 1]))  # each level through map() and sum(): native frames between


down(int(sys.argv[1]))
'''


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_frames_put_at_the_root_by_a_cut_stack_are_said_with_the_fix(tmp_path: Path) -> None:
    # GIVEN a Python recursion whose every level passes through C (map, sum): a native stack
    # deeper than --max-frames' default of 128 (as deep imports make them)
    program = tmp_path / "through_c.py"
    program.write_text(THROUGH_C)
    db = tmp_path / "c.db"
    # WHEN it is recorded with the default --max-frames
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--", INTERPRETERS[-1], str(program), "40"],
                      timeout=150)
    assert run.returncode == 0, run.describe()
    # THEN the summary says in plain words where those frames are shown, what it costs (the
    # native view only) and what to do: record with --max-frames 256
    line = next((ln for ln in run.stderr.decode().splitlines() if "put at the top of their stacks" in ln), "")
    assert "report's Python view (the default) is right" in line, run.describe()
    assert "longer than --max-frames 128: record with --max-frames 256 to keep them whole" in line, run.describe()
    # AND with --max-frames 256 the same stack is whole: no frame put at the top
    run = run_process([*HEAPSCOPE, "record", "-o", str(tmp_path / "d.db"), "-i", "1", "--max-frames", "256", "--",
                       INTERPRETERS[-1], str(program), "40"], timeout=150)
    assert run.returncode == 0, run.describe()
    assert "put at the top of their stacks" not in run.stderr.decode(), run.describe()


GROWS = '''
import sys
KEEP = []


def build(n):
    return [bytearray(1000) for _ in range(n)]  # BUILD


def main():
    KEEP.append(build(int(sys.argv[1])))  # MAIN


main()
'''


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
def test_diff_of_two_python_runs_shows_python_functions(tmp_path: Path) -> None:
    # GIVEN two runs of a Python program that keeps n bytearrays of 1000 bytes, n 2,000 then 6,000
    program = tmp_path / "grows.py"
    program.write_text(GROWS)
    dbs = []
    for n in (2000, 6000):
        db = tmp_path / f"g{n}.db"
        run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--", INTERPRETERS[-1], str(program),
                           str(n)], timeout=150)
        assert run.returncode == 0, run.describe()
        dbs.append(str(db))
    # WHEN they are compared
    out = subprocess.run([*HEAPSCOPE, "diff", *dbs], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # THEN the largest growth is the Python function that made them, in its file, called from main:
    # native frames are folded into it (report's Python view), ~4 MB more
    grew = out.stdout.split("largest growths:\n", 1)[1].splitlines()[1]
    assert re.search(r"^\s+\+(3\.[89]|4\.\d) MiB .* grows\.py\s+(build < )?main < <module>$", grew), out.stdout
    assert "PyByteArray" not in out.stdout and "malloc" not in out.stdout, out.stdout
    # AND --native shows the native frames too
    native = subprocess.run([*HEAPSCOPE, "diff", "--native", *dbs], capture_output=True, text=True, timeout=120)
    assert native.returncode == 0, native.stderr
    assert "PyByteArray" in native.stdout or "bytearray" in native.stdout, native.stdout
