"""What the custom heap calls (include/heapscope.h) cost a program.

A bump arena hands out and takes back N objects, at -O2, in three builds:

- `plain`: no heapscope calls at all;
- `calls, not profiled`: heapscope_heap_alloc/free after each arena operation,
  run without `heapscope record` (register found no client and returned 0:
  every call is one branch on the heap id);
- `calls, profiled`: the same binary under `heapscope record -i 4096`.

The program times its own loop (CLOCK_MONOTONIC, best of several rounds), so
start-up and the profiler's own work are left out. With `perf stat`
instruction counts where the machine has them (--perf), else timing only.

    python benchmarks/heaps_noop.py [--n 20000000] [--rounds 7] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = r"""
#include <heapscope.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned char block[1 << 20];
static uint32_t heap;
static void *volatile sink;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
#ifdef WITH_CALLS
  heap = heapscope_heap_register("bench.arena");
#endif
  double best = 1e9;
  for (int r = 0; r < rounds; r++) {
    size_t used = 0;
    double t0 = now();
    for (long i = 0; i < n; i++) {
      size_t size = 16 + (i & 63);
      if (used + size > sizeof block) used = 0;
      void *p = block + used;
      used += size;
#ifdef WITH_CALLS
      heapscope_heap_alloc(heap, p, size);
      heapscope_heap_free(heap, p);
#endif
      sink = p;
    }
    double t = now() - t0;
    if (t < best) best = t;
  }
  printf("%.3f ns per alloc+free (heap id %u)\n", best * 1e9 / n, heap);
  return 0;
}
"""


def include_dir() -> str:
    return subprocess.run([sys.executable, "-m", "heapscope", "--include"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def build(d: Path, with_calls: bool) -> Path:
    src = d / "noop.c"
    src.write_text(PROGRAM)
    out = d / ("calls" if with_calls else "plain")
    cmd = [os.environ.get("CC", "cc"), "-O2", "-I", include_dir(), "-o", str(out), str(src)]
    if with_calls:
        cmd.insert(1, "-DWITH_CALLS")
    subprocess.run(cmd, check=True, timeout=120)
    return out


def perf_instructions(cmd: list[str]) -> str:
    if shutil.which("perf") is None:
        return "no perf"
    r = subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", *cmd], capture_output=True, text=True,
                       timeout=600)
    for line in r.stderr.splitlines():
        if "instructions" in line:
            value = line.split(",")[0]
            return "not supported here" if value.startswith("<") else f"{int(value):,} instructions"
    return "no count"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-record", action="store_true", help="skip the profiled run")
    ap.add_argument("--perf", action="store_true", help="also count instructions with perf stat")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        plain, calls = build(d, False), build(d, True)
        runs = [("plain", [str(plain)]), ("calls, not profiled", [str(calls)])]
        if not args.no_record:
            runs.append(("calls, profiled -i 4096", [sys.executable, "-m", "heapscope", "record", "-q",
                                                     "-o", str(d / "p.db"), "-i", "4096", "--", str(calls)]))
        for name, cmd in runs:
            out = subprocess.run([*cmd, str(args.n), str(args.rounds)], capture_output=True, text=True,
                                 check=True, timeout=900).stdout.strip().splitlines()
            line = next((x for x in out if "ns per" in x), "?")
            extra = ""
            if args.perf and "profiled -i" not in name:
                extra = "; " + perf_instructions([*cmd, str(args.n), "1"])
            print(f"{name:<26} {line}{extra}")
    # The Python API not profiled: pool.alloc + pool.free on a disabled heap.
    py = ("import timeit, heapscope.heaps as h; pool = h.register('bench.pool'); n = 1_000_000;"
          "t = min(timeit.repeat(lambda: (pool.alloc(4096, 64), pool.free(4096)), number=n, repeat=5));"
          "base = min(timeit.repeat(lambda: None, number=n, repeat=5));"
          "print(f'{(t - base) * 1e9 / n:.1f} ns per alloc+free over an empty lambda call (heap id {pool.id})')")
    out = subprocess.run([sys.executable, "-c", py], capture_output=True, text=True, check=True, timeout=300)
    print(f"{'python, not profiled':<26} {out.stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
