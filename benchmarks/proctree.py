"""What a process tree pays under `heapscope record`: each short process, and a real build.

    python benchmarks/proctree.py [--rounds 9] [--loop 200] [--heapscope PATH] [--markdown] [--peers]
                                  [--compare PATH [--compare-name NAME]]... [--src BROTLI] [--no-make]

Runs, interleaved round by round (the order shuffled each round, so that a busy
spell of a shared machine hits every variant alike), the whole command as a
user runs it:

    sh -c 'for i in $(seq 200); do /bin/true; done'      plain, and under `heapscope record -o X --`
    sh -c 'for i in $(seq 0); do /bin/true; done'        the same shell starting nothing: record's
                                                         fixed cost and the shell's own process
    make -j2 of brotli's C sources (37 files, gcc -O2,   plain, and under `heapscope record -o X --`
    ~113 processes: gcc drivers, cc1, as, collect2, ld)

and prints, per variant, the median wall time and the median CPU time (user +
system of the command and all its children, from wait4's rusage). The loop's
figure is the time each short process adds:

    ((loop recorded - loop plain) - (no-loop recorded - no-loop plain)) / N

(medians of each), in wall and in CPU ms; the build's is the ratio recorded /
plain. The build's sources are an unpacked brotli sdist (`--src DIR`, or a
.tar.gz), built with benchmarks/read_speed.py's Makefile; without --src the
sdist is fetched once with `pip download` into benchmarks/out/. Each round starts
from a clean build directory; its make reads a warm page cache (round 0, not
counted, warms it and the symbol cache). The recorded build's process count is
read from its profile. `--compare` adds another heapscope (say main's install)
to the same rounds, as benchmarks/fixed_cost.py does. `--peers` adds `heaptrack
make` (heaptrack profiles make alone: its children run unprofiled). The load average
before and after is printed: on a shared machine, quote the CPU figures. With
`--markdown` the tables end with the issue's targets and whether each is met.

Use installed heapscopes (`pip install .`): an editable install checks its build
tree with ninja at every start.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from read_speed import MAKEFILE, processes
from self_cpu import no_profile_argv

HERE = Path(__file__).resolve().parent
BROTLI = "brotli==1.2.1"


def _heapscope_default() -> str:
    beside = Path(sys.executable).with_name("heapscope")
    return str(beside) if beside.is_file() else (shutil.which("heapscope") or "heapscope")


def _loop(n: int) -> list[str]:
    return ["/bin/sh", "-c", f"for i in $(seq {n}); do /bin/true; done"]


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the command and its children) of one run, which must succeed."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing can block on it while we wait
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)}: exit status {code}\n{err.read().decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def brotli_sources(src: Path | None) -> Path:
    """An unpacked brotli sdist: `src` itself, `src` unpacked, or the sdist from PyPI."""
    if src is not None and src.is_dir():
        return src
    out = HERE / "out" / "proctree"
    if src is None:
        got = sorted(out.glob("brotli-*.tar.gz"))
        if not got:
            out.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            "-d", str(out), BROTLI], check=True)
            got = sorted(out.glob("brotli-*.tar.gz"))
        src = got[-1]
    unpacked = out / src.name.removesuffix(".tar.gz")
    if not unpacked.is_dir():
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(src) as tar:
            tar.extractall(out, filter="data")
    return unpacked


def _compared(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(label, heapscope command) of each --compare, labelled by the --compare-name in the same place."""
    names = args.compare_name or []
    return [(names[i] if i < len(names) else f"before{i + 1 if i else ''}", other)
            for i, other in enumerate(args.compare or [])]


def _table(heads: list[str], rows: list[list[str]], markdown: bool) -> None:
    print()
    if markdown:
        print("| " + " | ".join(heads) + " |")
        print("|" + "---|" * len(heads))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    for row in [heads, *rows]:
        cells = zip(row, widths, strict=True)
        print("  ".join(cell.ljust(wd) if i == 0 else cell.rjust(wd) for i, (cell, wd) in enumerate(cells)))


