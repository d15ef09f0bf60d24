"""What the lifetime stamps and the mapping hooks cost each workload of RESULTS.md's overhead table,
from their cost per sample where they run, not from whole runs: those spread 3-7% from run to
run on this machine, more than the 1% asked of the two.

    python benchmarks/stampless_build.py benchmarks/out/stampless
    python benchmarks/stampless_build.py benchmarks/out/stampsonly --only stamps
    python benchmarks/stamp_cost.py --compare benchmarks/out/stampless/bin/heapscope \\
        --compare benchmarks/out/stampsonly/bin/heapscope [--rounds 9] [--quick]

1. **Per sample.** benchmarks/stamp_cost.c under `record -i 1` (every malloc a sample, every
   free sent): the fastest batch's ns per malloc+free pair, for this tree (--heapscope) and each
   --compare, in alternated rounds, and for the program alone. The difference of the medians is
   what the stamps (and the hooks) add to a sample and its free, the clock's reading overlapped
   with the work around it, which a loop of readings alone (clock_cost.c) cannot show.
2. **Per workload.** Each workload of run.py's overhead table and proctree.py's build, run
   once alone (its CPU: user + sys of the tree, wait4) and once under `record` (its samples on
   every heap, of which the `mmap` and `brk` heaps', and `total_unwinding_time_us`, from the
   stats). The two cost it at most
       (pair difference x samples + mapping samples x a sample's whole cost) / CPU alone
   where a sample's whole cost is its unwind time (the run's mean) plus this tree's pair cost
   over the program alone's: every sample the mapping hooks take is new, so all of it counts.
   A mapping call the hooks do not sample costs two loads (client/maphooks.c): left out.

The bound uses the first --compare (the tree without both). Nothing is asserted: the figures
go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from proctree import brotli_sources
from read_speed import MAKEFILE
from run import OUT, Heapscope, Python, Unprofiled, Workload, run_once, workloads

HERE = Path(__file__).resolve().parent
SAMPLES = ("heap_samples", "python_heap_samples", "custom_heap_samples")  # stats: every heap's samples
MAPPING_SAMPLES = ("mmap_heap_samples", "brk_heap_samples")


def pair_ns(cmd: list[str] | None, exe: Path, batches: int, work: Path) -> float:
    """The fastest batch's ns per pair of stamp_cost, under `cmd record -i 1` (None: alone)."""
    argv = [str(exe), str(batches), "500"]
    if cmd is not None:
        argv = [*cmd, "record", "-q", "-i", "1", "-o", str(work / "pairs.db"), "--force", "--", *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def per_pair(cmds: list[list[str]], exe: Path, rounds: int, batches: int, work: Path) -> list[float]:
    """Median ns per pair, alone first, then each of cmds; rounds alternated, order rotated."""
    variants: list[list[str] | None] = [None, *cmds]
    got: list[list[float]] = [[] for _ in variants]
    for r in range(rounds):
        order = list(range(len(variants)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            got[i].append(pair_ns(variants[i], exe, batches, work))
        print(f"round {r + 1}: " + " ".join(f"{g[-1]:.2f}" for g in got), file=sys.stderr)
    return [statistics.median(g) for g in got]


def workload_bound(w: Workload, cmd: list[str], work: Path, added: float, sample_ns: float,
                   build: Path | None = None) -> str:
    """One markdown row: the workload's samples, mapping samples, CPU alone and the bound. `build`:
    a build directory removed before each run (the build's)."""
    if build is not None:
        shutil.rmtree(build, ignore_errors=True)
    alone = run_once(w, Unprofiled(), work / "alone", work, False)
    if build is not None:
        shutil.rmtree(build, ignore_errors=True)
    profile = work / "bound.db"
    rec = run_once(w, Heapscope(cmd), profile, work, False)
    maps = sum(rec.stats.get(name, 0) for name in MAPPING_SAMPLES)
    samples = maps + sum(rec.stats.get(name, 0) for name in SAMPLES)
    unwind_ns = rec.stats.get("total_unwinding_time_us", 0) * 1e3 / max(samples, 1)
    cost_ns = added * samples + maps * (unwind_ns + sample_ns)
    share = cost_ns / (alone.cpu * 1e9) if alone.cpu > 0 else float("nan")
    verdict = "met" if share <= 0.01 else "**not met**"
    return (f"| {w.name} | {alone.cpu:.2f} s | {samples:,} | {maps:,} | {unwind_ns:,.0f} ns | "
            f"{share * 100:.3f}% | {verdict} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heapscope", default=str(Path(sys.executable).parent / "heapscope"),
                    help="this tree's command (default: the heapscope beside this Python)")
    ap.add_argument("--compare", action="append", required=True,
                    help="a build without them (stampless_build.py); repeatable, the first is the bound's")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="1 round, short inputs: a smoke test only")
    ap.add_argument("--no-build", action="store_true", help="leave out proctree.py's build of brotli")
    args = ap.parse_args()
    cmds = [shlex.split(args.heapscope), *(shlex.split(c) for c in args.compare)]
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stamp-cost-", dir=OUT) as tmp:
        work = Path(tmp)
        exe = work / "stamp_cost"
        subprocess.run(["cc", "-O2", "-g", "-Wall", "-o", str(exe), str(HERE / "stamp_cost.c")], check=True)
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(work / "measure"), str(HERE / "measure.c")], check=True)
        rounds, batches = (1, 100) if args.quick else (args.rounds, 1500)
        medians = per_pair(cmds, exe, rounds, batches, work)
        alone, ours, others = medians[0], medians[1], medians[2:]
        print(f"ns per malloc+free pair, every malloc sampled ({rounds} rounds, median of fastest batches):")
        print(f"  alone {alone:.2f}; {args.heapscope} {ours:.2f}")
        for c, m in zip(args.compare, others, strict=True):
            print(f"  {c} {m:.2f}: this tree adds {ours - m:+.2f} ns a pair")
        added = max(0.0, ours - others[0])
        print()
        print("| workload | CPU alone | samples | of them mmap/brk | unwind a sample | stamps + hooks, at most |"
              " <= 1% |")
        print("|---|---|---|---|---|---|---|")
        py = Python(sys.executable, memray=False, markdown=False)
        for w in workloads(args.quick, work, py):
            if "overhead" in w.tables:
                print(workload_bound(w, cmds[0], work, added, ours - alone), flush=True)
        if not args.no_build:
            src = brotli_sources(None)  # proctree.py's build: brotli's sdist, fetched once
            (src / "Makefile.heapscope").write_text(MAKEFILE)
            make = Workload("make -j2 of brotli (proctree.py's build)",
                            ["make", "-s", "-C", str(src), "-f", "Makefile.heapscope", "-j2"], ("overhead",), "real")
            print(workload_bound(make, cmds[0], work, added, ours - alone, build=src / "build"), flush=True)
            shutil.rmtree(src / "build", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
