"""Python's own heap (docs/python-frames.md section 5), end to end, under every installed CPython 3.8-3.13.

The client books what comes through Python's MEM and OBJ allocator domains in
the heap python.pymalloc, and what pymalloc passes on to malloc (requests over
512 bytes) only there, never a second time in libc.malloc. The target
(tests/programs/python/heaps.py) makes N objects of known request sizes per
function: at interval 1 each heap's bytes per function are exact, and the
views show both heaps (disjoint, so summed) by default, each named.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Profile, run_process
from test_python import INTERPRETERS, _paths, _version

PROGRAM = Path(__file__).parents[1] / "programs" / "python" / "heaps.py"
PY_HEAP = "python.pymalloc"
MALLOC = "libc.malloc"
MMAP = "mmap"  # from CPython 3.11, its frame stack's chunks (docs/mmap-heaps.md)


def _markers(program: Path = PROGRAM) -> dict[str, int]:
    lines = program.read_text().splitlines()
    return {line.split("# ALLOC ")[1].strip(): i + 1 for i, line in enumerate(lines) if "# ALLOC " in line}


def _truth(python: str) -> dict[str, tuple[int, int, bool, str]]:
    out = subprocess.run([python, str(PROGRAM), "--print-truth"], capture_output=True, text=True,
                         timeout=30, check=True)
    return {k: (v[0], v[1], v[2], v[3]) for k, v in json.loads(out.stdout).items()}


def _record(tmp_path: Path, python: str) -> Path:
    db = tmp_path / "heaps.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--seed", "7", "--", python, str(PROGRAM)],
                      timeout=150)
    assert run.returncode == 0, run.describe()
    return db


def _by_site(profile: Profile) -> dict[tuple[str, str, int | None, bool], list[int]]:
    """(heap, innermost Python function of the program, its line, whether a native frame naming
    bytearray or malloc lies between it and the leaf) -> [alloc_space, alloc_objects, space, objects]."""
    views = profile.query(
        "SELECT heap_name, callsite_id, SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a_s,"
        " SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS a_o, SUM(size) AS s, SUM(count) AS o"
        " FROM heap_profile_allocation GROUP BY heap_name, callsite_id")
    paths = _paths(profile)
    out: dict[tuple[str, str, int | None, bool], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for v in views:
        native: list[str] = []
        for name, ftype, file, line in paths.get(v["callsite_id"], []):
            if ftype == "python":
                if file == str(PROGRAM):
                    marked = any("bytearray" in n.lower() or n == "malloc" for n in native)
                    acc = out[(v["heap_name"], name, line, marked)]
                    for i, x in enumerate((v["a_s"], v["a_o"], v["s"], v["o"])):
                        acc[i] += int(x)
                break
            native.append(name)
    return out


def _site(got: dict[tuple[str, str, int | None, bool], list[int]], heap: str, fn: str, line: int,
          marked: bool | None) -> list[int]:
    acc = [0, 0, 0, 0]
    for (h, name, ln, m), v in got.items():
        if h == heap and name == fn and ln == line and (marked is None or m == marked):
            acc = [a + b for a, b in zip(acc, v, strict=True)]
    return acc


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_each_request_is_booked_once_in_its_heap(tmp_path: Path, python: str) -> None:
    _version(python)
    profile = Profile(_record(tmp_path, python))
    got = _by_site(profile)
    markers = _markers()
    problems = []
    for fn, (n, size, kept, heap) in _truth(python).items():
        line = markers[fn]
        want = [n * size, n, n * size if kept else 0, n if kept else 0]
        # bytearrays: their buffers (under a bytearray frame), not their object headers; bytes(200)
        # and malloc through ctypes: everything of the line still held (the loop's transient
        # objects are freed), and in libc.malloc nothing but the mallocs.
        have = _site(got, heap, fn, line, True if fn in ("big", "gone") else None)
        if fn == "small":
            have, want = have[2:], want[2:]
        if have != want:
            problems.append(f"{fn} in {heap}: want {want}, got {have}")
        other = MALLOC if heap == PY_HEAP else PY_HEAP
        twice = _site(got, other, fn, line, None)
        if heap == PY_HEAP and twice != [0, 0, 0, 0]:
            problems.append(f"{fn}: also booked in {other}: {twice}")
    stats = profile.stats()
    assert stats.get("python_allocators") == 1, stats
    assert not problems, "\n".join([*problems, f"sites: {dict(got)}"])
    heaps = {r["heap_name"] for r in profile.query("SELECT DISTINCT heap_name FROM heap_profile")}
    # (and mmap from CPython 3.11: the frame stack's chunks, which it maps outside pymalloc)
    assert heaps - {MMAP} == {MALLOC, PY_HEAP}, heaps


def _cli(*args: str) -> str:
    out = subprocess.run([*HEAPSCOPE, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _mib(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 2**10}[unit]


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
def test_views_show_both_heaps_by_default(tmp_path: Path) -> None:
    python = INTERPRETERS[-1]
    db = _record(tmp_path, python)
    profile = Profile(db)
    end = {r["heap_name"]: int(r["s"]) for r in profile.query(
        "SELECT heap_name, SUM(size) AS s FROM heap_profile_allocation GROUP BY heap_name")}
    report = _cli("report", "--dump", "end", str(db))
    assert "showing: libc.malloc + python.pymalloc" in report, report
    space = re.search(r"space:\s+(\S+ \S+)", report)
    assert space is not None, report
    both = sum(end.values()) / 2**20  # libc.malloc, python.pymalloc (and mmap: MMAP above)
    assert abs(_mib(space.group(1)) - both) <= 0.06 * both, (report, end)  # printed with 3 digits
    # At the peak (the default state): both heaps at the one peak they share.
    peaks = sum(int(r["s"]) for r in profile.query("SELECT SUM(size) AS s FROM heapscope_peak_allocation"))
    at_peak = re.search(r"space:\s+(\S+ \S+)", _cli("report", str(db)))
    assert at_peak is not None and abs(_mib(at_peak.group(1)) - peaks / 2**20) <= 0.01 * peaks / 2**20, peaks
    one = _cli("report", "--dump", "end", "--heap", MALLOC, str(db))
    assert "showing: libc.malloc (" in one, one
    # The record summary and the report: the memory seen is both heaps' (their peaks).
    truth = _truth(python)
    held = sum(n * size for n, size, kept, _heap in truth.values() if kept)
    seen = re.search(r"memory:\s+seen (\S+ \S+) of RSS", report)
    assert seen is not None and _mib(seen.group(1)) * 2**20 >= held, report
    # pprof: each sample carries its heap's name.
    pb = tmp_path / "heaps.pb.gz"
    _cli("export", "--format", "pprof", "-o", str(pb), str(db))
    raw = gzip.decompress(pb.read_bytes())
    assert PY_HEAP.encode() in raw and MALLOC.encode() in raw
    # The flamegraph opens at both heaps together.
    html = tmp_path / "heaps.html"
    _cli("flamegraph", "-o", str(html), str(db))
    assert "libc.malloc+python.pymalloc" in gzip_payload(html)
    # --heap A+B names several heaps; an unknown one is one clear line.
    assert "showing: libc.malloc + python.pymalloc" in _cli("report", "--heap", "python.pymalloc+libc.malloc", str(db))
    bad = subprocess.run([*HEAPSCOPE, "report", "--heap", "libc.malloc+nope", str(db)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "nope" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def gzip_payload(html: Path) -> str:
    """The flamegraph page's packed data, unpacked (view/flamegraph.py render_html)."""
    import base64
    text = html.read_text()
    blobs = re.findall(r"[A-Za-z0-9+/=]{200,}", text)
    for b in blobs:
        try:
            return gzip.decompress(base64.b64decode(b)).decode()
        except (OSError, ValueError):
            continue
    return text


