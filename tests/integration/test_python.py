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
from hs_integration import HEAPSCOPE, Profile, run_process

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
    # A node merges a function's lines (the first one seen names it): kept() is at 'def' + 1 or + 2.
    assert {f"{PROGRAM}:{line - 1}", f"{PROGRAM}:{line}"} & set(data["strings"]), "no kept() file:line"
    if shutil.which("go"):
        pprof = tmp_path / "out.pb.gz"
        cli("export", str(db), "--format", "pprof", "-o", str(pprof))
        out = subprocess.run(["go", "tool", "pprof", "-lines", "-top", str(pprof)], capture_output=True,
                             text=True, timeout=120)
        assert f"known.py:{line}" in out.stdout, out.stdout + out.stderr


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
