"""What a free of an unsampled address costs the target: instructions and cache misses.

    python benchmarks/free_path.py [--heapscope CMD] [--held N] [--list N] [--rounds N]
                                   [--pywork N] [--python EXE]

Runs benchmarks/free_path.c (and benchmarks/pywork.py) under `heapscope record`
with the target inside `valgrind --tool=callgrind --cache-sim=yes` (a fixed
32 KiB 8-way D1 and an 8 MiB 16-way LL, so that the figures do not depend on
the host), at the default interval (4096) with --seed 1, and reads from
callgrind's output, per call of the client's free wrappers:

  Ir, D1mr, DLmr  instructions, D1 and last-level read misses of the wrapper
                  itself (exclusive: the real free is not in it), per call
  slow / free     share of calls that went on past the filter, less the
                  sampled frees that were sent (stats `frees`): the filter's
                  false positives, per unsampled free
  slow Ir, D1mr   the slow path (hs_record_free_slow / hs_record_py_free_slow
                  inclusive; for free, hs_free_checked's own and the
                  set's remove) per call: what each false positive costs on top
  per unsampled   Ir and D1mr of the wrapper plus the false positives' share of
                  the slow path: what heapscope adds to one unsampled free
  per free, all   the wrapper and the whole slow path (sampled frees too: the
                  table remove and the ring write) over all calls
  / target Ir     the same for all calls, as a share of the target's instructions
and the sampled-address set's insert (per sampled malloc) and remove (per
slow-path call: sampled frees and false positives).

Native patterns (free_path.c): HELD blocks of 64 bytes kept live (about
HELD / 64 of them sampled), then ROUNDS lists of LIST blocks of 64 bytes built
and freed in order (seq) or in a random order (rand); `held` frees the held
blocks themselves in order. Python: pywork.py N (CPython's json), the MEM/OBJ
domain wrapper w_free and the libc free hook.

Instruction and miss counts do not depend on the load of the machine, so old
and new builds compare on a shared machine (`--heapscope` points at another
install's command). Nothing here is asserted: tests never time or count things.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from callgrind import Callgrind, parse, profile_stats  # benchmarks/callgrind.py (the drivers run from benchmarks/)

HERE = Path(__file__).resolve().parent
LIB = "libheapscope"
EVENTS = ("Ir", "D1mr", "DLmr")
CACHE = ["--cache-sim=yes", "--D1=32768,8,64", "--LL=8388608,16,64", "--I1=32768,8,64"]



Profile = Callgrind


def parse_callgrind(path: Path) -> Callgrind:
    return parse(path)


def callgrind(out: Path, tag: str, argv: list[str], hs: list[str], interval: int) -> tuple[Profile, dict[str, int]]:
    cg = out / f"cg.{tag}"
    db = out / f"{tag}.db"
    for f in (cg, db):
        f.unlink(missing_ok=True)
    cmd = [*hs, "record", "-q", "--no-symbolize", "-o", str(db), "-i", str(interval), "--seed", "1", "--",
           "valgrind", "--tool=callgrind", *CACHE, f"--callgrind-out-file={cg}", *argv]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)
    stats = profile_stats(db)
    return parse_callgrind(cg), stats


@dataclass
class Row:
    label: str
    calls: int
    hook: dict[str, float]
    fp: float
    slow: dict[str, float]
    per_unsampled: dict[str, float]
    per_free: dict[str, float]  # everything the client does in a free, sampled or not, per call
    share: float  # the same, all calls, over the target's instructions
    insert: dict[str, float]  # hs_addrset_insert inclusive per call
    remove: dict[str, float]  # hs_addrset_remove inclusive per call (false positives included)


def row(p: Profile, label: str, hook_fn: str, slow_fns: tuple[str, ...], sent: int) -> Row:
    key = p.find(LIB, hook_fn)
    calls = p.calls.get(key, 0)
    hook = {e: p.get(p.exclusive, key, e) / max(calls, 1) for e in EVENTS}
    slow_calls = 0
    slow_cost = dict.fromkeys(EVENTS, 0.0)
    for fn in slow_fns:  # the slow path's function (the name of older builds second)
        sk = p.find(LIB, fn)
        if p.calls.get(sk, 0):
            slow_calls = p.calls[sk]
            slow_cost = {e: float(p.get(p.inclusive, sk, e)) for e in EVENTS}
            if fn == "hs_free_checked":  # it ends in a jump to the real free, which its
                # inclusive cost holds: its own cost and the address set's remove instead
                rm = p.find(LIB, "hs_addrset_remove")
                slow_cost = {e: float(p.get(p.exclusive, sk, e) + p.get(p.inclusive, rm, e)) for e in EVENTS}
            break
    unsampled = max(calls - sent, 1)
    fp = max(slow_calls - sent, 0) / unsampled
    slow = {e: slow_cost[e] / max(slow_calls, 1) for e in EVENTS}
    per = {e: hook[e] * calls / unsampled + fp * slow[e] for e in EVENTS}
    per_free = {e: (hook[e] * calls + slow_cost[e]) / max(calls, 1) for e in EVENTS}
    total = p.totals[0] if p.totals else 0
    share = per_free["Ir"] * calls / total if total else float("nan")
    return Row(label, calls, hook, fp, slow, per, per_free, share, set_cost(p, "hs_addrset_insert"),
               set_cost(p, "hs_addrset_remove"))


def set_cost(p: Profile, fn: str) -> dict[str, float]:
    key = p.find(LIB, fn)
    calls = p.calls.get(key, 0)
    return {e: p.get(p.inclusive, key, e) / max(calls, 1) for e in EVENTS}


def native_rows(hs: list[str], out: Path, held: int, n: int, rounds: int) -> list[Row]:
    exe = out / "free_path"
    subprocess.run(["cc", "-O2", "-Wall", "-fno-omit-frame-pointer", "-o", str(exe), str(HERE / "free_path.c")],
                   check=True)
    rows = []
    for pattern in ("seq", "rand", "held"):
        argv = [str(exe), pattern, str(held), "64", str(n), "64", str(rounds)]
        prof, stats = callgrind(out, pattern, argv, hs, 4096)
        label = (f"{pattern}: {held:,} held ({stats.get('heap_samples', 0):,} samples), "
                 f"{stats.get('frees:libc.malloc', 0):,} sampled frees")
        rows.append(row(prof, label, "free", ("hs_free_checked", "hs_record_free_slow"),
                        stats.get("frees:libc.malloc", 0)))
    return rows


def python_rows(hs: list[str], out: Path, python: str, n: int) -> list[Row]:
    argv = [python, str(HERE / "pywork.py"), str(n)]
    prof, stats = callgrind(out, "pywork", argv, hs, 4096)
    py = stats.get("frees:python.pymalloc", 0)
    libc = stats.get("frees:libc.malloc", 0)
    # the stock pymalloc's wrapper (client/pymem.c), w_free for other allocators and older builds
    wrapper = "s_free" if prof.calls.get(prof.find(LIB, "s_free"), 0) else "w_free"
    return [row(prof, f"pywork.py {n:,}, {wrapper} ({py:,} sampled frees)", wrapper, ("hs_record_py_free_slow",),
                py),
            row(prof, f"pywork.py {n:,}, free ({libc:,} sampled frees)", "free",
                ("hs_free_checked", "hs_record_free_slow"), libc)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heapscope", default=shutil.which("heapscope") or "heapscope")
    ap.add_argument("--held", type=int, default=2_000_000, help="64-byte blocks kept live (about 1 in 64 sampled)")
    ap.add_argument("--list", type=int, default=100_000, help="blocks per list in seq and rand")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pywork", type=int, default=20_000, help="pywork.py's N_RECORDS (0: skip)")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("free_path: valgrind is not installed", file=sys.stderr)
        return 1
    hs = [args.heapscope]
    with tempfile.TemporaryDirectory(prefix="free_path.") as tmp:
        out = Path(tmp)
        rows = native_rows(hs, out, args.held, args.list, args.rounds)
        if args.pywork:
            rows += python_rows(hs, out, args.python, args.pywork)
    print(f"heapscope: {args.heapscope}; callgrind, D1 32 KiB 8-way, LL 8 MiB; interval 4096, seed 1")
    print("| run, wrapper | calls | wrapper Ir / D1mr / DLmr per call | slow path per unsampled free "
          "| slow path Ir / D1mr per call | per unsampled free: Ir / D1mr | per free, all: Ir / D1mr "
          "| all calls / target Ir |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.label} | {r.calls:,} | {r.hook['Ir']:.1f} / {r.hook['D1mr']:.3f} / {r.hook['DLmr']:.3f} "
              f"| {r.fp:.4f} | {r.slow['Ir']:.0f} / {r.slow['D1mr']:.2f} "
              f"| {r.per_unsampled['Ir']:.1f} / {r.per_unsampled['D1mr']:.3f} "
              f"| {r.per_free['Ir']:.1f} / {r.per_free['D1mr']:.3f} | {100 * r.share:.2f}% |")
    print()
    print("| run | hs_addrset_insert Ir / D1mr per call | hs_addrset_remove Ir / D1mr per call (false positives "
          "included) |")
    print("|---|---|---|")
    seen = set()
    for r in rows:
        run = r.label.split(",")[0].split(":")[0]
        if run in seen:
            continue
        seen.add(run)
        print(f"| {run} | {r.insert['Ir']:.0f} / {r.insert['D1mr']:.2f} "
              f"| {r.remove['Ir']:.0f} / {r.remove['D1mr']:.2f} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C")
    sys.exit(main())
