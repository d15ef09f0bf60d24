"""What allocation labels (docs/labels.md) cost a small server.

A request loop at -O2, the smallest a server does: each request reads its 256 bytes from a
pipe and writes a 256-byte answer back (the two system calls of a request on a socket),
allocates and frees 16 blocks of 32 B to 4 KiB, touches them, hashes a little and keeps one
block of 64 B in a ring of 4096, so that there is live memory to attribute. Two builds:

- `plain`: no label calls;
- `labels`: heapscope_label_push("tenant", one of 8) and push("route", one of 4) around every
  request, and the two pops;
- `labels only`: the same pushes and pops with no request between them: what the labels
  cost a request on their own, a figure that the machine's load moves less than the
  difference of two whole runs (the minimum over rounds of a short loop).

Each runs without `heapscope record` (the header finds no client: one branch per call) and
under `heapscope record` at the default interval. The program times its own loop
(CLOCK_MONOTONIC, best of several rounds), so start-up and the profiler's own work are left
out; the figure is the labels build's time per request over the plain build's, both
profiled (and both not).

    python benchmarks/labels_overhead.py [--requests 200000] [--rounds 7] [--repeat 3]
    python benchmarks/labels_overhead.py --callgrind [--requests 20000]

--callgrind counts instructions instead (each build profiled, the target inside
`valgrind --tool=callgrind`, one round): the whole process's instructions, and the label
functions' own, per request. Callgrind counts the program's instructions only, not the
kernel's: the system calls' own work is missing from those figures. Counts do not move with
the machine's load, which on a shared 2-core machine moves the times above by several
percent from run to run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: A request's own work, the same in labels_server.py's C server: 16 blocks of 32 B to 4 KiB
#: allocated, touched and freed, and one of 64 B kept in a ring of 4096 (live memory to attribute).
REQUEST_WORK = r"""
static void *kept[4096];
static volatile unsigned long sink;

static unsigned long request_work(long i) {
  void *blocks[16];
  unsigned long h = (unsigned long)i;
  for (int k = 0; k < 16; k++) {
    size_t size = 32u << ((i + k) % 8);
    blocks[k] = malloc(size);
    memset(blocks[k], (int)k, size);
    for (size_t j = 0; j < size; j += 64)
      h = h * 31 + ((unsigned char *)blocks[k])[j];
  }
  for (int k = 0; k < 16; k++)
    free(blocks[k]);
  free(kept[i & 4095]);
  kept[i & 4095] = malloc(64);
  return h;
}
"""

PROGRAM = r"""
#include <heapscope.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *TENANTS[8] = {"acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"};
static const char *ROUTES[4] = {"/search", "/cart", "/login", "/static"};
static int io[2];
static char request[256];
""" + REQUEST_WORK + r"""

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void handle(long i) {
  if (write(io[1], request, sizeof request) != sizeof request || read(io[0], request, sizeof request) != sizeof request)
    abort();
  sink = request_work(i);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  double best = 1e9;
  if (pipe(io) != 0)
    return 1;
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    for (long i = 0; i < n; i++) {
#ifdef WITH_LABELS
      heapscope_label_push("tenant", TENANTS[i % 8]);
      heapscope_label_push("route", ROUTES[(i / 8) % 4]);
#endif
#ifndef LABELS_ONLY
      handle(i);
#endif
#ifdef WITH_LABELS
      heapscope_label_pop();
      heapscope_label_pop();
#endif
    }
    double t = now() - t0;
    if (t < best) best = t;
  }
  printf("%.1f ns per request\n", best * 1e9 / n);
  return 0;
}
"""


def include_dir() -> str:
    return subprocess.run([sys.executable, "-m", "heapscope", "--include"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def build(d: Path, labels: bool, only: bool = False) -> Path:
    src = d / "server.c"
    src.write_text(PROGRAM)
    out = d / ("labels_only" if only else "labels" if labels else "plain")
    cmd = [os.environ.get("CC", "cc"), "-O2", "-I", include_dir(), "-o", str(out), str(src)]
    if labels:
        cmd.insert(1, "-DWITH_LABELS")
    if only:
        cmd.insert(1, "-DLABELS_ONLY")
    subprocess.run(cmd, check=True, timeout=120)
    return out


def ns_per_request(cmd: list[str]) -> float:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800).stdout
    return float(next(x for x in out.splitlines() if "ns per request" in x).split()[0])


def instructions(d: Path, name: str, exe: Path, requests: int) -> tuple[int, int]:
    """(the target's instructions in all, those of the client's label functions) of one
    profiled run under callgrind."""
    sys.path.insert(0, str(Path(__file__).parent))
    import callgrind as cg  # benchmarks/callgrind.py

    out = d / f"{name}.callgrind"
    subprocess.run([sys.executable, "-m", "heapscope", "record", "-q", "--no-symbolize", "-o", str(d / f"{name}.db"),
                    "--", "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(exe), str(requests),
                    "1"], check=True, timeout=3600, capture_output=True)
    prof = cg.parse(out)
    mine = sum(v[0] for (obj, fn), v in prof.exclusive.items()
               if "libheapscope" in obj and ("label" in fn or fn in ("intern", "with_pair", "send_set", "put")))
    return prof.totals[0], mine


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, alternated; the median is shown")
    ap.add_argument("--callgrind", action="store_true", help="count instructions instead of timing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        binaries = {"plain": build(d, False), "labels": build(d, True)}
        only = build(d, True, only=True)
        if args.callgrind:
            (plain, _), (labels, mine) = (instructions(d, n, exe, args.requests) for n, exe in binaries.items())
            n = args.requests
            print(f"profiled, instructions: plain {plain / n:,.0f} per request, labels {labels / n:,.0f}"
                  f" ({100 * (labels - plain) / plain:+.2f}%); the client's label functions {mine / n:,.0f}"
                  " per request")
            return 0
        for profiled in (False, True):
            got: dict[str, list[float]] = {name: [] for name in binaries}
            for k in range(args.repeat):
                for name, exe in binaries.items():
                    run = [str(exe), str(args.requests), str(args.rounds)]
                    if profiled:
                        run = [sys.executable, "-m", "heapscope", "record", "-q", "-o", str(d / f"{name}{k}.db"),
                               "--", *run]
                    got[name].append(ns_per_request(run))
            plain, labels = statistics.median(got["plain"]), statistics.median(got["labels"])
            where = "profiled (default interval)" if profiled else "not profiled"
            alone = 1e18
            for k in range(args.repeat):
                run = [str(only), str(args.requests * 10), str(args.rounds)]
                if profiled:
                    run = [sys.executable, "-m", "heapscope", "record", "-q", "-o", str(d / f"only{k}.db"), "--", *run]
                alone = min(alone, ns_per_request(run))
            print(f"{where:<28} plain {plain:8.1f} ns/request, labels {labels:8.1f} ns/request:"
                  f" {100 * (labels - plain) / plain:+.2f}%  (runs: {got})")
            print(f"{'':<28} the label calls alone: {alone:.1f} ns a request, {100 * alone / min(got['plain']):.2f}%"
                  " of the plain build's fastest request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
