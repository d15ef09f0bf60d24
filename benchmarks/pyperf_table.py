"""Python programs under six memory profilers, in one run: the pyperformance table of Scalene's
OSDI'23 paper (Table 3) with heapscope beside it, and three real programs.

    python benchmarks/pyperf_table.py [--quick] [--rounds N] [--only TEXT] [--tools a,b,...]
                                      [--heapscope CMD] [--venv DIR] [--cap X]

The benchmarks are those of Scalene's own overhead runs (its repository's
test/expensive_benchmarks, which the paper's Table 3 reports): async_tree in its four
variants (none, io, memoization, cpu_io_mixed), docutils, fannkuch, mdp, pprint_pformat,
raytrace and sympy_expand. Like those runs, each is one process running the benchmark's own
function a fixed number of loops (benchmarks/pyperf_one.py, the code from pyperformance's
installed data files), not pyperformance's runner: pyperf spawns workers and sizes the loop
count by time, so a slower tool would be given less work. The programs: a pandas/numpy job
(benchmarks/pylib.py pandas), black formatting a large generated module (pylib.py black;
black's wheels are mypyc-compiled) and a json/dict service (pywork.py service).

Each runs plain and under:
  heapscope          `heapscope record -o FILE --force -- python ...` (default interval, Python
                     frames and pymalloc sampled)
  memray             `python -m memray run -q -f -o FILE ...`
  memray --native    the same with --native
  fil                `fil-profile -o DIR --no-browser run ...` (Fil writes its reports at the exit)
  scalene --memory   `python -m scalene run --memory -o FILE ... --- ARGS`: Scalene 2's memory
                     profiling (it has no memory-only mode: --memory is on by default, with its
                     CPU sampling; `--cpu-only` turns memory off)
  memory_profiler    `python -m memory_profiler ...`, the workload's function decorated with its
                     `profile` (its documented way; without a decorated function it does nothing)

Every (workload, tool) pair runs once per round; rounds are interleaved and the order of the
tools rotates from round to round. Each workload's turn in a round begins with a plain run that
is not counted, so that every tool finds the page cache as warm as the others. The figure is
the whole command's wall time as a user runs it (the tool's start, the run, its report), median
over rounds, over the plain run's median. A run is cut at --cap times the plain run's wall
(every wait here is bounded): its cell reads ">Nx" and enters the tool's median at N (a lower
bound, so that median is marked ">="). A tool that exits non-zero shows "failed" and is left
out of the medians.

The peers and the programs' libraries run in a venv this script creates
(benchmarks/out/pyperf-venv, versions pinned in PYPERF_PACKAGES) on this interpreter's base
Python; every workload runs with that venv's python, plain too. Nothing here asserts on time.
--quick (1 round, small programs) is a smoke test of the harness: its figures mean
nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from run import fmt_x, heapscope_readout, verdict
from self_cpu import no_profile_argv

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
PYPERF_PACKAGES = [
    "pyperformance==1.14.0", "pyperf==2.11.0", "docutils==0.23", "sympy==1.14.0",
    "memray==1.20.0", "filprofiler==2024.11.2", "scalene==2.4.0", "memory-profiler==0.61.0", "psutil==7.2.2",
    "pandas==3.1.1", "numpy==2.4.6", "black==26.10.1",
]
# name -> loops: those of Scalene's own runs (test/expensive_benchmarks, each script's __main__:
# docutils 5, fannkuch 3, mdp 5, pprint 7, raytrace and sympy_expand 25, each async_tree one tree),
# 1-18 s plain on the 2-core machine; --quick runs one loop of each
PYPERFORMANCE = {
    "async_tree_none": 1,
    "async_tree_io": 1,
    "async_tree_memoization": 1,
    "async_tree_cpu_io_mixed": 1,
    "docutils": 5,
    "fannkuch": 3,
    "mdp": 5,
    "pprint_pformat": 7,
    "raytrace": 25,
    "sympy_expand": 25,
}
# name -> (pylib.py/pywork.py arguments, with --quick)
PROGRAMS = {
    "pandas/numpy job": (["pylib.py", "pandas", "1000000"], ["pylib.py", "pandas", "100000"]),
    "black, a generated module": (["pylib.py", "black", "100"], ["pylib.py", "black", "20"]),
    "json/dict service": (["pywork.py", "service", "150000"], ["pywork.py", "service", "10000"]),
}
TOOLS = ("none", "heapscope", "heapscope (no profile)", "memray", "memray --native", "fil", "scalene --memory",
         "memory_profiler")
PEERS = TOOLS[3:]
# benchmarks/no_profile.py: heapscope sampling and draining as `record` does, writing nothing. Not a
# peer: the floor of what heapscope costs before its profile, beside what it costs with it.
NO_PROFILE = "heapscope (no profile)"
TARGET = 1.10
NOISY_SPREAD = 0.10
LONGEST = 600.0  # seconds: the bound of a run with no plain run to scale the cap from


@dataclass
class Workload:
    name: str
    script: list[str]  # the Python script and its arguments (the venv's python runs it)
    kind: str  # "pyperformance" or "program"


@dataclass
class Run:
    wall: float
    cpu: float
    status: int  # the command's exit status; -1: cut at the cap
    stats: dict[str, int]


def command(tool: str, w: Workload, py: Path, heapscope: list[str], out: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment of `tool` running w, its output files under out."""
    if tool == "none":
        return [str(py), *w.script], {}
    if tool == "heapscope":
        return [*heapscope, "record", "-o", str(out / "profile.db"), "--force", "--", str(py), *w.script], {}
    if tool.startswith("memray"):
        native = ["--native"] if tool == "memray --native" else []
        return [str(py), "-m", "memray", "run", "-q", "-f", "-o", str(out / "memray.bin"), *native, *w.script], {}
    if tool == "fil":
        return [str(py.parent / "fil-profile"), "-o", str(out / "fil"), "--no-browser", "run", *w.script], {}
    if tool == "scalene --memory":
        return [str(py), "-m", "scalene", "run", "--memory", "-o", str(out / "scalene.json"), w.script[0],
                "---", *w.script[1:]], {}
    if tool == "memory_profiler":
        return [str(py), "-m", "memory_profiler", *w.script], {"BENCH_DECORATE_MAIN": "1"}
    if tool == NO_PROFILE:
        return [*no_profile_argv(heapscope), str(py), *w.script], {}
    raise ValueError(tool)


