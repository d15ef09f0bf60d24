"""Run one pyperformance benchmark's own code a fixed number of loops in this process:
the target that benchmarks/pyperf_table.py runs plain and under each profiler.

    python pyperf_one.py BENCHMARKS_DIR NAME LOOPS

BENCHMARKS_DIR is pyperformance's data-files/benchmarks folder (the harness finds it in its
venv); NAME is one of NAMES below. pyperformance's own runner (pyperf) is not used: it
spawns worker processes and picks the loop count from the time a loop takes, so a slower
tool would be given less work. Here the work is the same under every tool: one process,
LOOPS loops of the benchmark's function, as Scalene's paper ran them.

With BENCH_DECORATE_MAIN=1 in the environment and a `profile` in builtins (what
`python -m memory_profiler` puts there), the loop is decorated with it: memory_profiler's
documented way of profiling a function, line by line.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# NAME -> the benchmark's folder under BENCHMARKS_DIR (bm_GROUP/run_benchmark.py)
NAMES = {
    "async_tree_none": "async_tree",
    "async_tree_io": "async_tree",
    "async_tree_memoization": "async_tree",
    "async_tree_cpu_io_mixed": "async_tree",
    "docutils": "docutils",
    "fannkuch": "fannkuch",
    "mdp": "mdp",
    "pprint_pformat": "pprint",
    "raytrace": "raytrace",
    "sympy_expand": "sympy",
}


def load(folder: Path) -> ModuleType:
    """The benchmark's module, imported under its own name: its `__main__` block (pyperf's runner) does not run."""
    spec = importlib.util.spec_from_file_location(folder.name, folder / "run_benchmark.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"pyperf_one: no run_benchmark.py in {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[folder.name] = module
    spec.loader.exec_module(module)
    return module


def job(name: str, folder: Path, m: Any) -> Callable[[int], object]:
    """A function of the loop count that runs NAME's work that many times."""
    if name.startswith("async_tree_"):
        tree_class = m.BENCHMARKS[name.removeprefix("async_tree_")]

        def trees(loops: int) -> object:
            for _ in range(loops):
                asyncio.run(tree_class().run())
            return loops
        return trees
    if name == "docutils":
        return lambda loops: m.bench_docutils(loops, folder / "data" / "docs")
    if name == "fannkuch":
        return lambda loops: [m.fannkuch(m.DEFAULT_ARG) for _ in range(loops)][-1]
    if name == "mdp":
        return lambda loops: m.bench_mdp(loops)
    if name == "pprint_pformat":
        from pprint import PrettyPrinter

        # the benchmark builds this list inside its runner function: the same value here
        printable = [("string", (1, 2), [3, 4], {5: 6, 7: 8})] * 100_000
        return lambda loops: [len(PrettyPrinter().pformat(printable)) for _ in range(loops)][-1]
    if name == "raytrace":
        return lambda loops: m.bench_raytrace(loops, m.DEFAULT_WIDTH, m.DEFAULT_HEIGHT, None)
    if name == "sympy_expand":
        return lambda loops: m.bench_sympy(loops, m.bench_expand)
    raise SystemExit(f"pyperf_one: unknown benchmark {name!r}; known: {', '.join(NAMES)}")


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[2] not in NAMES or not sys.argv[3].isdigit():
        print(f"usage: pyperf_one.py BENCHMARKS_DIR NAME LOOPS (NAME: {', '.join(NAMES)})", file=sys.stderr)
        return 2
    root, name, loops = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    folder = root / f"bm_{NAMES[name]}"
    run = job(name, folder, load(folder))
    if os.environ.get("BENCH_DECORATE_MAIN") == "1" and hasattr(builtins, "profile"):
        run = builtins.profile(run)
    t0 = time.perf_counter()
    run(loops)
    print(f"{name}: {loops} loops, {time.perf_counter() - t0:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
