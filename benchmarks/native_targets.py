"""The client's cost inside real native targets, per sample: cc1plus and git log -p.

    python benchmarks/native_targets.py [--heapscope CMD] [--only cc1plus|git|cc1] [--cache-sim [--ll SIZE,ASSOC,LINE]]
                                        [--perf [--rounds N] [--variants plain,prof,...]] [--reuse-plain]
                                        [--out DIR]

For each target (run.py's cc1plus_command and generate_git_repo, cached in benchmarks/out/):
runs it under `valgrind --tool=callgrind` alone, then under `heapscope record` (default
interval), and prints the instructions the client added per sample (the whole program's Ir
difference over the samples recorded), hs_record_alloc_slow inclusive per sample and its
parts, the sampled frees, and the hooks' share. With --cache-sim, callgrind's cache model
also counts D1 and LL misses (simulated: the machine's counters are not readable in every
VM) added per sample. With --perf, the target's own rusage (user and sys CPU, minor page
faults) alone and under the client, medians of interleaved rounds (wall-clock figures are
noisy on a shared machine); --variants prof-big,prof-stopped set a run with the producer
stopped beside one where it reads (see perf_rows). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as bench_run  # noqa: E402
from callgrind import Callgrind, parse, profile_stats  # noqa: E402  (benchmarks/callgrind.py)

LIB = "libheapscope"


Costs = Callgrind


def samples_of(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT count(*) FROM heap_profile_allocation WHERE size > 0").fetchone()
        return int(row[0])
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def callgrind(out: Path, tag: str, argv: list[str], hs: list[str] | None, cache_sim: bool,
              cwd: Path, ll: str | None = None) -> tuple[Costs, Path | None]:
    cg = out / f"nt.{tag}.cg"
    db = out / f"nt.{tag}.db"
    for f in (cg, db):
        f.unlink(missing_ok=True)
    inner = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}"]
    if cache_sim:
        inner.append("--cache-sim=yes")
        if ll:
            inner.append(f"--LL={ll}")
    inner += argv
    cmd = inner if hs is None else [*hs, "record", "-q", "--no-symbolize", "-o", str(db), "--", *inner]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600,
                   cwd=cwd)
    return parse(cg), (db if hs is not None else None)


def fmt(x: float) -> str:
    return f"{x:,.0f}" if x == x else "-"


def report(label: str, plain: Costs, prof: Costs, stats: dict[str, int], samples: int) -> None:
    slow = prof.find(LIB, "hs_record_alloc_slow")
    n = prof.calls.get(slow, 0) or samples
    print(f"\n{label}: {n:,} samples; stats: " +
          ", ".join(f"{k} {v:,}" for k, v in sorted(stats.items()) if v and k in (
              "unwinding_errors", "truncated_stacks", "stack_table_full", "addr_table_full",
              "dropped_records", "blocked_ns", "unwind_ns")))
    for ev in prof.events:
        if ev not in plain.events:
            continue
        added = prof.ev(prof.totals, ev) - plain.ev(plain.totals, ev)
        print(f"  {ev:5} plain {plain.ev(plain.totals, ev):>15,}  profiled {prof.ev(prof.totals, ev):>15,}"
              f"  added/sample {added / max(n, 1):>9,.1f}")

    def incl(name: str, obj: str = LIB) -> list[int]:
        return prof.inclusive.get(prof.find(obj, name), [])

    def row(what: str, vec: list[int], per: int) -> None:
        cells = "  ".join(f"{ev} {prof.ev(vec, ev) / max(per, 1):>8,.1f}" for ev in prof.events)
        print(f"    {what:34} {cells}")

    print(f"  per sample (inclusive, over {n:,} samples):")
    row("hs_record_alloc_slow", incl("hs_record_alloc_slow"), n)
    for name in ("hs_cfa_backtrace", "hs_stack_id", "hs_stacks_intern", "hs_modules_check",
                 "hs_sampler_sample", "hs_addrset_insert", "hs_ring_write_slow", "clock_gettime"):
        k = prof.find(LIB, name)
        if prof.calls.get(k, 0):
            row(f"{name} ({prof.calls[k]:,} calls)", prof.inclusive.get(k, []), n)
    bt = prof.find("libunwind", "backtrace")
    if prof.calls.get(bt, 0):
        row(f"libunwind backtrace ({prof.calls[bt]:,} calls)", prof.inclusive.get(bt, []), n)
    fk = prof.find(LIB, "hs_record_free_slow")
    fc = prof.calls.get(fk, 0)
    if fc:
        row(f"hs_record_free_slow ({fc:,} calls), per call", prof.inclusive.get(fk, []), fc)
    # free_checked (hooks.c) became hs_free_checked (client.c, slow path inlined): older builds have the former.
    for hook in ("malloc", "free", "calloc", "realloc", "free_checked", "hs_free_checked", "malloc_recorded"):
        k = prof.find(LIB, hook)
        c = prof.calls.get(k, 0)
        if c:
            row(f"{hook} excl. ({c:,} calls), per call", prof.exclusive.get(k, []), c)
    # Everything of ours, exclusive, over the samples: the client's whole cost.
    ours = [0] * len(prof.events)
    for k, vec in prof.exclusive.items():
        if LIB in k[0]:
            for i, v in enumerate(vec[:len(ours)]):
                ours[i] += v
    row("all of libheapscope, excl., /sample", ours, n)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--heapscope", default=None, help="heapscope command (default: on PATH)")
    ap.add_argument("--only", default=None, help="cc1plus, git or cc1 (cc1 -O2, the long run: --perf only)")
    ap.add_argument("--cache-sim", action="store_true", help="callgrind's cache model (D1, LL misses)")
    ap.add_argument("--perf", action="store_true",
                    help="the target's rusage (user, sys, minor faults; medians) instead of callgrind")
    ap.add_argument("--rounds", type=int, default=3, help="--perf: interleaved rounds")
    ap.add_argument("--variants", default="plain,prof",
                    help=f"--perf: which runs, of {', '.join(VARIANTS)} (comma-separated)")
    ap.add_argument("--ll", default=None, metavar="SIZE,ASSOC,LINE",
                    help="--cache-sim: the simulated last level (callgrind --LL), e.g. 1048576,8,64 for "
                         "a core's L2 (the machine's own LL as valgrind reads it is one shared L3)")
    ap.add_argument("--reuse-plain", action="store_true",
                    help="take the unprofiled run from DIR's earlier nt.*.plain.cg when there is one "
                         "(the target alone does not change between client builds)")
    ap.add_argument("--out", type=Path, default=bench_run.OUT)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    hs = args.heapscope.split() if args.heapscope else [shutil.which("heapscope") or "heapscope"]
    targets: list[tuple[str, list[str]]] = []
    if args.only in (None, "cc1plus"):
        cmd = bench_run.cc1plus_command(out, False)
        if cmd:
            targets.append(("cc1plus", cmd))
    if args.only in (None, "git"):
        repo = out / "history.git"
        bench_run.generate_git_repo(repo, 4000)
        targets.append(("git", ["git", "-C", str(repo), "--no-pager", "log", "-p"]))
    if args.only == "cc1" and args.perf:
        big_c = out / "big.c"
        if not big_c.exists():
            bench_run.generate_c_file(big_c, 1700)
        cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True,
                             check=True).stdout.strip()
        targets.append(("cc1", [cc1, "-quiet", "-O2", str(big_c), "-o", str(out / "big.s")]))
    os.environ.setdefault("LC_ALL", "C")
    print(f"heapscope: {' '.join(hs)}; load: {os.getloadavg()[0]:.2f}")
    for name, argv in targets:
        if args.perf:
            perf_rows(out, name, argv, hs, args.rounds, tuple(v for v in args.variants.split(",") if v in VARIANTS))
            continue
        tag = name + (".cs" if args.cache_sim else "")
        if args.cache_sim and args.ll:
            tag += ".ll" + args.ll.split(",")[0]
        kept = out / f"nt.{tag}.plain.cg"
        if args.reuse_plain and kept.exists():
            plain = parse(kept)
        else:
            plain, _ = callgrind(out, f"{tag}.plain", argv, None, args.cache_sim, out, args.ll)
        prof, db = callgrind(out, f"{tag}.prof", argv, hs, args.cache_sim, out, args.ll)
        assert db is not None
        report(name, plain, prof, profile_stats(db), samples_of(db))
    return 0


# Runs argv[2:] as a child and writes the child's rusage to argv[1] (user s, sys s, minor faults,
# involuntary switches): the target alone, whether or not it runs under record (this wrapper
# is then profiled too, but only its child is counted). With HS_STOP_PRODUCER_MS set, it stops
# its parent (heapscope, i.e. the producer) that long after the start, once the target's
# handshake is done, and lets it go on after the target's exit: the target then runs with
# nothing reading its ring (record with a ring it cannot fill: --shmem-size 1G).
_WRAPPER = """
import os, resource, signal, sys, time
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
stop = os.environ.get("HS_STOP_PRODUCER_MS")
parent = os.getppid()
if stop:
    time.sleep(int(stop) / 1000)
    os.kill(parent, signal.SIGSTOP)