def run_once(argv: list[str], env: dict[str, str], work: Path, cap_s: float, log: Path) -> Run:
    """One timed run under `measure` (the tree's rusage), killed with its process group past cap_s."""
    usage = work / "rusage.txt"
    usage.unlink(missing_ok=True)
    with open(log, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(work / "measure"), str(usage), *argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **env}, cwd=work,
                                start_new_session=True)
        # Woken by the exit itself: Popen.wait(timeout) polls every 50 ms, 2-5% of these runs.
        pidfd = os.pidfd_open(proc.pid)
        try:
            exited = bool(select.select([pidfd], [], [], cap_s)[0])
        finally:
            os.close(pidfd)
        wall = time.perf_counter() - t0
        if exited:
            status = proc.wait()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = -1
    utime, stime, _ = usage.read_text().split() if usage.exists() and status != -1 else ("nan", "nan", "0")
    return Run(wall, float(utime) + float(stime), status, {})


# --- the venv ------------------------------------------------------------------------


def bench_venv(path: Path) -> Path:
    """The harness's venv, created on first use; the tools that could not be installed are then n/a."""
    py = path / "bin" / "python"
    if not py.exists():
        print(f"creating {path} ({' '.join(PYPERF_PACKAGES)})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q"]
        if subprocess.run([*pip, *PYPERF_PACKAGES]).returncode != 0:
            # one at a time: what installs is used, what does not is named by has() below
            for package in PYPERF_PACKAGES:
                if subprocess.run([*pip, package]).returncode != 0:
                    print(f"could not install {package}", file=sys.stderr)
    return py


def has(py: Path, module: str) -> bool:
    return subprocess.run([str(py), "-c", f"import {module}"], capture_output=True).returncode == 0


def available(py: Path) -> dict[str, str]:
    """tool -> why it cannot run here ("" when it can)."""
    why = {"none": "", "heapscope": "", NO_PROFILE: ""}
    for tool, module in (("memray", "memray"), ("memray --native", "memray"), ("scalene --memory", "scalene"),
                         ("memory_profiler", "memory_profiler")):
        why[tool] = "" if has(py, module) else f"{module} not installed"
    why["fil"] = "" if (py.parent / "fil-profile").exists() and has(py, "filprofiler") else "filprofiler not installed"
    return why


