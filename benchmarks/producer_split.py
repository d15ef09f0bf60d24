"""Where heapscope's own CPU goes on one core: `record` against its no-profile floor, by code.

    python benchmarks/producer_split.py [--rounds 3] [--heapscope CMD] [--python PY] [--freq HZ] [WORKLOAD ...]

WORKLOAD: as end_split.py's (cc1plus, json, git, pandas with --python a venv that has it, build, ...)
(default: cc1plus json). Each round runs, under `taskset -c 0` (the producer and the target on
one CPU, as run.py's one-core section), `perf record -g -F HZ` of `heapscope record -o X --
TARGET` and of benchmarks/no_profile.py -- TARGET (the same recording keeping no profile: the
floor), in turns, and sorts each sample of heapscope (its process, every thread, and the
helpers it starts; not the target) by what is on its stack, first match:

    sqlite     SQLite (the library or Python's sqlite3 module), and the kernel below it
    resolver   the bookkeeping's C (bookkeeping/_native: stacks resolved, the callsite trie, rows)
    ingest     the rings' drain (producer/_ingest)
    symtab     symbol tables read in C (symbolize/_symtab)
    python     the interpreter, with none of the above below it
    system     the kernel, libc and the loader with none of the above found below them (a page
               fault, a syscall, the start's relocations; libc has no frame pointers to walk)
    helpers    the processes heapscope starts (llvm-symbolizer, dpkg-query)

Printed per workload, medians over the rounds: each category's samples under `record` and under
the floor, and the difference, which is what the profile costs, by code (at the default 1000 Hz
a sample is about a millisecond of CPU); then the target's own samples under each. Needs `perf`
(perf_event_paranoid low enough, or root) and frame pointers in the C parts (the default build).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from end_split import workloads  # noqa: E402
from self_cpu import no_profile_argv  # noqa: E402

CATEGORIES = ("sqlite", "resolver", "ingest", "symtab", "python", "system", "helpers")
HELPERS = ("llvm-symbolizer", "dpkg-query")
# (category, a substring of a frame's DSO that puts the sample there), in order: the first found wins.
MARKS = (("sqlite", "libsqlite3"), ("sqlite", "_sqlite3."), ("resolver", "_native."), ("ingest", "_ingest."),
         ("symtab", "_symtab."), ("python", "libpython"), ("python", "/python3"))


def classify(script: str) -> tuple[dict[str, int], int]:
    """`perf script` output (comm, pid, ip, dso; with call chains) -> (heapscope's samples per
    category, the target's samples). heapscope is the process perf started: the first sample's pid."""
    counts = dict.fromkeys(CATEGORIES, 0)
    target = 0
    first: str | None = None
    for block in script.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        head = lines[0].split()
        if len(head) < 2:
            continue
        comm, pid = head[0], head[1].split("/")[0]
        first = first or pid
        if comm in HELPERS:
            counts["helpers"] += 1
        elif pid != first:
            target += 1
        else:
            counts[_category(lines[1:])] += 1
    return counts, target


def _category(chain: list[str]) -> str:
    text = " ".join(chain)
    for category, mark in MARKS:
        if mark in text:
            return category
    return "system"


def _perf(argv: list[str], data: Path, freq: int, cwd: Path, faults: bool = False) -> tuple[dict[str, int], int]:
    # --faults: a sample at every page fault (each a first touch of memory), not at a frequency.
    every = ["-e", "page-faults", "-c", "1"] if faults else ["-F", str(freq)]
    subprocess.run(["taskset", "-c", "0", "perf", "record", "-q", "-g", *every, "-o", str(data), "--", *argv],
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                   check=True, timeout=600)
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,ip,dso"], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    data.unlink()
    return classify(out)


def _report(name: str, runs: dict[str, list[tuple[dict[str, int], int]]], freq: int, faults: bool = False) -> None:
    unit = "page faults" if faults else f"samples at {freq} Hz"
    print(f"\n{name}: {unit}, medians of {len(runs['record'])} rounds")
    print(f"  {'':10s} {'record':>8s} {'floor':>8s} {'profile':>8s}")
    rec = {c: statistics.median(r[0][c] for r in runs["record"]) for c in CATEGORIES}
    low = {c: statistics.median(r[0][c] for r in runs["floor"]) for c in CATEGORIES}
    for c in CATEGORIES:
        print(f"  {c:10s} {rec[c]:8.0f} {low[c]:8.0f} {rec[c] - low[c]:+8.0f}")
    tot_r = statistics.median(sum(r[0].values()) for r in runs["record"])
    tot_l = statistics.median(sum(r[0].values()) for r in runs["floor"])
    print(f"  {'all':10s} {tot_r:8.0f} {tot_l:8.0f} {tot_r - tot_l:+8.0f}")
    tr = statistics.median(r[1] for r in runs["record"])
    tl = statistics.median(r[1] for r in runs["floor"])
    print(f"  the target's own {'faults' if faults else 'samples'}: {tr:.0f} under record, {tl:.0f} under the floor")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--heapscope", default=shutil.which("heapscope") or "heapscope",
                    help="the heapscope command to measure (an installed one: see run.py)")
    bench = HERE / "out" / "venv" / "bin" / "python"
    ap.add_argument("--python", default=str(bench) if bench.exists() else sys.executable,
                    help="the Python workloads' interpreter (pandas: one that has it)")
    ap.add_argument("--freq", type=int, default=1000)
    ap.add_argument("--faults", action="store_true",
                    help="sort page faults (every one) by code instead of CPU samples: memory first touched")
    ap.add_argument("workloads", nargs="*", default=["cc1plus", "json"])
    args = ap.parse_args()
    if not shutil.which("perf") or not shutil.which("taskset"):
        print("producer_split.py: needs perf and taskset", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hs-producer-split-"))
    loads = workloads(args.workloads, work, os.path.abspath(args.python))
    hs = [args.heapscope]
    variants = {"record": [*hs, "record", "-o", str(work / "p.db"), "--force", "--"], "floor": no_profile_argv(hs)}
    runs: dict[str, dict[str, list[tuple[dict[str, int], int]]]] = {n: {v: [] for v in variants} for n in loads}
    for rnd in range(args.rounds):
        for name, target in loads.items():
            for variant, head in (variants.items() if rnd % 2 == 0 else reversed(variants.items())):
                runs[name][variant].append(_perf([*head, *target], work / "perf.data", args.freq, work, args.faults))
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    for name in loads:
        _report(name, runs[name], args.freq, args.faults)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
