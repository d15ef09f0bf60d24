"""A full ring on one CPU: what the target waits, with this heapscope and another.

    python benchmarks/ring_wait.py [--rounds 7] [--shmem-size 256k] [--cpu 0]
                                   [--heapscope CMD] [--compare CMD [--compare-name NAME]]
                                   [--no-block-client]

Runs `taskset -c CPU heapscope record --shmem-size SIZE -- alloc_bench 1 OPS 25` (the
synthetic benchmark at ~1.1 M samples/s) and the unprofiled alloc_bench under the same
taskset, interleaved round by round, and prints per command the median wall and CPU
(user + system of the whole tree), the time the target waited for ring space
(`client_blocked_us`, the client's own count) and the records dropped (with
--no-block-client). A ring this small fills again and again: the wait is what the client
does then (ring.c: wake the producer, then sleep; on one CPU without spinning first),
measured as the program sees it. With the default ring (8 MiB) nothing waits: see run.py
--taskset for that.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def stats(db: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {n: int(v) for n, v in con.execute("SELECT name, SUM(value) FROM stats GROUP BY name") if v is not None}
    finally:
        con.close()


def run(argv: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{shlex.join(argv)}: exit status {os.waitstatus_to_exitcode(status)}\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ops", type=int, default=6_000_000)
    ap.add_argument("--shmem-size", default="256k")
    ap.add_argument("--cpu", default="0")
    ap.add_argument("--heapscope", default=str(Path(sys.executable).with_name("heapscope")))
    ap.add_argument("--compare", action="append", default=[], metavar="CMD")
    ap.add_argument("--compare-name", action="append", default=[], metavar="NAME")
    ap.add_argument("--no-block-client", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hs-ring-wait-"))
    exe = work / "alloc_bench"
    subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", str(exe), str(HERE / "alloc_bench.c")], check=True)
    target = [str(exe), "1", str(args.ops), "25"]
    pin = ["taskset", "-c", args.cpu]
    block = ["--no-block-client"] if args.no_block_client else []
    tools = {"heapscope": args.heapscope}
    for i, other in enumerate(args.compare):
        tools[args.compare_name[i] if i < len(args.compare_name) else f"other{i + 1}"] = other
    rows: dict[str, list[tuple[float, float, int, int]]] = {"unprofiled": [], **{k: [] for k in tools}}
    load = os.getloadavg()[0]
    try:
        for rnd in range(args.rounds + 1):  # round 0: warm-up, not kept
            order = list(rows)
            order = order[rnd % len(order):] + order[:rnd % len(order)]
            for name in order:
                db = work / f"{rnd}.db"
                if name == "unprofiled":
                    wall, cpu = run([*pin, *target])
                    got = (wall, cpu, 0, 0)
                else:
                    wall, cpu = run([*pin, *shlex.split(tools[name]), "record", "-q", "-o", str(db), "--shmem-size",
                                     args.shmem_size, *block, "--", *target])
                    st = stats(db)
                    got = (wall, cpu, st.get("client_blocked_us", 0), st.get("dropped_records", 0))
                    db.unlink()
                if rnd:
                    rows[name].append(got)
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    print(f"{args.rounds} interleaved rounds, medians; `taskset -c {args.cpu}`, ring {args.shmem_size}"
          f"{', --no-block-client' if block else ''}; alloc_bench 1 {args.ops} 25; load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after" + "".join(f"; {k} = {v}" for k, v in tools.items()))
    base = statistics.median(r[0] for r in rows["unprofiled"])
    print("| command | wall s | wall x | CPU s | target blocked ms | records dropped |")
    print("|---|---|---|---|---|---|")
    for name, got in rows.items():
        wall = statistics.median(r[0] for r in got)
        print(f"| {name} | {wall:.2f} | {wall / base:.2f}x | {statistics.median(r[1] for r in got):.2f} | "
              f"{statistics.median(r[2] for r in got) / 1000:.1f} | {statistics.median(r[3] for r in got):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
