"""The client's hot path in instructions: what one malloc, one free and one sample cost.

    python benchmarks/hotpath.py [--heapscope CMD] [--ops N] [--live N] [--sections native,python]
                                 [--python EXE]

Runs benchmarks/hotpath.c under `heapscope record` with the target inside
`valgrind --tool=callgrind`, and reads the instruction counts (Ir) per call of
the client's functions from callgrind's output. Instruction counts do not
depend on the load of the machine, so old and new builds compare on a shared
machine where wall time cannot (`--heapscope` points at another install's
command, e.g. a venv built from an older commit).

Figures (instructions, user space only):
  malloc hook       our `malloc` exclusive of the real malloc and of the slow
                    path, per call, on a run where nothing is sampled: the
                    cost of an unsampled malloc
  free hook         the same for `free`: an unsampled free, with no sampled
                    address live (empty) and with --live sampled addresses
                    live (each of --live blocks of one interval is sampled)
  false positives   frees that took the slow path without being sampled, per
                    unsampled free (the filter in front of the address set)
  added per op      (profiled - unprofiled) instructions of the whole program
                    per "free + malloc" operation, from two run lengths (so
                    start-up cancels), everything included
  sample            hs_record_alloc_slow inclusive per sampled malloc with
                    --interval 1 (every allocation sampled, 8 frames of the
                    program above it, stack already known), per unwinder,
                    and its parts: the unwind, the stack hash, the interning,
                    the sampler step, the sampled-address insert, the rest
                    (the ring writes, inlined, and the glue)
  sampled free      the free slow path per call on that run, without the real free
                    (hs_free_checked's own and the address set's remove; in older
                    builds hs_record_free_slow inclusive)

Python section (pymalloc wrapped, Python frames on), on
benchmarks/pyobjects.py and pywork.py with small arguments, each run unprofiled,
under heapscope with nothing sampled, and at the default interval (4096, seed 1):
  pymalloc alloc    the MEM/OBJ domain wrapper (w_malloc) exclusive per call, on
                    the run where nothing is sampled: an unsampled PyObject_Malloc
  pymalloc free     the same for w_free: an unsampled PyObject_Free
  per sample        hs_record_alloc_slow inclusive per sampled allocation, and
                    the parts of it: the native unwind, the Python frame walk
                    (since the walk memo, with the keys and the Python part's
                    hash in it), the module check of new stacks (per sample:
                    totals / samples; a part an older build does not call is
                    nan)
  whole program     the target's instructions over the unprofiled run's
Nothing here is asserted: tests never time or count things.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import callgrind as callgrind_format  # benchmarks/callgrind.py (the drivers run from benchmarks/)

HERE = Path(__file__).resolve().parent
HUGE_INTERVAL = 1 << 40  # nothing the benchmark allocates is ever sampled


@dataclass
class Profile:
    """Per-function exclusive Ir, inclusive Ir of the calls made to it, and call counts."""

    total: int = 0
    exclusive: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    inclusive: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    calls: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def find(self, obj: str, name: str) -> tuple[str, str]:
        for key in list(self.exclusive) + list(self.calls):
            if key[1] == name and obj in key[0]:
                return key
        return ("", name)


def parse_callgrind(path: Path) -> Profile:
    """The Ir column of a callgrind output (benchmarks/callgrind.py reads the format)."""
    cg = callgrind_format.parse(path)
    prof = Profile(total=cg.total("Ir"))
    for table, into in ((cg.exclusive, prof.exclusive), (cg.inclusive, prof.inclusive)):
        for key, vec in table.items():
            into[key] += cg.ev(vec, "Ir")
    for key, n in cg.calls.items():
        prof.calls[key] += n
    return prof


def build(out: Path) -> Path:
    exe = out / "hotpath"
    subprocess.run(["cc", "-O2", "-Wall", "-fno-omit-frame-pointer", "-o", str(exe), str(HERE / "hotpath.c")],
                   check=True)
    return exe


def callgrind(out: Path, tag: str, argv: list[str], heapscope: list[str] | None,
              record_args: list[str]) -> tuple[Profile, dict[str, int]]:
    """Runs argv under callgrind (under `heapscope record` unless heapscope is None)."""
    cg = out / f"cg.{tag}"
    db = out / f"{tag}.db"
    for f in (cg, db):
        f.unlink(missing_ok=True)
    inner = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", *argv]
    cmd = inner if heapscope is None else [*heapscope, "record", "-q", "--no-symbolize", "-o", str(db),
                                           *record_args, "--", *inner]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
    stats = callgrind_format.profile_stats(db)
    return parse_callgrind(cg), stats


LIB = "libheapscope"


def sampled_free(p: Profile) -> float:
    """The client's Ir per free of a sampled address: hs_free_checked's own (the free hook's
    cold half with the slow path inlined; its inclusive cost holds the real free it jumps to) plus
    the address set's remove, or hs_record_free_slow inclusive in older builds."""
    calls = p.calls.get(p.find(LIB, "hs_free_checked"), 0)
    if not calls:
        return per_call(p, "hs_record_free_slow", inclusive=True)
    rm = p.find(LIB, "hs_addrset_remove")
    return per_call(p, "hs_free_checked") + p.inclusive.get(rm, 0) / calls


