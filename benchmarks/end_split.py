"""Where `heapscope record` spends the time after its target's exit, per phase.

    python benchmarks/end_split.py [--rounds 3] [--python PY] [--variant LABEL=DIR ...] [--child-python PY]
                                   [--cprofile DIR] [--record-args ARGS] [WORKLOAD ...]

WORKLOAD: true, ls, cc1plus, git, json, objects, markdown, pandas, build, pyperf:NAME (a pyperformance benchmark
of pyperf_table.py, one loop; --python its venv's) (default: all but ls, pandas, build and pyperf). Each run is
`heapscope record -o X -- TARGET` in a child interpreter (the console entry point's
path: cli.main, then os._exit) with timers around the end path's functions
(Recording.close and what it calls, Producer._end and dump, the writer's commits,
the symbolizer's finish, the summary). This process watches the target through a
pidfd, so "exit" is the target's real exit, not when the loop noticed it, and the
command's end is its wait4. Each heapscope (--variant) has a symbol cache of its own, a
copy of the user's (--cache-from), topped up by a first round that is not counted.
Printed per workload (medians over the rounds):

    exit -> end        wall ms from the target's exit to the command's end
    noticed            exit -> the loop saw it (Recording._exited); a process's final
                       dump starts at its socket's end, often before its exit
    phases             wall ms after the exit and CPU ms of each timed function that
                       ended after the exit (nested ones indented), and how many calls
    CPU                the command's CPU from the loop's notice to its end (all threads),
                       and over the whole run: all threads and the main one (the rest is
                       the symbol read-ahead thread)

--cprofile DIR writes a cProfile of each run from the first process's final dump to
the end (cProfile inflates Python-heavy code: use it for the call tree, the phases
for the figures).
The wall figures of one run on a shared 2-core machine are noisy; the phases are
timed in the same run as the total, so their split holds even then.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCH_VENV_PY = HERE / "out" / "venv" / "bin" / "python"

# (module, class or "", function) timed in the child; the label is class.function.
TIMED = [
    ("heapscope.session", "Recording", "_target_exited"),
    ("heapscope.session", "Recording", "close"),
    ("heapscope.session", "Recording", "_chore"),
    ("heapscope.session", "Recording", "_end_profiling"),
    ("heapscope.session", "Recording", "_write_end"),
    ("heapscope.session", "Recording", "_figures"),
    ("heapscope.session", "Recording", "_missing_figures"),
    ("heapscope.session", "Recording", "_shallow_stats"),
    ("heapscope.session", "Recording", "_peaks"),
    ("heapscope.session", "Recording", "_uninstall_signals"),
    ("heapscope.producer.producer", "Producer", "finish"),
    ("heapscope.producer.producer", "Producer", "abandon"),
    ("heapscope.producer.producer", "Producer", "_end"),
    ("heapscope.producer.producer", "Producer", "dump"),
    ("heapscope.producer.producer", "Producer", "_write_tables"),
    ("heapscope.producer.producer", "Producer", "_custom_heap_rows"),
    ("heapscope.bookkeeping.dump", "ProcessHeap", "dump_values"),
    ("heapscope.bookkeeping.dump", "ProcessHeap", "resolve"),
    ("heapscope.bookkeeping.dump", "ProcessHeap", "resolve_known"),
    ("heapscope.producer.producer", "Producer", "resolve_early"),
    ("heapscope.bookkeeping.dump", "ProcessHeap", "peak_values"),
    ("heapscope.bookkeeping.dump", "ProcessHeap", "memory_values"),
    ("heapscope.bookkeeping.dump", "ProcessHeap", "lifetime_values"),
    ("heapscope.store.writer", "ProfileWriter", "add_memory"),
    ("heapscope.store.writer", "ProfileWriter", "add_lifetime_values"),
    ("heapscope.store.writer", "ProfileWriter", "commit"),
    ("heapscope.store.writer", "ProfileWriter", "close"),
    ("heapscope.store.writer", "ProfileWriter", "add_dump_values"),
    ("heapscope.store.writer", "ProfileWriter", "add_peak_values"),
    ("heapscope.store.writer", "ProfileWriter", "add_callsites_flat"),
    ("heapscope.store.writer", "ProfileWriter", "add_frames"),
    ("heapscope.symbolize.live", "LiveSymbolizer", "finish"),
    ("heapscope.symbolize.live", "LiveSymbolizer", "close"),
    ("heapscope.symbolize.profile", "", "symbolize_profile"),
    ("heapscope.cli.summary", "", "print_summary"),
]


def _child(fd: int, argv: list[str], profile_to: str) -> None:
    """The `record` command with timers: spans as JSON on `fd` (the target's pid first, a line)."""
    import importlib
    import inspect

    spans: list[tuple[str, int, float, float, float, float]] = []  # label, depth, t0, t1, cpu0, cpu1
    depth = [0]
    out = os.fdopen(fd, "w")

    def timed(label: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*a, **k):  # type: ignore[no-untyped-def]
            t0, c0 = time.monotonic(), time.process_time()
            depth[0] += 1
            try:
                return fn(*a, **k)
            finally:
                depth[0] -= 1
                spans.append((label, depth[0], t0, time.monotonic(), c0, time.process_time()))
        wrapper.__name__ = fn.__name__
        return wrapper

    for module, cls, name in TIMED:
        mod = importlib.import_module(module)
        owner = getattr(mod, cls) if cls else mod
        wrapped = timed(f"{cls}.{name}" if cls else name, getattr(owner, name))
        static = cls and isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, staticmethod(wrapped) if static else wrapped)
    from heapscope import session as recording

    recs: list[recording.Recording] = []
    start = recording.Recording.start

    def start_and_tell(self, *a, **k):  # type: ignore[no-untyped-def]
        pid = start(self, *a, **k)
        recs.append(self)
        out.write(f"{pid}\n")
        out.flush()
        return pid

    recording.Recording.start = start_and_tell  # type: ignore[method-assign]
    from heapscope import cli
    from heapscope.producer import producer as producer_mod

    if profile_to:  # cProfile from the first process's end (its final drain and dump) to the command's end
        import cProfile

        prof = cProfile.Profile()
        end = producer_mod.Producer._end

        def profiled_end(self, *a, **k):  # type: ignore[no-untyped-def]
            if not prof_on:
                prof_on.append(1)
                prof.enable()
            return end(self, *a, **k)

        prof_on: list[int] = []
        producer_mod.Producer._end = profiled_end  # type: ignore[method-assign]
    code = cli.main(argv)
    if profile_to:
        prof.disable()
        prof.dump_stats(profile_to)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    rec = recs[0] if recs else None
    main_cpu = time.thread_time()
    json.dump({"spans": spans, "exited": rec._exited if rec else None, "end": time.monotonic(),
               "cpu_end": time.process_time(), "main_thread_cpu": main_cpu,
               "code": code}, out)
    out.close()
    os._exit(code & 0xFF)


