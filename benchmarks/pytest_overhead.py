"""What `--heapscope` costs a test suite: the same pytest run with and without it.

A generated suite of TESTS tests doing everyday Python work (build and sort
lists of dicts, format and parse JSON, join strings), a few ms each, some
with limit_memory / limit_leaks marks (inert without --heapscope). Each
round runs `python -m pytest -q` on it without and with `--heapscope`
(order alternating per round), in a fresh process: wall time of the whole
command and CPU time (user+sys) of its process tree; medians over ROUNDS,
and the median of each round's with/without ratio (robust to a machine whose
load changes between rounds).

    python benchmarks/pytest_overhead.py [--rounds 7] [--tests 300] [--interval 4096] [--python-objects]
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


def write_suite(d: Path, tests: int) -> None:
    parts = [SUITE]
    for i in range(tests):
        mark = ""
        if i % 10 == 0:
            mark = '@pytest.mark.limit_memory("512 MB")\n'
        elif i % 10 == 5:
            mark = '@pytest.mark.limit_leaks("64 MB")\n'
        parts.append(ONE.format(i=i, n=1000 + (i % 5) * 400, mark=mark))
    (d / "test_suite.py").write_text("".join(parts))


def run(d: Path, extra: list[str]) -> tuple[float, float]:
    """(wall s, cpu s of the tree)"""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestAssertRewriteWarning", "test_suite.py", *extra],
                          cwd=d, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})
    elapsed = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"pytest {' '.join(extra)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    return elapsed, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tests", type=int, default=300)
    ap.add_argument("--interval", default="4096")
    ap.add_argument("--python-objects", action="store_true", help="also pass --heapscope-python-objects")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hs-pytest-bench-") as tmp:
        d = Path(tmp)
        write_suite(d, args.tests)
        on = ["--heapscope", "--heapscope-interval", args.interval]
        if args.python_objects:
            on.append("--heapscope-python-objects")
        run(d, [])  # warm the page cache and the bytecode
        plain: list[tuple[float, float]] = []
        profiled: list[tuple[float, float]] = []
        for r in range(args.rounds):
            order = [([], plain), (on, profiled)]
            for extra, into in (order if r % 2 == 0 else order[::-1]):
                into.append(run(d, extra))
        print(f"{args.tests} tests, {args.rounds} interleaved rounds, interval {args.interval}"
              + (", --heapscope-python-objects" if args.python_objects else ""))
        for label, k in (("wall", 0), ("cpu", 1)):
            p = statistics.median(x[k] for x in plain)
            h = statistics.median(x[k] for x in profiled)
            paired = statistics.median(b[k] / a[k] for a, b in zip(plain, profiled, strict=True))
            print(f"  {label}: without median {p:.2f} s, with --heapscope median {h:.2f} s; "
                  f"ratio of medians {h / p:.2f}x, median of paired ratios {paired:.2f}x")
            print(f"        without: {', '.join(f'{x[k]:.2f}' for x in plain)}")
            print(f"        with:    {', '.join(f'{x[k]:.2f}' for x in profiled)}")


if __name__ == "__main__":
    main()