def per_call(p: Profile, name: str, inclusive: bool = False) -> float:
    """Ir per call of `name` (a|b: the first of the two that was called, for older builds)."""
    key = p.find(LIB, name)
    for alt in name.split("|"):
        key = p.find(LIB, alt)
        if p.calls.get(key, 0):
            break
    calls = p.calls.get(key, 0)
    if not calls:
        return float("nan")
    cost = p.inclusive.get(key, 0) if inclusive else p.exclusive.get(key, 0)
    return cost / calls


def unwind_per_sample(p: Profile, samples: int = 0) -> float:
    """Ir of the unwind per sampled malloc: hs_unwind_in_place (or hs_unwind) in older builds; since the
    unwind is inlined into hs_record_alloc_slow, what it calls: our CFA walk (hs_cfa_backtrace),
    libunwind's backtrace where that gives up (or hs_unwind_raw, the frame walk) and hs_unwind_trim."""
    samples = samples or p.calls.get(p.find(LIB, "hs_record_alloc_slow"), 0)
    if not samples:
        return float("nan")
    for name in ("hs_unwind_in_place", "hs_unwind"):  # an older build: one call per sample
        key = p.find(LIB, name)
        if p.calls.get(key, 0) >= samples // 2:
            return p.inclusive.get(key, 0) / p.calls[key]
    cost = 0
    for obj, name in (("libunwind", "backtrace"), (LIB, "hs_cfa_backtrace"), (LIB, "hs_unwind_raw"),
                      (LIB, "hs_unwind_trim")):
        cost += p.inclusive.get(p.find(obj, name), 0)
    return cost / samples


def rest_per_sample(p: Profile) -> float:
    """hs_record_alloc_slow's inclusive Ir per call less the parts reported on their own rows."""
    total = per_call(p, "hs_record_alloc_slow", inclusive=True)
    parts = [unwind_per_sample(p)] + [per_call(p, fn, inclusive=True) for fn in
                                      ("hs_stack_id", "hs_stacks_intern", "hs_sampler_sample",
                                       "hs_addrset_insert")]
    return total - sum(x for x in parts if x == x)


PY_WORKLOADS = (("pyobjects.py 14 8", ["pyobjects.py", "14", "8"]),
                ("pywork.py 40000", ["pywork.py", "40000"]))

PY_PARTS = (("Python frame walk, keys and the Python part's hash (with the walk memo)",
             "hs_py_walk_keyed|hs_py_walk"),
            ("code-object keys (builds before the keyed walk)", "hs_py_code_key"),
            ("stack id of the Python part (builds before the walk hashed it)", "hs_stack_id_py"),
            ("module check of new stacks", "hs_modules_check"))


def total_per(p: Profile, name: str, per: int) -> float:
    """Inclusive Ir of every call of `name` (a|b: the first found), divided by per."""
    for alt in name.split("|"):
        key = p.find(LIB, alt)
        if p.calls.get(key, 0):
            return p.inclusive.get(key, 0) / max(per, 1)
    return float("nan")


