"""Where a build's time goes under `heapscope record`: the compilers, heapscope, and the end.

    python benchmarks/build_split.py --src BROTLI_DIR [--rounds 6] [--heapscope CMD] [--parts]

Runs `make -j2` of brotli's C sources (benchmarks/read_speed.py's Makefile, ~113 processes),
plain and under `record`, interleaved round by round (order alternated), and prints the
medians of:

    tree CPU      user + system of make and every compiler below it (`/usr/bin/time` around
                  make, inside `record`): what the client costs in the targets
    heapscope     the whole command's CPU less the tree's: the producer, its symbolizer
                  and the summary
    end           from make's exit (a timestamp its shell writes) to `record`'s exit: the
                  final dumps, symbolization and summary nobody overlaps with

`--parts` adds one recorded build run in-process by the heapscope's own Python (the
`--heapscope` command's interpreter), whose producer is timed by part: SQLite's inserts and
commits, the stacks' resolve (frames named in Python included), the lifetime and memory rows
made (the tracker's sums and their lists); process CPU of the whole recording. On a 2-core machine a build keeps both
cores busy, so each CPU second heapscope adds costs about half a second of wall.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from proctree import _heapscope_default  # noqa: E402
from read_speed import MAKEFILE  # noqa: E402
from self_cpu import interpreter_of  # noqa: E402

# Run by the heapscope's own interpreter: its producer's parts timed (process CPU) around one
# recording; the parts nest in no other part.
PARTS = r"""
import functools, sys, time
import heapscope.bookkeeping.dump as dump, heapscope.store.writer as writer
acc = {}
def timed(key, f):
    @functools.wraps(f)
    def w(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[key] = acc.get(key, 0.0) + time.process_time() - t
    return w
dump.ProcessHeap.lifetime_values = staticmethod(timed("lifetime rows made", dump.ProcessHeap.lifetime_values))
dump.ProcessHeap.memory_values = timed("memory rows made", dump.ProcessHeap.memory_values)
dump.ProcessHeap._resolve = timed("stacks resolved (frames named)", dump.ProcessHeap._resolve)
writer.ProfileWriter._insert_flat = timed("SQLite inserts", writer.ProfileWriter._insert_flat)
writer.ProfileWriter.commit = timed("SQLite commits", writer.ProfileWriter.commit)
from heapscope.cli import main
sys.argv = ["heapscope", "record", "-q", "-o", sys.argv[1], "--force", "--", *sys.argv[2:]]
t0 = time.process_time()
try:
    main()
except SystemExit:
    pass
print(f"heapscope's process CPU {time.process_time() - t0:.2f} s", file=sys.stderr)
for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"  {k:32} {v:.2f} s", file=sys.stderr)
"""


def one(src: Path, hs: str | None, out: Path) -> tuple[float, float, float, float]:
    """(wall, the tree's CPU, the command's CPU, end) of one build, under `record` when hs."""
    shutil.rmtree(src / "build", ignore_errors=True)
    end = out / "end"
    end.unlink(missing_ok=True)
    tree = ["/usr/bin/time", "-f", "TREE %U %S", "sh", "-c",
            f"make -s -f Makefile.heapscope -j2; date +%s.%N > {end}"]
    cmd = tree if hs is None else [hs, "record", "-q", "-o", str(out / "build.db"), "--force", "--", *tree]
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing blocks on it
        t0 = time.time()
        proc = subprocess.Popen(cmd, cwd=src, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        t1 = time.time()
        err.seek(0)
        text = err.read().decode(errors="replace")
    if status != 0:
        raise SystemExit(f"build failed ({status}):\n{text}")
    fields = next(line.split() for line in text.splitlines() if line.startswith("TREE "))
    tree_cpu = float(fields[1]) + float(fields[2])
    return t1 - t0, tree_cpu, usage.ru_utime + usage.ru_stime, t1 - float(end.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True, help="an unpacked brotli sdist")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--heapscope", default=_heapscope_default())
    ap.add_argument("--parts", action="store_true", help="and one build with the producer timed by part")
    args = ap.parse_args()
    src = args.src.resolve()
    (src / "Makefile.heapscope").write_text(MAKEFILE)
    runs: dict[str, list[tuple[float, float, float, float]]] = {"plain": [], "record": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        one(src, None, out)  # warms the page cache and the symbol cache
        one(src, args.heapscope, out)
        for r in range(args.rounds):
            for name in (("plain", "record") if r % 2 == 0 else ("record", "plain")):
                runs[name].append(one(src, args.heapscope if name == "record" else None, out))
            print(f"round {r} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr)

        def med(name: str, k: int) -> float:
            return statistics.median(x[k] for x in runs[name])

        plain_tree = med("plain", 1)
        own = statistics.median(x[2] - x[1] for x in runs["record"])
        print(f"{args.rounds} rounds, medians; {args.heapscope}")
        print(f"wall: plain {med('plain', 0):.2f} s, recorded {med('record', 0):.2f} s"
              f" ({med('record', 0) / med('plain', 0):.3f}x)")
        print(f"tree CPU: plain {plain_tree:.2f} s, recorded {med('record', 1):.2f} s"
              f" ({med('record', 1) / plain_tree:.3f}x)")
        print(f"heapscope's own CPU: {own:.2f} s ({own / plain_tree * 100:.1f}% of the plain tree's)")
        print(f"end (make's exit to record's): {med('record', 3):.2f} s")
        if args.parts:
            shutil.rmtree(src / "build", ignore_errors=True)
            how = interpreter_of(shutil.which(args.heapscope) or args.heapscope)
            if how is None:
                raise SystemExit(f"{args.heapscope}: not a heapscope console script or launcher")
            subprocess.run([*how[0], "-c", PARTS, str(out / "parts.db"),
                            "make", "-s", "-f", "Makefile.heapscope", "-j2"], cwd=src, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
