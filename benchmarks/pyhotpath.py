"""Where a Python program's added instructions go under heapscope, per sample and per call.

    python benchmarks/pyhotpath.py [--heapscope CMD] [--python EXE] [--workloads objects,markdown,json,dicts,pytest]

Each workload runs three times inside `valgrind --tool=callgrind` (as benchmarks/hotpath.py does):
unprofiled, under `heapscope record` with nothing sampled (interval 2^40), and at the default
interval (4096, seed 1); `pytest` (not in the default list: --python must have pytest) is a generated
suite of 60 tests (benchmarks/pytest_overhead.py) run by `python -m pytest` as the target.
From the exclusive instruction counts (Ir) of every function:

  unsampled          the domain wrappers (w_malloc, w_free, ...) and the malloc hooks, per call,
                     on the run where nothing is sampled
  start-up + hooks   nothing-sampled run minus the unprofiled run (whole program)
  sampling           default-interval run minus the nothing-sampled run, per sample
                     (samples = heap_samples + python_heap_samples), split by function:
                     libunwind (all of it), then each function of the client, then the rest
                     (libpython, libc, the loader: what the program itself did differently),
                     and the client's functions alone (the figure to compare between builds)

Nothing is asserted; instruction counts do not depend on the load of the shared machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from hotpath import HUGE_INTERVAL, Profile, callgrind  # benchmarks/hotpath.py
from pytest_overhead import write_suite  # benchmarks/pytest_overhead.py

HERE = Path(__file__).resolve().parent
WORKLOADS = {
    "objects": ["pyobjects.py", "14", "8"],
    "markdown": ["pylib.py", "60"],
    "json": ["pywork.py", "40000"],
    "dicts": ["pydicts.py", "30000"],
}
# w_*: the wrappers of any allocator; s_*: those of the stock pymalloc (pymem.c), where built
WRAPPERS = ("w_malloc", "w_free", "w_realloc", "w_calloc", "w_malloc_guarded", "w_calloc_guarded",
            "s_malloc", "s_free", "s_realloc", "s_calloc", "s_malloc_guarded", "s_calloc_guarded",
            "s_realloc_guarded")
HOOKS = ("malloc", "free", "realloc", "calloc")


def by_function(p: Profile) -> dict[tuple[str, str], int]:
    """Exclusive Ir per (object basename, function), with gcc's .isra/.part suffixes folded."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for (obj, fn), cost in p.exclusive.items():
        out[(Path(obj).name.split(".so")[0], fn.split(".")[0])] += cost
    return out


def calls(p: Profile, fn: str) -> int:
    return sum(c for (obj, name), c in p.calls.items() if name.split(".")[0] == fn and "heapscope" in obj)


def report(name: str, plain: Profile, quiet: Profile, full: Profile, stats: dict[str, int]) -> list[str]:
    samples = max(stats.get("heap_samples", 0) + stats.get("python_heap_samples", 0), 1)
    q, f = by_function(quiet), by_function(full)
    lines = [f"## {name}", "",
             f"unprofiled {plain.total:,} Ir; nothing sampled {quiet.total:,} ({quiet.total / plain.total:.3f}x); "
             f"interval 4096 {full.total:,} ({full.total / plain.total:.3f}x); {samples:,} samples, "
             f"{stats.get('stacks', 0):,} stacks, {stats.get('python_walks', 0):,} Python walks", "",
             "| unsampled call (nothing-sampled run) | calls | Ir per call |", "|---|---|---|"]
    for fn in (*WRAPPERS, *HOOKS):
        n = calls(quiet, fn)
        cost = sum(v for (obj, g), v in q.items() if g == fn and obj.startswith("libheapscope"))
        if n:
            lines.append(f"| {fn} | {n:,} | {cost / n:.1f} |")
    wrappers = sum(v for (obj, g), v in q.items() if obj.startswith("libheapscope") and g in (*WRAPPERS, *HOOKS))
    lines += ["", f"nothing-sampled run minus unprofiled: {quiet.total - plain.total:,} Ir, of which wrappers and "
              f"hooks {wrappers:,}, the rest (start-up: finding libpython, installing the domains, libunwind, "
              f"the loader) {quiet.total - plain.total - wrappers:,}", "",
              "| sampling: 4096 run minus nothing-sampled run, by function | Ir | per sample |", "|---|---|---|"]
    delta: dict[str, int] = defaultdict(int)
    for key in set(q) | set(f):
        obj, fn = key
        d = f.get(key, 0) - q.get(key, 0)
        if obj.startswith("libunwind"):
            delta["libunwind (native unwind)"] += d
        elif obj.startswith("libheapscope"):
            delta[fn] += d
        else:
            delta["rest: " + obj] += d
    total = full.total - quiet.total
    for label, d in sorted(delta.items(), key=lambda kv: -abs(kv[1])):
        if abs(d) >= total / 500:
            lines.append(f"| {label} | {d:,} | {d / samples:.0f} |")
    # The client's own functions alone: "all" also holds what the program did differently between the
    # two runs (its dicts and sets see other addresses), a few percent either way.
    client = sum(d for label, d in delta.items() if not label.startswith(("rest: ", "libunwind")))
    lines += [f"| client (every libheapscope function) | {client:,} | {client / samples:.0f} |",
              f"| all | {total:,} | {total / samples:.0f} |", ""]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heapscope", default=shutil.which("heapscope") or "heapscope")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("pyhotpath: valgrind is not installed", file=sys.stderr)
        return 1
    hs = [args.heapscope]
    os.environ["PYTHONHASHSEED"] = "0"  # the same dict layouts in every run (str hashes are salted per run)
    out_lines = [f"heapscope: {args.heapscope}; python: {args.python}; valgrind callgrind, Ir", ""]
    with tempfile.TemporaryDirectory(prefix="pyhotpath.") as tmp:
        out = Path(tmp)
        for name in args.workloads.split(","):
            if name == "pytest":  # a generated suite (benchmarks/pytest_overhead.py) run as the target
                write_suite(out, 60)
                script = ["-m", "pytest", "-q", "-p", "no:cacheprovider", str(out / "test_suite.py")]
                argv = [args.python, *script]
            else:
                script = WORKLOADS[name]
                argv = [args.python, str(HERE / script[0]), *script[1:]]
            plain, _ = callgrind(out, f"{name}.plain", argv, None, [])
            quiet, _ = callgrind(out, f"{name}.quiet", argv, hs, ["-i", str(HUGE_INTERVAL)])
            full, stats = callgrind(out, f"{name}.4096", argv, hs, ["-i", "4096", "--seed", "1"])
            out_lines += report(f"{name}: {' '.join(script)}", plain, quiet, full, stats)
            print("\n".join(out_lines), flush=True)
            out_lines = []
    return 0


if __name__ == "__main__":
    sys.exit(main())
