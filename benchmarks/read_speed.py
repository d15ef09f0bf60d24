"""Time the commands that read a profile (report, leaks, flamegraph, diff, export) on
real and synthetic profiles, as whole CLI commands in fresh processes.

The real workload: a C build of ~110 processes (brotli's C sources, 37 files, compiled
by `make -j2` with gcc -O2: gcc drivers, cc1, as, collect2, ld), recorded with
`heapscope record`. The larger profiles, for the linear-growth check, are written
with the real ProfileWriter: N processes shaped like the build's compilers (a
callsite tree shared by all, a few thousand leaf callsites each, rows in every
periodic dump, peak rows), sized by the number of processes and dumps.

    python benchmarks/read_speed.py build SRC_DIR OUT.db     # record the build (SRC_DIR: an unpacked brotli sdist)
    python benchmarks/read_speed.py synth OUT.db --processes N --dumps D
    python benchmarks/read_speed.py scale PROFILE.db OUT.db --times K   # K copies of a real profile side by side
    python benchmarks/read_speed.py day OUT.db [--dumps 86400]           # a day-long `-c` recording of a small program
    python benchmarks/read_speed.py time PROFILE.db... [--runs 3] [--save DIR] [--only report,flamegraph]

`time` runs the commands in interleaved rounds and prints, per command, the median wall time,
the median CPU time of the child (user + sys from RUSAGE_CHILDREN) and the median of its
rounds' wall over report's in the same round, with the load average: the machine is shared,
so CPU time and the ratios are the figures to compare. `--save DIR` keeps every command's
output, to compare two versions byte for byte (cmp -r). With several profiles, smallest first, it ends
with the growth table: every command's CPU seconds per profile, and its CPU seconds per MiB on
the largest over that on the smallest (1.00: linear; below: less than linear).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

MAKEFILE = """\
SRCS := $(wildcard c/common/*.c c/dec/*.c c/enc/*.c) c/tools/brotli.c
OBJS := $(patsubst %.c,build/%.o,$(SRCS))
$(shell mkdir -p build/c/common build/c/dec build/c/enc build/c/tools)
build/brotli: $(OBJS)
\tgcc -O2 -o $@ $^ -lm
build/%.o: %.c
\tgcc -O2 -Ic/include -c $< -o $@
"""

EXPORTS = {"pprof": ".pb.gz", "perfetto": ".pftrace", "chrome-json": ".json", "speedscope": ".speedscope.json",
           "collapsed": ".collapsed"}


def record_build(src: Path, out: Path) -> None:
    """`heapscope record -o OUT -- make -j2` of brotli's C sources in `src`."""
    (src / "Makefile.heapscope").write_text(MAKEFILE)
    subprocess.run(["rm", "-rf", str(src / "build")], check=True)
    subprocess.run([sys.executable, "-m", "heapscope", "record", "-q", "-o", str(out), "--force", "--",
                    "make", "-s", "-f", "Makefile.heapscope", "-j2"], cwd=src, check=True, stdout=subprocess.DEVNULL)


def synth(out: Path, processes: int, dumps: int, leaves: int = 3000, seed: int = 7) -> None:
    """A profile of `processes` compiler-like processes with `dumps` dumps each."""
    from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
    from heapscope.store.writer import ProfileWriter

    rng = random.Random(seed)
    w = ProfileWriter(out, force=True)
    w.set_metadata("interval", 4096)
    libs = ["/usr/lib/gcc/x86_64-linux-gnu/12/cc1", "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6"]
    w.add_mappings((i + 1, Mapping(f"{i:02x}" * 20, 0x1000, 0, 0x400000 * (i + 1), 0x400000 * (i + 1) + 0x200000,
                                   0, name)) for i, name in enumerate(libs))
    nframes = 15_000
    w.add_frames((i + 1, Frame(MappingId(i % 4 + 1), 0x1000 + 16 * i, f"function_{i}" if i % 3 else ""))
                 for i in range(nframes))
    # One callsite tree shared by every process (same binary), paths of depth 10-40.
    children: dict[tuple[int | None, int], int] = {}
    rows: list[tuple[int, int, int | None, int]] = []
    all_leaves: list[int] = []
    for _ in range(leaves * 8):
        parent: int | None = None
        for d in range(rng.randint(10, 40)):
            frame = d + 1 if d < 3 else rng.randrange(200) + 1 if d < 8 else rng.randrange(nframes) + 1
            node = children.get((parent, frame))
            if node is None:
                node = children[(parent, frame)] = len(rows) + 1
                rows.append((node, d, parent, frame))
            parent = node
        assert parent is not None
        all_leaves.append(parent)
    w.add_callsites(rows)
    ts0 = 1_000_000_000
    for upid in range(1, processes + 1):
        info = ProcessInfo(upid=Upid(upid), pid=10_000 + upid, ppid=1, name="cc1", cmdline=f"cc1 file{upid}.c",
                           exe=libs[0], uid=0, start_ts=ts0)
        w.add_process(info)
        w.set_process_flags(info, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=4096,
                                               orig_sampling_interval_bytes=4096))
        sites = rng.sample(all_leaves, leaves)
        held: dict[int, list[int]] = {}
        ts = ts0
        for k in range(dumps):
            ts_end = ts + 100_000_000
            dump_rows = []
            for cs in rng.sample(sites, max(1, leaves // 3)):
                n = rng.randint(1, 20)
                freed = rng.randint(0, n)
                real = rng.choice((64, 256, 1024, 8192))  # the real size of this callsite's samples
                dump_rows.append((cs, n, n * 4096, n * real))
                if freed:
                    dump_rows.append((cs, -freed, -freed * 4096, -freed * real))
                h = held.setdefault(cs, [0, 0, 0, 0, 0, 0])
                h[0] += n - freed
                h[1] += (n - freed) * 4096
                h[2] += n
                h[3] += n * 4096
                h[4] += (n - freed) * real
                h[5] += n * real
            w.add_dump(upid, ts, ts_end, "periodic" if k < dumps - 1 else "exit", dump_rows, "libc.malloc")
            ts = ts_end
        peak = [(cs, *h) for cs, h in held.items()]
        w.add_peak(upid, ts, "libc.malloc", peak)
    w.close()


def scale(src: Path, out: Path, times: int) -> None:
    """`src` and K-1 copies of it side by side in one profile, as if K such builds ran under one
    `record`: every process, its dumps, rows, peaks and stats, and the callsite tree too, K times
    (upids and callsite ids shifted per copy); frames, mappings and symbols stay one set (the
    copies ran the same binaries). Every table but those three grows K times: the worst case for
    linear growth (a real build K times larger would share more of its callsites)."""
    import sqlite3

    out.unlink(missing_ok=True)
    subprocess.run(["cp", str(src), str(out)], check=True)
    db = sqlite3.connect(out)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    upids = db.execute("SELECT MAX(upid) FROM process").fetchone()[0]
    sites = db.execute("SELECT MAX(id) FROM stack_profile_callsite").fetchone()[0]
    for k in range(1, times):
        u, c = upids * k, sites * k
        db.execute("INSERT INTO process (upid, pid, name, cmdline, start_ts, end_ts, parent_upid, uid)"
                   f" SELECT upid + {u}, pid, name, cmdline, start_ts, end_ts, parent_upid + {u}, uid FROM process"
                   f" WHERE upid <= {upids}")
        db.execute(f"INSERT INTO heapscope_process SELECT upid + {u}, exe, ppid, from_startup, disconnected,"
                   " buffer_overran, buffer_corrupted, rejected_concurrent, hit_guardrail, client_error, unwinder,"
                   " sampling_interval_bytes, orig_sampling_interval_bytes"
                   f" FROM heapscope_process WHERE upid <= {upids}")
        db.execute(f"INSERT INTO stats SELECT name, idx + {u}, severity, source, value, description FROM stats"
                   f" WHERE idx IS NOT NULL AND idx <= {upids}")
        db.execute(f"INSERT INTO stack_profile_callsite SELECT id + {c}, depth, parent_id + {c}, frame_id"
                   f" FROM stack_profile_callsite WHERE id <= {sites}")
        db.execute("INSERT INTO heap_profile (ts, ts_end, dur, upid, heap_name, reason)"
                   f" SELECT ts, ts_end, dur, upid + {u}, heap_name, reason FROM heap_profile WHERE upid <= {upids}")
        db.execute("INSERT INTO heap_profile_allocation (ts, upid, heap_name, callsite_id, count, size, real_size)"
                   f" SELECT ts, upid + {u}, heap_name, callsite_id + {c}, count, size, real_size"
                   f" FROM heap_profile_allocation WHERE upid <= {upids}")
        db.execute(f"INSERT INTO heapscope_peak_allocation SELECT ts, upid + {u}, heap_name, callsite_id + {c},"
                   " count, size, alloc_count, alloc_size, real_size, alloc_real_size FROM heapscope_peak_allocation"
                   f" WHERE upid <= {upids}")
        db.execute(f"INSERT INTO heapscope_allocation_stream SELECT upid + {u}, seq, kind, ts, address, size,"
                   f" sample_size, callsite_id + {c} FROM heapscope_allocation_stream WHERE upid <= {upids}")
        db.commit()
    db.close()


def day(out: Path, dumps: int) -> None:
    """A profile as `record -c 1s` of a small program for a day would write: one process, `dumps`
    periodic dumps, a few hundred callsites, each dump with the rows of the callsites that changed
    since the previous one (a service's steady churn), a peak."""
    synth(out, processes=1, dumps=dumps, leaves=60)


def run(argv: list[str], out: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of one CLI command in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with open(out if out is not None else os.devnull, "wb") as f:
        proc = subprocess.run([sys.executable, "-m", "heapscope", *argv], stdout=f, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"heapscope {' '.join(argv)} failed with status {proc.returncode}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(db: Path, save: Path) -> dict[str, tuple[list[str], Path | None]]:
    """name -> (arguments, where stdout goes); files written by the command go to `save`."""
    out: dict[str, tuple[list[str], Path | None]] = {
        "report": (["report", str(db)], save / "report.txt"),
        "leaks": (["leaks", str(db)], save / "leaks.txt"),
        "flamegraph": (["flamegraph", str(db), "-o", str(save / "flamegraph.html"), "--force"], None),
        "diff": (["diff", str(db), str(db), "-o", str(save / "diff.html"), "--force"], save / "diff.txt"),
    }
    for fmt, suffix in EXPORTS.items():
        out[f"export {fmt}"] = (["export", str(db), "--format", fmt, "-o", str(save / f"export{suffix}"), "--force"],
                                None)
    return out


#: A command's median wall and CPU seconds, and the median over the rounds of its wall over
#: report's in the same round (None for report, or when report was not timed).
Timing = tuple[float, float, float | None]


def time_commands(db: Path, runs: int, save: Path, only: set[str] | None) -> dict[str, Timing]:
    """Print the table of one profile; returns each command's Timing.

    The commands run in interleaved rounds (each once a round, in turn; every other round in
    the reverse order), so that a change of the machine's pace during the minutes they take
    moves every command alike: the targets "<= 2x report" are ratios."""
    save.mkdir(parents=True, exist_ok=True)
    size = db.stat().st_size / 2**20
    print(f"{db} ({size:.1f} MiB), {runs} interleaved round(s); load average {os.getloadavg()[0]:.1f}")
    chosen = {name: spec for name, spec in commands(db, save).items()
              if not only or name in only or name.split()[0] in only}
    walls: dict[str, list[float]] = {name: [] for name in chosen}
    cpus: dict[str, list[float]] = {name: [] for name in chosen}
    for rnd in range(runs):
        for name, (argv, out) in (chosen.items() if rnd % 2 == 0 else reversed(chosen.items())):
            wall, cpu = run(argv, out)
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"{'command':<20} {'wall s':>8} {'cpu s':>8} {'x report':>9}")
    got: dict[str, Timing] = {}
    base = walls.get("report")
    for name in chosen:
        over = None if base is None or name == "report" else \
            statistics.median(w / b for w, b in zip(walls[name], base, strict=True))
        got[name] = (statistics.median(walls[name]), statistics.median(cpus[name]), over)
        shown = "" if over is None else f"{over:.2f}x"
        print(f"{name:<20} {got[name][0]:>8.2f} {got[name][1]:>8.2f} {shown:>9}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return got


# The targets for a 20 MiB profile of a ~125-process build, wall seconds; every other
# command at most this many times report's.
REPORT_TARGET_S, FLAMEGRAPH_TARGET_S, OTHERS_OVER_REPORT = 1.0, 3.0, 2.0


def targets_markdown(db: Path, got: dict[str, Timing]) -> list[str]:
    """time_commands' figures as a table with the targets and whether each is met (on wall time;
    a ratio to report is the median of the rounds' own ratios)."""
    report = got["report"][0]
    lines = [f"`{db.name}`: {db.stat().st_size / 2**20:.1f} MiB, {processes(db)} processes.", "",
             "| command | wall s | CPU s | target | met |", "|---|---|---|---|---|"]
    for name, (wall, cpu, over) in got.items():
        if name == "report":
            met, shown = wall <= REPORT_TARGET_S, f"<= {REPORT_TARGET_S:g} s"
        elif name == "flamegraph":
            met, shown = wall <= FLAMEGRAPH_TARGET_S, f"<= {FLAMEGRAPH_TARGET_S:g} s"
        else:
            ratio = over if over is not None else wall / report
            met, shown = ratio <= OTHERS_OVER_REPORT, f"<= {OTHERS_OVER_REPORT:g}x report ({ratio:.2f}x)"
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {shown} | {'**met**' if met else '**not met**'} |")
    return lines


def processes(db: Path) -> int:
    """How many processes a profile holds (0 when it cannot be read)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return int(con.execute("SELECT COUNT(*) FROM process").fetchone()[0])
    except sqlite3.Error:
        return 0


def growth_table(sizes: list[tuple[Path, dict[str, Timing]]]) -> None:
    """Every command's CPU seconds per profile, and per MiB relative to the first (1.00: linear)."""
    first_mib = sizes[0][0].stat().st_size / 2**20
    heads = [f"{db.stat().st_size / 2**20:.0f} MiB" for db, _ in sizes]
    print("\n| command | " + " | ".join(heads) + " | per MiB, last / first |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for name, (_wall, base, _over) in sizes[0][1].items():
        cells = [f"{got[name][1]:.2f}" if name in got else "" for _, got in sizes]
        last_db, last = sizes[-1]
        ratio = ""
        if name in last and base > 0:
            ratio = f"{last[name][1] / (last_db.stat().st_size / 2**20) / (base / first_mib):.2f}"
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("src", type=Path)
    b.add_argument("out", type=Path)
    s = sub.add_parser("synth")
    s.add_argument("out", type=Path)
    s.add_argument("--processes", type=int, default=125)
    s.add_argument("--dumps", type=int, default=1)
    s.add_argument("--leaves", type=int, default=3000)
    k = sub.add_parser("scale")
    k.add_argument("src", type=Path)
    k.add_argument("out", type=Path)
    k.add_argument("--times", type=int, required=True)
    d = sub.add_parser("day")
    d.add_argument("out", type=Path)
    d.add_argument("--dumps", type=int, default=86_400)
    t = sub.add_parser("time")
    t.add_argument("db", type=Path, nargs="+", help="one profile, or several (smallest first): then the growth table")
    t.add_argument("--runs", type=int, default=3, help="interleaved rounds: each command once a round")
    t.add_argument("--save", type=Path, help="keep each command's output here (default: a directory beside DB)")
    t.add_argument("--only", help="comma-separated commands (report, leaks, flamegraph, diff, export)")
    args = ap.parse_args()
    if args.cmd == "build":
        record_build(args.src, args.out)
    elif args.cmd in ("scale", "day"):
        t0 = time.perf_counter()
        if args.cmd == "scale":
            scale(args.src, args.out, args.times)
        else:
            day(args.out, args.dumps)
        print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - t0:.0f} s")
    elif args.cmd == "synth":
        t0 = time.perf_counter()
        synth(args.out, args.processes, args.dumps, args.leaves)
        print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - t0:.0f} s")
    else:
        only = set(args.only.split(",")) if args.only else None
        sizes = [(db, time_commands(db, args.runs, args.save or db.with_suffix(".out"), only)) for db in args.db]
        if len(sizes) > 1:
            growth_table(sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