def python_rows(hs: list[str], python: str) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="hotpath.py.") as tmp:
        out = Path(tmp)
        for name, script in PY_WORKLOADS:
            argv = [python, str(HERE / script[0]), *script[1:]]
            tag = script[0].split(".")[0]
            plain, _ = callgrind(out, f"{tag}.plain", argv, None, [])
            quiet, _ = callgrind(out, f"{tag}.quiet", argv, hs, ["-i", str(HUGE_INTERVAL)])
            prof, stats = callgrind(out, f"{tag}.4096", argv, hs, ["-i", "4096", "--seed", "1"])
            # malloc's samples and python.pymalloc's (hs_record_py_alloc_slow, a heap of its own)
            samples = max(stats.get("heap_samples", 0) + stats.get("python_heap_samples", 0), 1)
            slow = sum(prof.inclusive.get(prof.find(LIB, fn), 0)
                       for fn in ("hs_record_alloc_slow", "hs_record_py_alloc_slow"))
            rows.append((name, "unsampled pymalloc alloc (w_malloc, exclusive per call)",
                         f"{per_call(quiet, 's_malloc|w_malloc'):.1f}"))
            rows.append((name, "unsampled pymalloc free (w_free, exclusive per call)",
                         f"{per_call(quiet, 's_free|w_free'):.1f}"))
            rows.append((name, "whole program, nothing sampled / unprofiled", f"{quiet.total / plain.total:.3f}x"))
            rows.append((name, f"per sample ({samples:,} samples): hs_record_alloc_slow and "
                         "hs_record_py_alloc_slow inclusive", f"{slow / samples:.0f}"))
            rows.append((name, "  of which native unwind, per sample", f"{unwind_per_sample(prof, samples):.0f}"))
            for label, fn in PY_PARTS:
                rows.append((name, f"  of which {label}, per sample", f"{total_per(prof, fn, samples):.0f}"))
            rows.append((name, "whole program at 4096: instructions, profiled / unprofiled",
                         f"{prof.total:,} / {plain.total:,} = {prof.total / plain.total:.3f}x"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heapscope", default=shutil.which("heapscope") or "heapscope",
                    help="the heapscope command to measure (default: the one on PATH)")
    ap.add_argument("--ops", type=int, default=200_000, help="free+malloc operations per run")
    ap.add_argument("--live", type=int, default=20_000, help="sampled blocks kept live in the 'live' runs")
    ap.add_argument("--unwinders", default="fp,libunwind,none")
    ap.add_argument("--sections", default="native,python", help="native, python or both (comma-separated)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the Python section")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("hotpath: valgrind is not installed", file=sys.stderr)
        return 1
    hs = [args.heapscope]
    ops = args.ops
    sections = set(args.sections.split(","))
    if "python" in sections:
        print(f"heapscope: {args.heapscope}; python: {args.python}; valgrind callgrind, Ir")
        print("| workload | path | instructions |")
        print("|---|---|---|")
        for workload, label, value in python_rows(hs, args.python):
            print(f"| {workload} | {label} | {value} |")
    if "native" not in sections:
        return 0
    with tempfile.TemporaryDirectory(prefix="hotpath.") as tmp:
        out = Path(tmp)
        exe = build(out)
        size = "64"
        rows: list[tuple[str, str]] = []

        # Unsampled malloc and free, no sampled address live; added per op from two lengths.
        plain1, _ = callgrind(out, "plain1", [str(exe), str(ops), size], None, [])
        plain2, _ = callgrind(out, "plain2", [str(exe), str(2 * ops), size], None, [])
        huge = ["-i", str(HUGE_INTERVAL)]
        prof1, _ = callgrind(out, "empty1", [str(exe), str(ops), size], hs, huge)
        prof2, _ = callgrind(out, "empty2", [str(exe), str(2 * ops), size], hs, huge)
        added = ((prof2.total - prof1.total) - (plain2.total - plain1.total)) / ops
        rows.append(("unsampled malloc (malloc hook, exclusive)", f"{per_call(prof2, 'malloc'):.1f}"))
        rows.append(("unsampled free, empty set (free hook, exclusive)", f"{per_call(prof2, 'free'):.1f}"))
        rows.append(("added per free+malloc, nothing sampled (whole program)", f"{added:.1f}"))

        # Unsampled frees with LIVE sampled addresses live (blocks of one interval: all sampled).
        interval = 4096
        live = [str(exe), str(ops), size, str(args.live), str(interval)]
        lp, lstats = callgrind(out, "live", live, hs, ["-i", str(interval), "--seed", "1"])
        frees = lp.calls.get(lp.find(LIB, "free"), 0)
        slow = (lp.calls.get(lp.find(LIB, "hs_free_checked"), 0)
                or lp.calls.get(lp.find(LIB, "hs_record_free_slow"), 0))
        sampled = lstats.get("heap_samples", 0)
        unsampled = max(frees - sampled, 1)
        fp_rate = max(slow - sampled, 0) / unsampled
        rows.append((f"unsampled free, {args.live:,} sampled live (free hook, exclusive)",
                     f"{per_call(lp, 'free'):.1f}"))
        rows.append(("  slow-path calls that were not sampled frees, per unsampled free", f"{fp_rate:.4f}"))
        rows.append(("  free slow path per call (sampled frees and false positives)",
                     f"{sampled_free(lp):.0f}"))

        # One sample per malloc, per unwinder.
        n = max(ops // 10, 1000)
        for unwinder in args.unwinders.split(","):
            sp, sstats = callgrind(out, f"sample.{unwinder}", [str(exe), str(n), size], hs,
                                   ["-i", "1", "--unwinder", unwinder])
            rows.append((f"sample, --unwinder {unwinder} (hs_record_alloc_slow inclusive)",
                         f"{per_call(sp, 'hs_record_alloc_slow', inclusive=True):.0f}"))
            rows.append(("  of which the unwind (unw_backtrace or the frame walk, and the trim)",
                         f"{unwind_per_sample(sp):.0f}"))
            for label, fn in (("stack hash", "hs_stack_id"), ("stack interning", "hs_stacks_intern"),
                              ("sampler step", "hs_sampler_sample"),
                              ("sampled-address insert", "hs_addrset_insert")):
                rows.append((f"  of which the {label} ({fn} inclusive)", f"{per_call(sp, fn, inclusive=True):.0f}"))
            rows.append(("  of which the rest (ring writes, inlined, and the glue)", f"{rest_per_sample(sp):.0f}"))
            rows.append((f"  sampled free, --unwinder {unwinder} (the slow path, without the real free)",
                         f"{sampled_free(sp):.0f}"))
            if sstats.get("heap_samples", 0) < n:
                rows.append((f"  (only {sstats.get('heap_samples', 0)} samples recorded)", ""))

    print(f"heapscope: {args.heapscope}; ops {ops:,}; valgrind callgrind, Ir")
    print("| path | instructions |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C")
    sys.exit(main())
