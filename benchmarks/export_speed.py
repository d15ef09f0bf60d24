"""Time `heapscope export` in every format on a large synthetic profile.

The profile is written with the real ProfileWriter: one process, 2,000 functions
in 4 libraries, 50,000 leaf callsites (paths of depth 8-24 sharing prefixes),
10 dumps, each with an alloc row and a free row per callsite: 1,000,000
heap_profile_allocation rows (one per sampled-allocation delta), plus a
--stream-allocations table of 1,000,000 sampled mallocs/frees for the Chrome
JSON de-sampling path. Each format is exported by the CLI in a fresh process
(wall time, peak RSS of the child).

    python benchmarks/export_speed.py [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from heapscope.export import FORMATS
from heapscope.model import Frame, Mapping, ProcessFlags, ProcessInfo, Upid
from heapscope.store.writer import ProfileWriter

CALLSITES = 50_000
DUMPS = 10
STREAM = 1_000_000


def build(path: Path) -> None:
    rng = random.Random(7)
    w = ProfileWriter(path, force=True)
    w.set_metadata("interval", 4096)
    info = ProcessInfo(upid=Upid(1), pid=4242, ppid=1, name="big", cmdline="/usr/bin/big --run", exe="/usr/bin/big",
                       uid=0, start_ts=1_000_000_000)
    w.add_process(info)
    w.set_process_flags(info, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=4096,
                                           orig_sampling_interval_bytes=4096))
    libs = ["/usr/bin/big", "/usr/lib/libone.so", "/usr/lib/libtwo.so", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    w.add_mappings((i + 1, Mapping(f"{i:02x}" * 20, 0x1000, 0, 0x400000 * (i + 1), 0x400000 * (i + 1) + 0x200000,
                                   0, name)) for i, name in enumerate(libs))
    w.add_frames((i + 1, Frame(i % 4 + 1, 0x1000 + 16 * i, f"function_{i}")) for i in range(2000))
    # A callsite tree: grow random paths until there are CALLSITES nodes in it.
    children: dict[tuple[int | None, int], int] = {}
    rows: list[tuple[int, int, int | None, int]] = []
    leaves: list[int] = []
    while len(rows) < CALLSITES:
        parent: int | None = None
        depth = rng.randint(8, 24)
        for d in range(depth):
            frame = rng.randrange(2000) + 1 if d > 2 else d + 1
            k = (parent, frame)
            node = children.get(k)
            if node is None:
                node = children[k] = len(rows) + 1
                rows.append((node, d, parent, frame))
            parent = node
        assert parent is not None
        leaves.append(parent)
    w.add_callsites(rows)
    sites = sorted(set(leaves))
    sites = (sites + [r[0] for r in rows])[:CALLSITES]
    sites = sorted(set(sites))
    ts = 2_000_000_000
    for k in range(DUMPS):
        ts_end = ts + 1_000_000_000
        dump_rows = []
        for cs in sites:
            n = rng.randint(1, 20)
            freed = rng.randint(0, n)
            dump_rows.append((cs, n, n * 4096))
            dump_rows.append((cs, -freed, -freed * 4096))
        w.add_dump(1, ts, ts_end, "periodic" if k < DUMPS - 1 else "end", dump_rows, "libc.malloc")
        ts = ts_end
    per_dump = STREAM // DUMPS
    stream = []
    seq = 0
    for k in range(DUMPS):
        base_ts = 2_000_000_000 + k * 1_000_000_000
        for j in range(per_dump // 2):
            seq += 1
            addr = 0x10000000 + 16 * seq
            stream.append((1, seq, "malloc", base_ts + j, addr, rng.choice((16, 64, 256, 1024, 8192)), 4096,
                           rng.choice(sites)))
            if j % 2:
                seq += 1
                stream.append((1, seq, "free", base_ts + j, addr, None, None, None))
    w.add_stream(stream)
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="directory for the profile and exports (default: a temp dir)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="export-speed-"))
    out.mkdir(parents=True, exist_ok=True)
    db = out / "big.db"
    t = time.perf_counter()
    build(db)
    print(f"built {db} ({db.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s", flush=True)
    print(f"{'format':<12} {'wall s':>7} {'peak RSS MB':>12} {'output MB':>10}")
    worst = 0.0
    for name, fmt in FORMATS.items():
        target = out / f"big{fmt.suffix}"
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "heapscope", "export", str(db), "--format", name,
                                 "-o", str(target), "--force"], stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"export --format {name} failed with status {proc.returncode}")
        rss = usage.ru_maxrss / 1024
        worst = max(worst, wall)
        print(f"{name:<12} {wall:>7.2f} {rss:>12.0f} {target.stat().st_size / 1e6:>10.1f}", flush=True)
    return 0 if worst < 10 else 1


if __name__ == "__main__":
    sys.exit(main())