PHASES = Path(__file__).parents[1] / "programs" / "python" / "peakphases.py"


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
def test_the_peak_of_both_heaps_is_one_moment(tmp_path: Path) -> None:
    """libc.malloc peaks in phase 1 (8 MiB through ctypes, freed), python.pymalloc in phase 2
    (8.9 MiB of bytes objects, held): the process's peak is the moment their sum is largest
    (phase 2), each heap at that moment, not each heap at its own peak."""
    python = INTERPRETERS[-1]
    db = tmp_path / "phases.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--seed", "7", "--", python, str(PHASES)],
                      timeout=150)
    assert run.returncode == 0, run.describe()
    truth = json.loads(subprocess.run([python, str(PHASES), "--print-truth"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout)
    (n_native, native_size, _, _), (n_small, small_size, _, _) = truth["native"], truth["small"]
    profile = Profile(db)
    # THEN both heaps' peak rows are at one moment
    stamps = {r["heap_name"]: int(r["ts"]) for r in profile.query(
        "SELECT heap_name, MAX(ts) AS ts FROM heapscope_peak_allocation GROUP BY heap_name")}
    assert set(stamps) - {MMAP} == {MALLOC, PY_HEAP} and len(set(stamps.values())) == 1, stamps
    # AND that moment is phase 2's: the objects all held, the freed native blocks not
    lines = _markers(PHASES)
    at_peak: dict[str, int] = defaultdict(int)
    paths = _paths(profile)
    for r in profile.query("SELECT callsite_id, SUM(size) AS s FROM heapscope_peak_allocation GROUP BY callsite_id"):
        for _name, ftype, file, line in paths.get(r["callsite_id"], []):
            if ftype == "python" and file == str(PHASES):
                at_peak[next((n for n, ln in lines.items() if ln == line), "other")] += int(r["s"])
                break
    assert at_peak["small"] == n_small * small_size, dict(at_peak)
    assert at_peak["native"] == 0, dict(at_peak)  # 8 MiB when libc.malloc was taken at its own peak
    total = sum(int(r["s"]) for r in profile.query("SELECT SUM(size) AS s FROM heapscope_peak_allocation"))
    # AND every view says that peak: the report by default, the record summary, the process's stats
    report = _cli("report", str(db))
    space = re.search(r"space:\s+(\S+ \S+)", report)
    assert space is not None and abs(_mib(space.group(1)) - total / 2**20) <= 0.01 * total / 2**20, (report, total)
    said = re.search(r"\): peak (\S+ \S+) sampled unreleased", run.stderr.decode(errors="replace"))
    assert said is not None and abs(_mib(said.group(1)) - total / 2**20) <= 0.01 * total / 2**20, run.describe()
    stats = {r["name"]: int(r["value"]) for r in profile.query("SELECT name, value FROM stats WHERE idx IS NOT NULL")}
    assert stats.get("peak_heap_bytes") == total, stats
    # AND one heap alone shows its state at the process's peak (docs/profile.md): not the native blocks
    one = _cli("report", "--heap", MALLOC, str(db))
    alone = re.search(r"space:\s+(\S+ \S+)", one)
    assert alone is not None and _mib(alone.group(1)) * 2**20 < n_native * native_size / 2, one


REALLOC = Path(__file__).parents[1] / "programs" / "python" / "pyrealloc.py"


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(200)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_a_realloc_pymalloc_passes_on_is_booked_once_at_4096(tmp_path: Path, python: str) -> None:
    """PyMem_Realloc of a 600-byte block (pymalloc took it from malloc) down to 40 bytes: pymalloc
    passes it on to realloc(). At 4096 most such blocks are not sampled and the resize is within
    the fast range, so the stock realloc's fast path takes it (pymem.c, s_realloc): it must keep
    the guard, or the malloc hook books the new block in libc.malloc as well (~20 of 2,000 would
    be; none may)."""
    _version(python)
    db = tmp_path / "realloc.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "4096", "--seed", "3", "--", python,
                       str(REALLOC)], timeout=150)
    assert run.returncode == 0, run.describe()
    profile = Profile(db)
    assert profile.stats().get("python_allocators") == 1
    got: dict[tuple[str, int | None], list[int]] = defaultdict(lambda: [0, 0])
    paths = _paths(profile)
    for r in profile.query("SELECT heap_name, callsite_id, SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a_s,"
                           " SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS a_o"
                           " FROM heap_profile_allocation GROUP BY heap_name, callsite_id"):
        for _name, ftype, file, line in paths.get(r["callsite_id"], []):
            if ftype == "python":
                if file == str(REALLOC):
                    acc = got[(r["heap_name"], line)]
                    acc[0] += int(r["a_s"])
                    acc[1] += int(r["a_o"])
                break
    lines = _markers(REALLOC)
    # THEN neither line has anything in libc.malloc
    for fn in ("grown", "shrunk"):
        assert got[(MALLOC, lines[fn])] == [0, 0], (fn, dict(got))
    # AND both are booked in python.pymalloc, at least as often as sampling says less 4 SD (the
    # line's own small objects, ctypes' ints, are booked there too)
    for fn, size in (("grown", 600), ("shrunk", 40)):
        p = 1 - math.exp(-size / 4096)
        mean, sd = 2000 * p, math.sqrt(2000 * p * (1 - p))
        have = got[(PY_HEAP, lines[fn])][1]
        assert have >= mean - 4 * sd, (fn, have, mean, dict(got))
