"""Records per second of the C ingest loop (heapscope.producer._ingest and the tracker it feeds).

Fills a shared ring with prebuilt MALLOC and FREE records (correct headers
and positions, written straight into the mapping), then times Ingest.drain()
over it: the ring reader and the heap tracker it feeds. Two workloads:

  in-order    sequence numbers in ring order (one thread)
  shuffled    sequence numbers shuffled within windows of 8 (threads racing)

Each malloc'd address stays live for `--live` records before its free, over
`--stacks` distinct stacks; the mallocs come from 4 thread ids in turn.
With `--threads` the tracker also keeps totals per (stack, thread), as
`heapscope live` asks it to. Rates are per second of CPU (the thread's CPU
time: steady on a shared machine), with the wall figure beside. Usage:

    python benchmarks/ingest_throughput.py [--ring-mib 32] [--rounds 5] [--threads]

With `--producer` it also measures the whole producer (its headroom):
`heapscope record -i 128` of benchmarks/alloc_bench.c (1 thread, 3 M
allocations: ~2.6 M samples, each a MALLOC and later a FREE record), and
reads from the profile's stats what heapscope's own process used
(producer_cpu_ns, producer_peak_rss_bytes); the CPU of `record -- /bin/true`
(start-up and teardown) is subtracted, leaving the CPU spent per record.

Uses the installed heapscope if it has the extension, else compiles it from
src/ with cc into a temporary directory.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT / "src"))

from heapscope.wire import codec  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))  # wire_support: the client's side of the wire (tests' encoders)
import wire_support as ws  # noqa: E402


def load_ingest() -> ModuleType:
    """heapscope.producer._ingest as the tests load it (tests/native_ext.py): the installed
    one, else compiled from src/ with the package build's sources and flags."""
    import native_ext  # tests/: on the path above

    return native_ext.load_ingest(Path(tempfile.mkdtemp(prefix="hs-ingest-")))


def build_records(ring_size: int, live: int, stacks: int, window: int) -> tuple[bytes, int]:
    """Malloc/free pairs filling at most ring_size bytes; returns (bytes, record count)."""
    pair = codec.MALLOC.size + codec.FREE.size + 16
    pairs = ring_size // pair
    mh = codec.HEADER.pack(codec.header(8 + codec.MALLOC.size, codec.RecordType.MALLOC))
    fh = codec.HEADER.pack(codec.header(8 + codec.FREE.size, codec.RecordType.FREE))
    rng = random.Random(1)
    stack_ids = [rng.getrandbits(64) | 1 for _ in range(stacks)]
    ops: list[tuple[str, int]] = []  # (kind, addr) in program order
    base = 0x7F12_0000_0000
    for i in range(pairs):
        ops.append(("m", base + 16 * i))
        if i >= live:
            ops.append(("f", base + 16 * (i - live)))
    seqs = list(range(1, len(ops) + 1))
    if window > 1:
        for i in range(0, len(seqs), window):
            chunk = seqs[i:i + window]
            rng.shuffle(chunk)
            seqs[i:i + window] = chunk
    # Seq i belongs to op i; the ring holds them in the shuffled order.
    parts = []
    for seq in seqs:
        kind, addr = ops[seq - 1]
        if kind == "m":
            parts.append(mh + codec.MALLOC.pack(seq, addr, 4096, 64, stack_ids[seq % stacks], seq, 1000 + seq % 4, 0))
        else:
            parts.append(fh + codec.FREE.pack(seq, addr, seq))
    data = b"".join(parts)
    assert len(data) <= ring_size
    return data, len(seqs)


