"""What `--heapscope` costs a test suite: the same pytest run with and without it.

A generated suite of TESTS tests doing everyday Python work (build and sort
lists of dicts, format and parse JSON, join strings), a few ms each, some
with limit_memory / limit_leaks marks (inert without --heapscope). Each
round runs `python -m pytest -q` on it without and with `--heapscope`
(order alternating per round), in a fresh process: wall time of the whole
command and CPU time (user+sys) of its process tree; medians over ROUNDS,
and the median of each round's with/without ratio (robust to a machine whose
load changes between rounds).

    python benchmarks/pytest_overhead.py [--rounds 7] [--tests 300] [--interval 4096] [--python-objects] [--split]
                                         [--trivial]

--trivial makes every test empty (`pass`, marks kept): what is left is pytest's own
per-test work and the plugin's per-test cost (two questions to the parent and their
answers), the figure that matters for suites of very short tests.

--split also runs, each round, `--heapscope` with a small plugin of this
benchmark's (SPLIT_PLUGIN, `-p`) that reads CPU times from inside: the parent's
own before its recording starts (its pytest start-up), the parent's total
(start-up, producer, answering the windows), the tests' process (RUSAGE_CHILDREN
of the parent: the tests under the client), and the parent's CPU in answering
the per-test questions; the same with the tests' process asking nothing (no
windows: the client and the producer alone); and `--co` (start-up and
collection, no test run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = '''
import json
import pytest

def work(n):
    rows = [{"id": i, "name": f"item-{i}", "tags": [str(i % 7), str(i % 11)], "score": (i * 7919) % 1000}
            for i in range(n)]
    rows.sort(key=lambda r: (r["score"], r["name"]))
    text = json.dumps(rows)
    back = json.loads(text)
    return len(back) + len(",".join(r["name"] for r in back))
'''

ONE = '''
{mark}def test_{i}():
    assert work({n}) > 0
'''


EMPTY = '''
{mark}def test_{i}():
    pass
'''


def write_suite(d: Path, tests: int, trivial: bool = False) -> None:
    parts = [SUITE]
    for i in range(tests):
        mark = ""
        if i % 10 == 0:
            mark = '@pytest.mark.limit_memory("512 MB")\n'
        elif i % 10 == 5:
            mark = '@pytest.mark.limit_leaks("64 MB")\n'
        parts.append((EMPTY if trivial else ONE).format(i=i, n=1000 + (i % 5) * 400, mark=mark))
    (d / "test_suite.py").write_text("".join(parts))


SPLIT_PLUGIN = '''
import os, resource, sys, time
import heapscope.hosts.pytest_plugin as hp

def cpu(who):
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime

answered = [0.0]
answer = hp._Parent._answer

def timed_answer(self, conn, msg):
    t0 = time.process_time()
    answer(self, conn, msg)
    answered[0] += time.process_time() - t0

run_parent = hp._run_parent

def timed_run_parent(*args):
    start = cpu(resource.RUSAGE_SELF)
    try:
        return run_parent(*args)
    finally:
        print(f"SPLIT {start:.4f} {cpu(resource.RUSAGE_SELF):.4f} {cpu(resource.RUSAGE_CHILDREN):.4f} "
              f"{answered[0]:.4f}", file=sys.stderr)

hp._Parent._answer = timed_answer
hp._run_parent = timed_run_parent
if os.environ.get("HS_BENCH_NO_WINDOWS"):
    hp._Child._ask = lambda self, msg: None
'''


def run(d: Path, extra: list[str], env: dict[str, str] | None = None) -> tuple[float, float, list[float]]:
    """(wall s, cpu s of the tree, the SPLIT figures if printed)"""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestAssertRewriteWarning", "test_suite.py", *extra],
                          cwd=d, capture_output=True, text=True, timeout=600,
                          env={**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, **(env or {})})
    elapsed = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"pytest {' '.join(extra)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    split = next(([float(x) for x in line.split()[1:]] for line in proc.stderr.splitlines()
                  if line.startswith("SPLIT ")), [])
    return elapsed, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), split


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def print_split(rows: dict[str, list[tuple[float, float, list[float]]]]) -> None:
    """The --split rows: CPU medians."""
    inside, quiet = rows["inside"], rows["quiet"]
    print("  split (CPU medians, s):")
    print(f"    start-up and collection, no test (--co): {median([r[1] for r in rows['co']]):.3f}")
    for label, runs in (("--heapscope", inside), ("--heapscope, no window asked", quiet)):
        start = median([r[2][0] for r in runs])
        parent = median([r[2][1] for r in runs])
        child = median([r[2][2] for r in runs])
        print(f"    {label}: whole tree {median([r[1] for r in runs]):.3f} = parent {parent:.3f} "
              f"(its pytest start-up {start:.3f}, recording {parent - start:.3f}"
              + (f", of which answering the windows {median([r[2][3] for r in runs]):.3f}" if runs is inside else "")
              + f") + tests' process under the client {child:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tests", type=int, default=300)
    ap.add_argument("--interval", default="4096")
    ap.add_argument("--python-objects", action="store_true", help="also pass --heapscope-python-objects")
    ap.add_argument("--split", action="store_true", help="also measure where the time goes (see above)")
    ap.add_argument("--trivial", action="store_true", help="empty tests: the per-test cost alone (see above)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hs-pytest-bench-") as tmp:
        d = Path(tmp)
        write_suite(d, args.tests, args.trivial)
        (d / "hs_bench_split.py").write_text(SPLIT_PLUGIN)
        on = ["--heapscope", "--heapscope-interval", args.interval]
        if args.python_objects:
            on.append("--heapscope-python-objects")
        run(d, [])  # warm the page cache and the bytecode
        plain: list[tuple[float, float, list[float]]] = []
        profiled: list[tuple[float, float, list[float]]] = []
        rows: dict[str, list[tuple[float, float, list[float]]]] = {"inside": [], "quiet": [], "co": []}
        instrumented = ["-p", "hs_bench_split", *on]
        for r in range(args.rounds):
            order = [([], plain), (on, profiled)]
            for extra, into in (order if r % 2 == 0 else order[::-1]):
                into.append(run(d, extra))
            if args.split:
                rows["inside"].append(run(d, instrumented, {"PYTHONPATH": str(d)}))
                rows["quiet"].append(run(d, instrumented, {"PYTHONPATH": str(d), "HS_BENCH_NO_WINDOWS": "1"}))
                rows["co"].append(run(d, ["--co"]))
        print(f"{args.tests} {'empty ' if args.trivial else ''}tests, {args.rounds} interleaved rounds, "
              f"interval {args.interval}" + (", --heapscope-python-objects" if args.python_objects else ""))
        for label, k in (("wall", 0), ("cpu", 1)):
            without = [x[0] if k == 0 else x[1] for x in plain]
            with_ = [x[0] if k == 0 else x[1] for x in profiled]
            p, h = median(without), median(with_)
            paired = median([b / a for a, b in zip(without, with_, strict=True)])
            print(f"  {label}: without median {p:.2f} s, with --heapscope median {h:.2f} s; "
                  f"ratio of medians {h / p:.2f}x, median of paired ratios {paired:.2f}x")
            print(f"        without: {', '.join(f'{x:.2f}' for x in without)}")
            print(f"        with:    {', '.join(f'{x:.2f}' for x in with_)}")
        if args.split:
            print_split(rows)


if __name__ == "__main__":
    main()