def _run(python: str, src: str | None, argv: list[str], cwd: Path, profile_to: str = "",
         cache: Path | None = None) -> dict[str, Any]:
    r, w = os.pipe()
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    proc = subprocess.Popen([python, __file__, "--child", str(w), profile_to, "--", *argv], pass_fds=(w,), env=env,
                            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(w)
    reader = os.fdopen(r)
    line = reader.readline()
    exit_t = None
    if line.strip():
        pidfd = os.pidfd_open(int(line))
        select.select([pidfd], [], [])
        exit_t = time.monotonic()
        os.close(pidfd)
    _pid, status, usage = os.wait4(proc.pid, 0)
    end_t = time.monotonic()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    data = reader.read()
    if not data or exit_t is None or "error:" in err or os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"record failed: {' '.join(argv)}\n{err}")
    got: dict[str, Any] = json.loads(data)
    got["exit"] = exit_t
    got["end_wait"] = end_t
    got["stderr"] = err
    return got


def workloads(names: list[str], work: Path, python: str) -> dict[str, list[str]]:
    """Each named workload's command (the WORKLOAD list above); producer_split.py runs the same."""
    sys.path.insert(0, str(HERE))
    import run

    found: dict[str, list[str]] = {}
    for name in names:
        if name == "true":
            found[name] = ["/bin/true"]
        elif name == "ls":  # fixed_cost.py's short real program (with --record-args=-i\ 1 there)
            found[name] = ["ls", "-l", "/usr/bin"]
        elif name == "cc1plus":
            cc1 = run.cc1plus_command(work, quick=False)
            if cc1:
                found[name] = cc1
        elif name == "git":
            repo = work / "history.git"
            run.generate_git_repo(repo, 4000)
            found[name] = ["git", "-C", str(repo), "--no-pager", "log", "-p"]
        elif name == "json":
            found[name] = [python, str(HERE / "pywork.py"), "200000"]
        elif name == "objects":
            found[name] = [python, str(HERE / "pyobjects.py"), "16", "22"]
        elif name == "markdown":
            found[name] = [python, str(HERE / "pylib.py"), "1000"]
        elif name == "pandas":  # the pyperf table's pandas/numpy job (--python: a venv that has pandas)
            found[name] = [python, str(HERE / "pylib.py"), "pandas", "1000000"]
        elif name == "build":  # proctree.py's make -j2 of brotli (113 processes; proctree.py unpacks it first)
            src = next((HERE / "out" / "proctree").glob("brotli-*/Makefile.heapscope"), None)
            if src is None:
                raise SystemExit("build: run benchmarks/proctree.py once first (it unpacks brotli)")
            found[name] = ["sh", "-c", f"cd {src.parent} && rm -rf build && exec make -s -f Makefile.heapscope -j2"]
        elif name.startswith("pyperf:"):  # a pyperformance benchmark, one loop (--python: a venv that has it)
            root = subprocess.run([python, "-c", "import pyperformance, pathlib; print(pathlib.Path("
                                   "pyperformance.__file__).parent / 'data-files' / 'benchmarks')"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            found[name] = [python, str(HERE / "pyperf_one.py"), root, name.split(":", 1)[1], "1"]
        else:
            raise SystemExit(f"unknown workload {name}")
    return found


def _med(rows: list[dict[str, Any]], f: Callable[[dict[str, Any]], float]) -> float:
    return statistics.median(f(g) for g in rows)


def _report(name: str, rows: list[dict[str, Any]]) -> None:
    total = _med(rows, lambda g: (g["end_wait"] - g["exit"]) * 1e3)
    noticed = _med(rows, lambda g: (g["exited"] - g["exit"]) * 1e3 if g["exited"] else float("nan"))
    print(f"\n{name}: exit -> end {total:.1f}; noticed after {noticed:.1f}")
    # Spans ending after the exit (their wall clipped to it), summed per label and depth, in
    # the order of their first start.
    per_run: list[dict[tuple[str, int], tuple[float, float, float]]] = []
    order: dict[tuple[str, int], float] = {}
    for g in rows:
        acc: dict[tuple[str, int], tuple[float, float, float]] = {}
        for label, depth, t0, t1, c0, c1 in g["spans"]:
            if t1 < g["exit"]:
                continue
            key = (label, depth)
            was = acc.get(key, (0.0, 0.0, 0.0))
            acc[key] = (was[0] + (t1 - max(t0, g["exit"])) * 1e3, was[1] + (c1 - c0) * 1e3, was[2] + 1)
            order[key] = min(order.get(key, t0 - g["exit"]), t0 - g["exit"])
        per_run.append(acc)
    none = (0.0, 0.0, 0.0)
    for key in sorted(order, key=lambda k: (order[k], k[1])):
        wall = statistics.median(a.get(key, none)[0] for a in per_run)
        cpu = statistics.median(a.get(key, none)[1] for a in per_run)
        n = statistics.median(a.get(key, none)[2] for a in per_run)
        if wall >= 0.05 or cpu >= 0.05:
            print(f"  {'  ' * key[1]}{key[0]:<40} {wall:7.1f} wall {cpu:7.1f} CPU  x{n:g}")

    def after(g: dict[str, Any]) -> float:
        seen = [c0 for label, _d, _t0, _t1, c0, _c1 in g["spans"] if label == "Recording._target_exited"]
        return (g["cpu_end"] - seen[0]) * 1e3 if seen else float("nan")

    print(f"  the command's own exit (os._exit -> wait4) {_med(rows, lambda g: (g['end_wait'] - g['end']) * 1e3):.1f}")
    print(f"  CPU from the loop's notice to the end {_med(rows, after):.1f}")
    print(f"  producer CPU, whole run {_med(rows, lambda g: g['cpu_end'] * 1e3):.0f}; main thread"
          f" {_med(rows, lambda g: g['main_thread_cpu'] * 1e3):.0f}")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(int(sys.argv[2]), sys.argv[5:], sys.argv[3])
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=str(BENCH_VENV_PY) if BENCH_VENV_PY.exists() else sys.executable,
                    help="the Python workloads' interpreter (markdown needs Markdown installed: run.py's"
                         " benchmark venv, benchmarks/out/venv, the default when it exists)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=DIR",
                    help="a heapscope to measure: DIR first on PYTHONPATH (an installed package's copy, say"
                         " with another commit's .py files); repeatable, run interleaved; default: the one"
                         " --child-python imports")
    ap.add_argument("--child-python", default=sys.executable,
                    help="the interpreter running `record` (use a non-editable install with --variant)")
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "heapscope"
    ap.add_argument("--cache-from", default=str(user_cache) if user_cache.is_dir() else "",
                    help="each variant's symbol cache starts as a copy of this one (default: the user's, when"
                         " there is one; '' for empty caches)")
    ap.add_argument("--record-args", default="", help="more options of `record`")
    ap.add_argument("--cprofile", metavar="DIR", default="",
                    help="write a cProfile of each run's end (from the first process's final dump) here")
    ap.add_argument("--keep", action="store_true", help="print each run's stderr (the summary)")
    ap.add_argument("workloads", nargs="*", default=["true", "cc1plus", "git", "json", "objects", "markdown"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hs-end-split-"))
    loads = workloads(args.workloads, work, args.python)
    variants = dict(v.split("=", 1) for v in args.variant) or {"": ""}
    if args.cache_from:  # each variant's cache starts as a copy of this one (a machine's warm cache)
        for label in variants:
            shutil.copytree(args.cache_from, work / f"cache-{label}" / "heapscope")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(n, v): [] for n in loads for v in variants}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    try:
        for rnd in range(-1, args.rounds):  # round -1 fills each variant's own symbol cache, not counted
            order = list(variants.items())
            order = order[rnd % len(order):] + order[:rnd % len(order)]  # rotated: drift hits each alike
            for name, target in loads.items():
                for label, src in order:
                    out = work / f"{name}-{rnd}.db"
                    prof = Path(args.cprofile).resolve() / f"{name}{label}-{rnd}.prof" if args.cprofile else ""
                    got = _run(args.child_python, src,
                               ["record", *args.record_args.split(), "-o", str(out), "--", *target], work, str(prof),
                               work / f"cache-{label}")
                    out.unlink(missing_ok=True)
                    if rnd >= 0:
                        runs[(name, label)].append(got)
                    if args.keep:
                        print(got["stderr"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}; {args.rounds} rounds, medians, ms")
    for (name, label), rows in runs.items():
        _report(f"{name} [{label}]" if label else name, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