def run(ingest: ModuleType, ring_size: int, data: bytes, count: int, rounds: int,
        threads: bool) -> tuple[float, float]:
    """(best records per CPU second, best records per wall second) over `rounds` drains."""
    fd = os.memfd_create("hs-bench-ring")
    os.ftruncate(fd, codec.META_SIZE + ring_size)
    shm = mmap.mmap(fd, codec.META_SIZE + ring_size)
    w = ws.RingWriter.__new__(ws.RingWriter)
    w.shm, w.ring_size = shm, ring_size
    w.set("magic", codec.WIRE_MAGIC)
    w.set("version", codec.WIRE_VERSION)
    w.set("ring_size", ring_size)
    best = best_wall = 0.0
    try:
        for _ in range(rounds):
            w.set("read_pos", 0)
            w.set("write_pos", 0)
            shm[codec.META_SIZE:codec.META_SIZE + len(data)] = data
            w.set("write_pos", len(data))
            ing = ingest.Ingest(fd, ring_size, threads=threads) if threads else ingest.Ingest(fd, ring_size)
            t0, c0 = time.perf_counter(), time.thread_time()
            ing.drain(time.monotonic_ns())
            ing.tracker.flush()
            elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
            st = ing.stats()
            assert st["records"] == count and st["corrupt"] == 0 and st["malformed_records"] == 0, st
            assert st["committed_seq"] == count and st["pending"] == 0, st
            ing.close()
            best = max(best, count / max(cpu, 1e-9))
            best_wall = max(best_wall, count / elapsed)
    finally:
        shm.close()
        os.close(fd)
    return best, best_wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ring-mib", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--live", type=int, default=1000, help="allocations live at once")
    ap.add_argument("--stacks", type=int, default=500)
    ap.add_argument("--producer", metavar="HEAPSCOPE",
                    help="also measure the whole producer with this heapscope command")
    ap.add_argument("--threads", action="store_true",
                    help="keep totals per (stack, thread), as `heapscope live` does (records come from 4 threads)")
    args = ap.parse_args()
    ingest = load_ingest()
    ring_size = args.ring_mib << 20
    for name, window in (("in-order", 1), ("shuffled", 8)):
        data, count = build_records(ring_size, args.live, args.stacks, window)
        rate, wall_rate = run(ingest, ring_size, data, count, args.rounds, args.threads)
        print(f"{name:9s} {count:9d} records  best of {args.rounds}: {rate / 1e6:6.1f} M records per CPU s "
              f"({1e9 / rate:5.1f} ns/record; wall {wall_rate / 1e6:.1f} M/s)")
    if args.producer:
        producer(args.producer, args.rounds)
    return 0


def _stats(db: Path) -> dict[str, int]:
    import sqlite3

    with sqlite3.connect(db) as con:
        return {str(n): int(v) for n, v in con.execute("SELECT name, SUM(value) FROM stats GROUP BY name")}


def producer(heapscope: str, rounds: int) -> None:
    """The whole producer on the synthetic benchmark: its CPU per record and its peak RSS."""
    work = Path(tempfile.mkdtemp(prefix="hs-producer-"))
    exe = work / "alloc_bench"
    subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", str(exe), str(ROOT / "benchmarks" / "alloc_bench.c")],
                   check=True)
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    fixed: list[int] = []
    per_record: list[float] = []
    rss: list[int] = []
    records = samples = 0
    wall = 0.0
    for r in range(rounds):
        for kind, argv in (("fixed", ["/bin/true"]), ("synth", [str(exe), "1", "3000000"])):
            db = work / f"{kind}{r}.db"
            t0 = time.perf_counter()
            subprocess.run([heapscope, "record", "-q", "-i", "128", "-o", str(db), "--", *argv], env=env,
                           check=True, stdout=subprocess.DEVNULL)
            st = _stats(db)
            if kind == "fixed":
                fixed.append(st["producer_cpu_ns"])
                continue
            wall = time.perf_counter() - t0
            samples = st["heap_samples"]
            records = st["heap_samples"] + st["frees"] + st.get("stacks", 0)
            per_record.append((st["producer_cpu_ns"] - min(fixed)) / records)
            rss.append(st["producer_peak_rss_bytes"])
    ns = sorted(per_record)[len(per_record) // 2]
    print(f"producer  {records:9d} records ({samples:,} samples, last run {wall:.2f} s wall) median of {rounds}:"
          f" {ns:5.1f} ns of producer CPU per record = {1e3 / ns:5.1f} M records per CPU s"
          f" = {1e3 / ns / (records / samples):4.1f} M samples per CPU s; start-up and teardown"
          f" {sorted(fixed)[len(fixed) // 2] / 1e6:.0f} ms CPU; peak RSS {max(rss) / 2**20:.1f} MiB")


if __name__ == "__main__":
    sys.exit(main())