_, status, ru = os.wait4(pid, 0)
if stop:
    os.kill(parent, signal.SIGCONT)
with open(sys.argv[1], "w") as f:
    f.write(f"{ru.ru_utime} {ru.ru_stime} {ru.ru_minflt} {ru.ru_nivcsw}\\n")
sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
"""

VARIANTS = ("plain", "prof", "prof-big", "prof-stopped")


def perf_rows(out: Path, name: str, argv: list[str], hs: list[str], rounds: int,
              variants: tuple[str, ...] = ("plain", "prof")) -> None:
    """The target's own user and sys CPU and minor page faults (its rusage), alone and under
    the client, over interleaved rounds: medians. prof-big records with a 1 GiB ring;
    prof-stopped too, with the producer stopped while the target runs (see _WRAPPER): the
    two differ only by the producer's work beside the target on the other core."""
    res: dict[str, list[list[float]]] = {v: [] for v in variants}
    for _ in range(rounds):
        for kind in variants:
            ru = out / f"nt.{name}.{kind}.rusage"
            db = out / f"nt.{name}.rusage.db"
            inner = [sys.executable, "-c", _WRAPPER, str(ru), *argv]
            env = dict(os.environ)
            env.pop("HS_STOP_PRODUCER_MS", None)
            if kind == "plain":
                cmd = inner
            else:
                ring = ["--shmem-size", str(1 << 30)] if kind in ("prof-big", "prof-stopped") else []
                cmd = [*hs, "record", "-q", "--no-symbolize", *ring, "-o", str(db), "--", *inner]
                if kind == "prof-stopped":
                    env["HS_STOP_PRODUCER_MS"] = "300"
            db.unlink(missing_ok=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900,
                           cwd=out, env=env)
            res[kind].append([float(x) for x in ru.read_text().split()])
    base = res.get("plain")

    def med(rows: list[list[float]], i: int) -> float:
        col = sorted(r[i] for r in rows)
        return col[len(col) // 2]

    for kind, rows in res.items():
        user, syst, flt = med(rows, 0), med(rows, 1), med(rows, 2)
        rel = ""
        if base and kind != "plain":
            rel = (f" (x{user / med(base, 0):.3f} user, x{(user + syst) / (med(base, 0) + med(base, 1)):.3f}"
                   f" user+sys, +{flt - med(base, 2):,.0f} faults)")
        every = ", ".join(f"{r[0]:.3f}" for r in rows)
        print(f"{name} {kind:12}: user {user:.3f} s, sys {syst:.3f} s, minor faults {flt:,.0f}{rel}"
              f"  [user: {every}]")

if __name__ == "__main__":
    sys.exit(main())
