"""run.py's sections that other scripts measure: process trees (proctree.py), the
pyperformance table (pyperf_table.py) and reading profiles (read_speed.py, with the peers'
readers on one program each tool recorded), so that one run of run.py regenerates every
table of issue 30's targets.

Each script runs as its own process, as it does alone (its progress on stderr); its
markdown is this section's. The reading section records the build itself and times each
command in fresh processes; its peers' part records cc1plus (run.py's workload) under
heaptrack and heapscope, and a Python program under memray and heapscope, and times each
tool's own reader of its own profile: what a user waits for after the same run.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def script_lines(argv: list[str], timeout_s: float) -> list[str]:
    """The markdown another benchmark script prints, or one line saying why there is none."""
    try:
        proc = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], stdout=subprocess.PIPE,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [f"`{' '.join(argv)}` ran over {timeout_s / 60:.0f} min: stopped, no table"]
    if proc.returncode != 0:
        return [f"`{' '.join(argv)}` failed with status {proc.returncode}: no table"]
    return proc.stdout.splitlines()


def trees_section(quick: bool, rounds: int, heapscope: str, peers: bool) -> list[str]:
    """A short process's cost and `make -j2` of brotli (~113 processes)."""
    argv = ["proctree.py", "--markdown", "--rounds", str(rounds), "--heapscope", heapscope]
    argv += ["--loop", "20", "--no-make"] if quick else []
    argv += ["--peers"] if peers else []
    return ["### Process trees", "", *script_lines(argv, 3600)]


def pyperf_section(quick: bool, rounds: int, heapscope: str, peers: bool) -> list[str]:
    """pyperformance's benchmarks of Scalene's Table 3, the pandas job, black, the json service."""
    # Cut at 2x: the slowest peers (Fil, Scalene, memory_profiler) would otherwise take most of
    # the run's time with Scalene's loop counts, and a cut cell still bounds their median.
    argv = ["pyperf_table.py", "--rounds", str(rounds), "--cap", "2", "--heapscope", heapscope]
    argv += ["--quick"] if quick else []
    argv += [] if peers else ["--tools", "heapscope"]
    return ["### Python programs: the pyperformance table", "", *script_lines(argv, 3 * 3600)]


def reading_section(quick: bool, rounds: int, work: Path, peer_loads: list[tuple[str, list[str], list[str]]],
                    memray_python: str | None) -> list[str]:
    """`report`, `leaks`, `flamegraph`, `diff` and every export of a recorded build, against the
    targets; then each tool's reader on a profile of the same program. `peer_loads`: (name,
    argv, Python script) of run.py's workloads (cc1plus, python json)."""
    from proctree import brotli_sources
    from read_speed import record_build, targets_markdown, time_commands

    lines = ["### Reading profiles", ""]
    db = work / "build.db"
    if quick:
        lines += ["(--quick: no build recorded; the peers' part only)", ""]
    else:
        record_build(brotli_sources(None), db)
        with contextlib.redirect_stdout(sys.stderr):  # its plain-text table is progress here
            got = time_commands(db, max(rounds, 1), work / "build.out", None)
        lines += [f"`record -- make -j2` of brotli, then {max(rounds, 1)} interleaved rounds of the commands, each "
                  "in a fresh process; medians, and for a ratio to report the median of the rounds' own:", "",
                  *targets_markdown(db, got), ""]
    lines += peer_readers(work, peer_loads, memray_python, max(rounds, 1))
    return lines


def _timed(argv: list[str], runs: int) -> float | None:
    """Median wall seconds of `argv` (its output discarded), None when it fails."""
    walls = []
    for _ in range(runs):
        t = time.perf_counter()
        if subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            return None
        walls.append(time.perf_counter() - t)
    return statistics.median(walls)


def _size(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths if p.exists()) / 2**20


def peer_readers(work: Path, loads: list[tuple[str, list[str], list[str]]], memray_python: str | None,
                 runs: int) -> list[str]:
    """Each tool's text report and flamegraph of its own profile of the same program, wall seconds."""
    hs = [sys.executable, "-m", "heapscope"]
    rows = []
    for name, argv, script in loads:
        d = work / "peers"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        db = d / "heapscope.db"
        if subprocess.run([*hs, "record", "-q", "-o", str(db), "--", *argv], stdout=subprocess.DEVNULL).returncode:
            continue
        rows.append((name, "heapscope", _size([db]), _timed([*hs, "report", str(db)], runs),
                     _timed([*hs, "flamegraph", str(db), "-o", str(d / "hs.html"), "--force"], runs)))
        if not script and shutil.which("heaptrack"):
            subprocess.run(["heaptrack", "-o", str(d / "ht"), *argv], stdout=subprocess.DEVNULL)
            zst = d / "ht.zst"
            if zst.exists():
                rows.append((name, "heaptrack (heaptrack_print; -F for its flamegraph's stacks)", _size([zst]),
                             _timed(["heaptrack_print", str(zst)], runs),
                             _timed(["heaptrack_print", "-F", str(d / "ht.stacks"), str(zst)], runs)))
        if script and memray_python:
            bin_ = d / "memray.bin"
            subprocess.run([memray_python, "-m", "memray", "run", "-q", "-f", "-o", str(bin_), *script],
                           stdout=subprocess.DEVNULL)
            if bin_.exists():
                rows.append((name, "memray (summary; flamegraph)", _size([bin_]),
                             _timed([memray_python, "-m", "memray", "summary", str(bin_)], runs),
                             _timed([memray_python, "-m", "memray", "flamegraph", "-f", "-o", str(d / "m.html"),
                                     str(bin_)], runs)))
    if not rows:
        return []

    def s(x: float | None) -> str:
        return "failed" if x is None else f"{x:.2f}"

    return ["The same program recorded by each tool, then each tool's own text report and flamegraph of it "
            f"(wall s, median of {runs}):", "",
            "| program | tool | profile MiB | report | flamegraph |", "|---|---|---|---|---|",
            *(f"| {n} | {t} | {mib:.1f} | {s(r)} | {s(f)} |" for n, t, mib, r, f in rows)]