LOOP_TARGET_MS = 1.0  # a short process adds at most this, wall
BUILD_TARGET_X = 1.10  # make -j2 of 100+ processes under record over plain


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--loop", type=int, default=200, help="short processes the shell starts")
    ap.add_argument("--heapscope", default=_heapscope_default(), help="the heapscope command to measure")
    ap.add_argument("--compare", action="append", metavar="HEAPSCOPE",
                    help="also measure this heapscope, interleaved (repeatable)")
    ap.add_argument("--compare-name", action="append", metavar="NAME",
                    help="the label of the --compare in the same place (default before, before2, ...)")
    ap.add_argument("--src", type=Path, help="brotli's sources: an unpacked sdist or its .tar.gz")
    ap.add_argument("--no-make", action="store_true", help="the loop only")
    ap.add_argument("--markdown", action="store_true", help="print the tables for RESULTS.md")
    ap.add_argument("--peers", action="store_true", help="also `heaptrack make` (it profiles make alone)")
    args = ap.parse_args(argv)
    tools = [("", args.heapscope), *((f" [{label}]", other) for label, other in _compared(args))]
    work = Path(tempfile.mkdtemp(prefix="hs-proctree-"))
    # Each heapscope a symbol cache of its own: one version's entries may be in a format another
    # reads as damaged (and symbolizes anew), which would time the cache's churn, not the build.
    env = {tag: dict(os.environ, XDG_CACHE_HOME=str(work / f"cache{i}")) for i, (tag, _hs) in enumerate(tools)}
    # name -> (argv, working directory, a build to clean first, the heapscope's tag)
    variants: dict[str, tuple[list[str], Path | None, bool, str]] = {
        "loop": (_loop(args.loop), None, False, ""), "no loop": (_loop(0), None, False, "")}
    for tag, hs in tools:
        variants[f"record loop{tag}"] = ([hs, "record", "-o", "{out}", "--", *_loop(args.loop)], None, False, tag)
        variants[f"record no loop{tag}"] = ([hs, "record", "-o", "{out}", "--", *_loop(0)], None, False, tag)
    src: Path | None = None
    if not args.no_make:

        src = brotli_sources(args.src)
        (src / "Makefile.heapscope").write_text(MAKEFILE)
        make = ["make", "-s", "-f", "Makefile.heapscope", "-j2"]
        variants["make"] = (make, src, True, "")
        for tag, hs in tools:
            variants[f"record make{tag}"] = ([hs, "record", "-o", "{out}", "--", *make], src, True, tag)
        # record writing nothing (no_profile.py): what any change to the profile could reach
        variants["no-profile make"] = ([*no_profile_argv([args.heapscope]), *make], src, True, "")
        if args.peers and shutil.which("heaptrack"):
            variants["heaptrack make"] = (["heaptrack", "-o", "{out}", *make], src, True, "")
    walls: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    procs: dict[str, int] = {}
    load_before = os.getloadavg()
    order = list(variants)
    rng = random.Random(13)
    try:
        for rnd in range(args.rounds + 1):  # round 0 warms the page cache and the symbol cache
            rng.shuffle(order)
            for name in order:
                argv, cwd, clean, tag = variants[name]
                if clean and cwd is not None:
                    shutil.rmtree(cwd / "build", ignore_errors=True)
                out = str(work / f"r{rnd}.db")
                wall, cpu = _run([a.replace("{out}", out) for a in argv], env[tag], cwd)
                if name not in procs and name.startswith("record"):
                    procs[name] = processes(Path(out))
                for f in (out, out + "-wal", out + "-shm", out + ".zst", out + ".gz"):
                    Path(f).unlink(missing_ok=True)
                if rnd > 0:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
            print(f"round {rnd} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if src is not None:
            shutil.rmtree(src / "build", ignore_errors=True)
    load_after = os.getloadavg()
    w = {k: statistics.median(v) * 1e3 for k, v in walls.items()}
    c = {k: statistics.median(v) * 1e3 for k, v in cpus.items()}
    print(f"{args.rounds} interleaved rounds, medians; {os.cpu_count()} cores; load average {load_before[0]:.1f}"
          f" before, {load_after[0]:.1f} after; {args.heapscope}"
          + "".join(f"; [{label}] = {other}" for label, other in _compared(args)))
    rows = [[f"`{name}`" if args.markdown else name, str(procs.get(name, "")), f"{w[name]:.1f}", f"{c[name]:.1f}"]
            for name in variants]
    _table(["command", "processes", "wall ms", "CPU ms"], rows, args.markdown)
    rows = []
    for tag, _hs in tools:
        per_w = ((w[f"record loop{tag}"] - w["loop"]) - (w[f"record no loop{tag}"] - w["no loop"])) / args.loop
        per_c = ((c[f"record loop{tag}"] - c["loop"]) - (c[f"record no loop{tag}"] - c["no loop"])) / args.loop
        row = [tag.strip(" []") or "this", f"{per_w:.2f}", f"{per_c:.2f}"]
        if not args.no_make:
            row += [f"{w[f'record make{tag}'] / w['make']:.2f}x", f"{c[f'record make{tag}'] / c['make']:.2f}x"]
            if tag:  # the same round's build under this heapscope over under the compared one
                row += [_paired(walls["record make"], walls[f"record make{tag}"]),
                        _paired(cpus["record make"], cpus[f"record make{tag}"])]
            else:
                row += ["", ""]
        rows.append(row)
    heads = ["heapscope", "added wall ms a process", "added CPU ms a process"]
    _table(heads + ([] if args.no_make else ["make -j2 wall", "make -j2 CPU", "this over it, wall (paired)",
                                             "this over it, CPU (paired)"]), rows, args.markdown)
    if "no-profile make" in w:
        print(f"\nheapscope writing no profile (no_profile.py): {w['no-profile make'] / w['make']:.2f}x wall, "
              f"{c['no-profile make'] / c['make']:.2f}x CPU")
    if "heaptrack make" in w:
        print(f"\nheaptrack make (make alone profiled): {w['heaptrack make'] / w['make']:.2f}x wall, "
              f"{c['heaptrack make'] / c['make']:.2f}x CPU")
    if args.markdown:
        _targets(rows[0], args.no_make)
    return 0


def _targets(this: list[str], no_make: bool) -> None:
    """The issue's targets for this heapscope (the first row of the per-process table)."""
    checks = [(f"a short process adds <= {LOOP_TARGET_MS:g} ms wall", f"{this[1]} ms",
               float(this[1]) <= LOOP_TARGET_MS)]
    if not no_make:
        checks.append((f"make -j2 <= {BUILD_TARGET_X:.2f}x wall", this[3],
                       float(this[3].rstrip("x")) <= BUILD_TARGET_X))
    _table(["target", "measured", "met"], [[n, m, "**met**" if ok else "**not met**"] for n, m, ok in checks], True)


def _paired(ours: list[float], theirs: list[float]) -> str:
    """The median over the rounds of ours / theirs in the same round, as a change, and in how
    many rounds ours was slower: interleaved rounds cancel what the machine did meanwhile."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b > 0]
    if not ratios:
        return ""
    return f"{(statistics.median(ratios) - 1) * 100:+.1f}% ({sum(r > 1 for r in ratios)} of {len(ratios)} slower)"


if __name__ == "__main__":
    sys.exit(main())