def versions(py: Path) -> str:
    names = [p.split("==")[0] for p in PYPERF_PACKAGES]
    code = ("import importlib.metadata as m\n"
            f"for n in {names!r}:\n"
            "    try: print(n, m.version(n))\n"
            "    except m.PackageNotFoundError: print(n, 'missing')\n")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True)
    return ", ".join(line for line in r.stdout.splitlines())


# --- the run -------------------------------------------------------------------------


def workloads(py: Path, quick: bool, only: str | None) -> list[Workload]:
    found = subprocess.run([str(py), "-c", "import pyperformance, pathlib; "
                            "print(pathlib.Path(pyperformance.__file__).parent / 'data-files' / 'benchmarks')"],
                           capture_output=True, text=True)
    loads: list[Workload] = []
    if found.returncode == 0:
        root = found.stdout.strip()
        for name, loops in PYPERFORMANCE.items():
            loads.append(Workload(name, [str(HERE / "pyperf_one.py"), root, name, str(1 if quick else loops)],
                                  "pyperformance"))
    else:
        print("pyperformance is not importable in the venv: its table is left out", file=sys.stderr)
    for name, (args, quick_args) in PROGRAMS.items():
        a = quick_args if quick else args
        loads.append(Workload(name, [str(HERE / a[0]), *a[1:]], "program"))
    return [w for w in loads if not only or only in w.name]


def run_rounds(loads: list[Workload], tools: list[str], rounds: int, py: Path, heapscope: list[str], work: Path,
               cap: float) -> dict[tuple[str, str], list[Run]]:
    runs: dict[tuple[str, str], list[Run]] = {}
    for r in range(rounds):
        order = tools[r % len(tools):] + tools[: r % len(tools)]
        for w in loads:
            if "none" in tools:
                # Not counted: this VM drops file pages unused for a minute or two (DAMON's pageout),
                # so the round's first run of a workload read its files from disk again (the pandas
                # job: 5.7 s against 2.0 s, the same CPU): heapscope, first in round 2, paid it.
                argv, env = command("none", w, py, heapscope, work)
                x = run_once(argv, env, work, LONGEST, work / "stderr.txt")
                print(f"round {r + 1}/{rounds} {w.name:26} {'(warm-up, none)':18} {x.wall:7.2f}s", file=sys.stderr)
            for tool in order:
                out = work / tool.replace(" ", "").replace("-", "")
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                plain = [x.wall for x in runs.get((w.name, "none"), []) if x.status == 0]
                cap_s = min(cap * min(plain), LONGEST) if plain and tool != "none" else LONGEST
                argv, env = command(tool, w, py, heapscope, out)
                log = work / "stderr.txt"
                x = run_once(argv, env, work, cap_s, log)
                if tool == "heapscope" and (out / "profile.db").exists():
                    x.stats = heapscope_readout(out / "profile.db")[0]
                if x.status > 0:
                    tail = log.read_bytes()[-1500:].decode(errors="replace")
                    sys.stderr.write(f"[{tool}] {w.name}: exit {x.status}: {shlex.join(argv)}\n{tail}\n")
                runs.setdefault((w.name, tool), []).append(x)
                shown = "cut" if x.status == -1 else f"exit {x.status}"
                print(f"round {r + 1}/{rounds} {w.name:26} {tool:18} {x.wall:7.2f}s {shown}", file=sys.stderr)
                shutil.rmtree(out, ignore_errors=True)
    return runs


# --- the tables ----------------------------------------------------------------------


@dataclass
class Cell:
    x: float | None  # wall over the plain run's, medians; for a cut run the cap (a lower bound)
    text: str
    cut: bool = False


def cell(runs: list[Run], plain: list[Run], cap: float, cpu: bool = False) -> Cell:
    """Wall (or with cpu, user+sys of the tree) over the plain run's, medians."""
    base = [r.cpu if cpu else r.wall for r in plain if r.status == 0]
    if not runs or not base:
        return Cell(None, "n/a")
    failed = [r.status for r in runs if r.status > 0]
    if failed:
        return Cell(None, f"failed (exit {failed[0]}, {len(failed)}/{len(runs)})")
    if any(r.status == -1 for r in runs):
        return Cell(None, "cut") if cpu else Cell(cap, f">{cap:.0f}x", cut=True)
    x = statistics.median(r.cpu if cpu else r.wall for r in runs) / statistics.median(base)
    return Cell(x, fmt_x(x, TARGET))


def tables(loads: list[Workload], tools: list[str], runs: dict[tuple[str, str], list[Run]], cap: float,
           why: dict[str, str]) -> list[str]:
    shown = [t for t in tools if t != "none"]
    cells = {(w.name, t): cell(runs.get((w.name, t), []), runs.get((w.name, "none"), []), cap)
             for w in loads for t in shown}
    lines: list[str] = []
    bench = [w for w in loads if w.kind == "pyperformance"]
    medians: dict[str, tuple[float | None, bool]] = {}
    if bench:
        lines += ["| benchmark (plain wall) | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
        for w in bench:
            lines.append(row(w, shown, cells, runs))
        for t in shown:
            xs = [c for w in bench if (c := cells[(w.name, t)]).x is not None]
            medians[t] = (statistics.median(c.x for c in xs) if xs else None, any(c.cut for c in xs))
        lines.append("| **median** | " + " | ".join(
            f"**{'>=' if cut else ''}{fmt_x(m, TARGET)}**" if m is not None else "n/a"
            for m, cut in (medians[t] for t in shown)) + " |")
        lines += ["", f"Medians over the {len(bench)} benchmarks of each tool's slowdown; a \"failed\" cell is left "
                  f"out of its tool's median, a cut one (\">{cap:.0f}x\", stopped at {cap:.0f} times the plain wall) "
                  "enters it at the cap, a lower bound."]
    programs = [w for w in loads if w.kind == "program"]
    if programs:
        lines += ["", "| program (plain wall) | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
        lines += [row(w, shown, cells, runs) for w in programs]
    cpu_cells = {(w.name, t): cell(runs.get((w.name, t), []), runs.get((w.name, "none"), []), cap, cpu=True)
                 for w in loads for t in shown}
    lines += ["", "The same runs in CPU time (user+sys of the whole process tree: the tool's own processes too) over "
              "the plain run's, medians; a cut run has no CPU figure:", "",
              "| workload (plain CPU) | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
    for w in loads:
        base = [r.cpu for r in runs.get((w.name, "none"), []) if r.status == 0]
        lines.append(f"| {w.name} ({statistics.median(base) if base else float('nan'):.2f} s) | "
                     + " | ".join(cpu_cells[(w.name, t)].text for t in shown) + " |")
    lines.append("")
    for t in shown:
        xs = [c.x for w in bench if (c := cpu_cells[(w.name, t)]).x is not None]
        if bench:
            lines.append(f"- {t}: median CPU x over the pyperformance benchmarks it finished "
                         f"({len(xs)}/{len(bench)}): {fmt_x(statistics.median(xs)) if xs else 'n/a'}")
    lines += ["", "heapscope's own figures (medians): whole command wall x, CPU x (user+sys of the tree), its "
              "producer's CPU (`stats` producer_cpu_ns), samples taken (malloc + pymalloc), stacks, nothing lost:",
              "", "| workload | wall x | CPU x | producer CPU | samples | stacks | dropped or unwinding errors |",
              "|---|---|---|---|---|---|---|"]
    for w in loads:
        hs, plain = runs.get((w.name, "heapscope"), []), runs.get((w.name, "none"), [])
        ok = [r for r in hs if r.status == 0]
        okp = [r for r in plain if r.status == 0]
        if not ok or not okp:
            continue
        cpu = statistics.median(r.cpu for r in ok) / statistics.median(r.cpu for r in okp)
        last = ok[-1].stats
        samples = last.get("heap_samples", 0) + last.get("python_heap_samples", 0)
        lost = {k: v for k, v in last.items() if v and ("drop" in k or "error" in k or "lost" in k or "gap" in k)}
        producer = statistics.median(r.stats.get("producer_cpu_ns", 0) for r in ok) / 1e9
        lines.append(f"| {w.name} | {cells[(w.name, 'heapscope')].text} | {fmt_x(cpu)} | {producer:.2f} s | "
                     f"{samples:,} | {last.get('stacks', 0):,} | "
                     f"{', '.join(f'{k}={v}' for k, v in lost.items()) or 'none'} |")
    checks: list[tuple[str, str, bool | None]] = []
    if "heapscope" in medians:
        m, _ = medians["heapscope"]
        checks.append((f"pyperformance: heapscope's median <= {TARGET:.2f}x", fmt_x(m, TARGET),
                       None if m is None else m <= TARGET))
        peers = {t: v for t, (v, _) in medians.items() if t in PEERS and v is not None}
        if m is not None and peers:
            low = min(peers, key=lambda t: peers[t])
            checks.append(("pyperformance: heapscope's median the lowest",
                           f"{fmt_x(m)}; next {low} {fmt_x(peers[low])}", m < peers[low]))
    for w in programs:
        c = cells.get((w.name, "heapscope"))
        if c is not None:
            checks.append((f"{w.name}: <= {TARGET:.2f}x", c.text, None if c.x is None or c.cut else c.x <= TARGET))
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {m} | {verdict(ok)} |" for name, m, ok in checks]
    missing = [f"{t} ({why[t]})" for t in TOOLS if why.get(t)]
    if missing:
        lines += ["", "Not run here: " + ", ".join(missing) + "."]
    noisy = []
    for w in loads:
        base = [r.wall for r in runs.get((w.name, "none"), []) if r.status == 0]
        if len(base) > 1 and max(base) / min(base) - 1 > NOISY_SPREAD:
            noisy.append(f"{w.name} ({max(base) / min(base) - 1:.0%})")
    if noisy:
        lines += ["", f"**Noisy:** the plain rounds of {', '.join(noisy)} spread by more than {NOISY_SPREAD:.0%} "
                  "(slowest over fastest): their ratios are weak evidence."]
    return lines


def row(w: Workload, shown: list[str], cells: dict[tuple[str, str], Cell],
        runs: dict[tuple[str, str], list[Run]]) -> str:
    base = [r.wall for r in runs.get((w.name, "none"), []) if r.status == 0]
    wall = f"{statistics.median(base):.2f} s" if base else "n/a"
    return f"| {w.name} ({wall}) | " + " | ".join(cells[(w.name, t)].text for t in shown) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, small programs: a smoke test")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5, --quick 1)")
    parser.add_argument("--only", default=None, help="run only the workloads whose name contains this")
    parser.add_argument("--tools", default=",".join(TOOLS[1:]),
                        help=f"comma-separated, of {', '.join(TOOLS[1:])} (default: all; plain always runs)")
    parser.add_argument("--heapscope", default=None, help="heapscope command (default: on PATH, else python -m)")
    parser.add_argument("--venv", type=Path, default=OUT / "pyperf-venv",
                        help="venv of the peers and the programs' libraries, created if missing")
    parser.add_argument("--cap", type=float, default=5.0,
                        help="stop a run at this many times the plain wall (default 5)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    wanted = [t.strip() for t in args.tools.split(",") if t.strip()]
    if bad := [t for t in wanted if t not in TOOLS[1:]]:
        parser.error(f"unknown tool {bad[0]!r}: pick from {', '.join(TOOLS[1:])}")
    heapscope = shlex.split(args.heapscope) if args.heapscope else (
        [shutil.which("heapscope") or ""] if shutil.which("heapscope") else [sys.executable, "-m", "heapscope"])

    OUT.mkdir(exist_ok=True)
    py = bench_venv(args.venv)
    why = available(py)
    tools = ["none"] + [t for t in TOOLS[1:] if t in wanted and not why[t]]
    loads = workloads(py, args.quick, args.only)
    work = Path(tempfile.mkdtemp(prefix="pyperf-", dir=OUT))
    load_before = os.getloadavg()[0]
    started = time.time()
    try:
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(work / "measure"), str(HERE / "measure.c")], check=True)
        runs = run_rounds(loads, tools, rounds, py, heapscope, work, args.cap)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    hs_version = subprocess.run([*heapscope, "--version"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    flags = " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    head = [f"`python benchmarks/pyperf_table.py{' ' + flags if flags else ''}`: {rounds} interleaved round(s), "
            f"tool order rotated, medians, {(time.time() - started) / 60:.1f} min; {os.cpu_count()} CPUs, "
            f"Linux {platform.release()}, Python {platform.python_version()}, load average {load_before:.1f} at the "
            f"start and {os.getloadavg()[0]:.1f} at the end. {hs_version} at {commit}; {versions(py)}.", ""]
    if args.quick:
        head += ["**--quick: one round, small programs, a smoke test of the harness; these figures are not "
                 "measurements.**", ""]
    print("\n".join(["", *head, *tables(loads, tools, runs, args.cap, why)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
