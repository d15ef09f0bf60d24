"""The fixed cost of `heapscope record`: the whole command around a program that does nothing.

    python benchmarks/fixed_cost.py [--rounds 31] [--heapscope PATH] [--markdown]
    python benchmarks/fixed_cost.py --split [--rounds 31] [--compare PATH [--compare-name NAME]]...

Runs, interleaved round by round (so a busy spell of a shared machine hits
every variant alike), each of:

    /bin/true                                            the unprofiled program
    heapscope --version                                  interpreter + CLI start-up
    heapscope record -o X -- /bin/true                   the whole command, symbolized
    heapscope record --no-symbolize -o X -- /bin/true
    heapscope record -o X -- /bin/true, empty cache      first run on a machine (fresh XDG_CACHE_HOME)
    ls -l /usr/bin                                       a short real program
    heapscope record -i 1 -o X -- ls -l /usr/bin         every allocation sampled: frames to symbolize
    the same with an empty symbol cache

and prints, per variant, the median wall time and the median CPU time
(user + system of the command and all its children, from wait4's rusage),
and both minus the unprofiled program's: the added cost. /bin/true makes
no allocation the sampler picks (no frame to symbolize); `ls` at interval 1
has a few hundred frames in ls, libc and ld.so, so its rows show what
symbolization costs with the per-user symbol cache warm and empty. Wall time is what the fixed-cost
target (<= 50 ms over the unprofiled program) is about; CPU time is the
steadier figure on a machine shared with other work. Each command writes a
fresh profile (no --force: that would read the old one first), removed
after the round. The load average before and after is printed: say in
RESULTS.md that the machine was shared.

--split times where the added cost is spent around a target that prints the
time: `heapscope record -q -o X -- /bin/date +%s.%N` against `/bin/date
+%s.%N` alone, interleaved. The date the target prints (CLOCK_REALTIME, at
its main) splits each run into "command start -> target's main" (heapscope's
start-up, the spawn and the client's handshake) and "target's main -> command's
end" (the target's exit, heapscope's final dumps, symbolization, summary);
the rows give their medians, and the same minus the unprofiled /bin/date's.
With --long the target is a shell that runs `ls -l /usr/bin` (frames to
symbolize), idles 0.3 s, then execs the date: its "target -> end" is the
time a recording of a longer program adds after the program's end, once the
loop has had idle time to prepare the end.
With --parent-cpu the target (a shell) first reads its parent's CPU time so far
(/proc/PPID/schedstat, in ns: heapscope's own, whatever the machine's load),
then runs the date; the rows add its median (the plain run's parent is this
script: its column means nothing). It is heapscope's CPU up to its answer to
the shell's handshake, plus what heapscope did meanwhile in parallel while the
shell started (since the early start, its imports): an upper bound of
the CPU on the target's path.

--busy N keeps N busy loops running (one Python process each, started before
the first round and ended after the last) to show the cost on a busy machine:
N = the number of cores makes every command share its CPU with a loop.

Use an installed heapscope (`pip install .`), not an editable one: an
editable install checks its build tree with ninja on every start (~30 ms);
the script warns when it sees one.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from self_cpu import interpreter_of  # benchmarks/ (run from there)

TARGET = "/bin/true"


def _heapscope_default() -> str:
    beside = Path(sys.executable).with_name("heapscope")
    return str(beside) if beside.is_file() else (shutil.which("heapscope") or "heapscope")


class Busy:
    """N busy loops, started on entry and ended on exit (each by its own pid)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Busy:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        return self  # their own start-up falls in round 0, the warm-up, whose figures are not kept

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()

    def said(self) -> str:
        return f"; {self.n} busy loop(s) running" if self.n else ""


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of the command and its children) of one run, which must succeed."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing can block on it while we wait
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)}: exit status {proc.returncode}\n{err.read().decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def _run_dated(argv: list[str], env: dict[str, str]) -> tuple[float, ...]:
    """(ms from before the spawn to the date the command printed, ms from that date to after
    the command's exit, CPU ms of the command and its children[, the parent's CPU ms the target
    printed first]) of one run."""
    with tempfile.TemporaryFile() as out:
        t0 = time.time()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)
        _pid, status, usage = os.wait4(proc.pid, 0)
        t1 = time.time()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(argv)}: exit status {os.waitstatus_to_exitcode(status)}")
        out.seek(0)
        words = out.read().decode().split()
        printed = float(words[-1])
    parent = (float(words[0]) / 1e6,) if len(words) > 3 else ()  # schedstat: ns on the CPU, ...
    return (printed - t0) * 1e3, (t1 - printed) * 1e3, (usage.ru_utime + usage.ru_stime) * 1e3, *parent


def _split(args: argparse.Namespace) -> int:
    """--split: start -> target's main and target's main -> end, profiled vs plain /bin/date."""
    work = Path(tempfile.mkdtemp(prefix="hs-fixed-cost-"))
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    date = ["/bin/date", "+%s.%N"]
    if args.long:
        date = ["/bin/sh", "-c", "ls -l /usr/bin >/dev/null; sleep 0.3; exec /bin/date +%s.%N"]
    elif args.parent_cpu:
        date = ["/bin/sh", "-c", "read -r cpu rest < /proc/$PPID/schedstat; echo $cpu $rest; exec /bin/date +%s.%N"]
    plain = "sh -c 'ls; sleep 0.3; date'" if args.long else "sh -c 'parent CPU; date'" if args.parent_cpu \
        else "/bin/date"
    variants: dict[str, list[str]] = {plain: date,
                                      "record": [args.heapscope, "record", "-q", "-o", "{out}", "--", *date]}
    # Each heapscope its own symbol cache: versions whose cache formats differ would rewrite each
    # other's entries every round and time the churn.
    envs = {name: env for name in variants}
    for label, other in _compared(args):
        variants[f"record [{label}]"] = [other, *variants["record"][1:]]
        envs[f"record [{label}]"] = dict(env, XDG_CACHE_HOME=str(work / f"cache-{label}"))
    figures: dict[str, list[tuple[float, ...]]] = {k: [] for k in variants}
    order = list(variants)
    rng = random.Random(13)
    try:
        with Busy(args.busy) as busy:
            load_before = os.getloadavg()
            for rnd in range(args.rounds + 1):
                rng.shuffle(order)
                for name in order:
                    out = str(work / f"r{rnd}.db")
                    got = _run_dated([a.replace("{out}", out) for a in variants[name]], envs[name])
                    Path(out).unlink(missing_ok=True)
                    if rnd > 0:
                        figures[name].append(got)
            load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.rounds} interleaved rounds, medians; load average {load_before[0]:.1f} before,"
          f" {load_after[0]:.1f} after{busy.said()}; {args.heapscope}"
          + "".join(f"; [{label}] = {other}" for label, other in _compared(args)))
    base = [statistics.median(col) for col in zip(*figures[plain], strict=True)]
    extra = " heapscope CPU ms at the target's start |" if args.parent_cpu else ""
    print("| command | start -> target ms | added | target -> end ms | added | CPU ms | added |" + extra)
    print("|---|---|---|---|---|---|---|" + ("---|" if extra else ""))
    for name, rows in figures.items():
        med = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(f"| `{name}` | {med[0]:.1f} | {med[0] - base[0]:+.1f} | {med[1]:.1f} | {med[1] - base[1]:+.1f}"
              f" | {med[2]:.1f} | {med[2] - base[2]:+.1f} |" + (f" {med[3]:.1f} |" if extra else ""))
    return 0


def _compared(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(label, heapscope command) of each --compare, labelled by the --compare-name in the same place."""
    names = args.compare_name or []
    return [(names[i] if i < len(names) else f"before{i + 1 if i else ''}", other)
            for i, other in enumerate(args.compare or [])]


def _editable(heapscope: str) -> bool:
    found = interpreter_of(heapscope)
    if found is None:
        return False
    try:
        out = subprocess.run([*found[0], "-c", "import heapscope; print(heapscope.__file__)"], capture_output=True,
                             text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "/site-packages/" not in out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--heapscope", default=_heapscope_default(), help="the heapscope command to measure")
    ap.add_argument("--no-cold", action="store_true", help="skip the empty-symbol-cache variant")
    ap.add_argument("--markdown", action="store_true", help="print a table for RESULTS.md")
    ap.add_argument("--compare", action="append", metavar="HEAPSCOPE",
                    help="also measure this heapscope, interleaved (repeatable)")
    ap.add_argument("--compare-name", action="append", metavar="NAME",
                    help="the label of the --compare in the same place (default before, before2, ...)")
    ap.add_argument("--split", action="store_true",
                    help="time start -> target and target -> end around /bin/date instead")
    ap.add_argument("--long", action="store_true", help="with --split: a target that allocates, idles, then dates")
    ap.add_argument("--parent-cpu", action="store_true",
                    help="with --split: the target prints heapscope's CPU time at its start first")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="keep N busy loops running during the rounds (a busy machine; N = cores: every CPU shared)")
    args = ap.parse_args()
    hs = args.heapscope
    if _editable(hs):
        print(f"warning: {hs} is an editable install: its start-up includes a ninja check of the build tree",
              file=sys.stderr)
    if args.split:
        return _split(args)
    work = Path(tempfile.mkdtemp(prefix="hs-fixed-cost-"))
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(work / "cache")  # the warm cache: filled by the warm-up round
    ls = ["ls", "-l", "/usr/bin"]
    # name -> (argv, the unprofiled program it adds to, with a fresh XDG_CACHE_HOME each round)
    variants: dict[str, tuple[list[str], str, bool]] = {
        "/bin/true": ([TARGET], "/bin/true", False),
        "heapscope --version": ([hs, "--version"], "/bin/true", False),
        "record": ([hs, "record", "-o", "{out}", "--", TARGET], "/bin/true", False),
        "record --no-symbolize": ([hs, "record", "--no-symbolize", "-o", "{out}", "--", TARGET], "/bin/true", False),
        "ls -l /usr/bin": (ls, "ls -l /usr/bin", False),
        "record -i 1 -- ls": ([hs, "record", "-i", "1", "-o", "{out}", "--", *ls], "ls -l /usr/bin", False),
    }
    if not args.no_cold:
        variants["record, empty symbol cache"] = (variants["record"][0], "/bin/true", True)
        variants["record -i 1 -- ls, empty cache"] = (variants["record -i 1 -- ls"][0], "ls -l /usr/bin", True)
    ours = [n for n in variants if n.startswith(("heapscope", "record"))]
    # Each heapscope its own warm symbol cache: versions whose cache formats differ would rewrite
    # each other's entries every round and time the churn.
    envs = {name: env for name in variants}
    for label, other in _compared(args):  # other heapscopes (say the previous commit's) in the same rounds
        for name in ours:
            argv, base, cold = variants[name]
            variants[f"{name} [{label}]"] = ([other, *argv[1:]], base, cold)
            envs[f"{name} [{label}]"] = dict(env, XDG_CACHE_HOME=str(work / f"cache-{label}"))
    walls: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants)
    rng = random.Random(13)
    try:
        with Busy(args.busy) as busy:
            load_before = os.getloadavg()
            for rnd in range(args.rounds + 1):  # round 0 warms the page cache and the symbol cache
                rng.shuffle(order)
                for name in order:
                    out = str(work / f"r{rnd}.db")
                    argv, _base, cold = variants[name]
                    run_env = dict(env, XDG_CACHE_HOME=str(work / f"cold{rnd}-{len(walls[name])}-"
                                                                   f"{abs(hash(name))}")) if cold else envs[name]
                    wall, cpu = _run([a.replace("{out}", out) for a in argv], run_env)
                    Path(out).unlink(missing_ok=True)
                    if rnd > 0:
                        walls[name].append(wall)
                        cpus[name].append(cpu)
            load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name, (_argv, base, _cold) in variants.items():
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        base_w, base_c = statistics.median(walls[base]), statistics.median(cpus[base])
        rows.append((name, w * 1e3, (w - base_w) * 1e3, c * 1e3, (c - base_c) * 1e3))
    cores = os.cpu_count()
    print(f"{args.rounds} interleaved rounds, medians; {cores} cores; load average {load_before[0]:.1f} before,"
          f" {load_after[0]:.1f} after (a shared machine when well above 0){busy.said()}; {hs}"
          + "".join(f"; [{label}] = {other}" for label, other in _compared(args)))
    if args.markdown:
        print("| command | wall ms | added wall ms | CPU ms | added CPU ms |")
        print("|---|---|---|---|---|")
        for name, w, dw, c, dc in rows:
            print(f"| `{name}` | {w:.1f} | {dw:+.1f} | {c:.1f} | {dc:+.1f} |")
    else:
        print(f"{'command':34} {'wall ms':>8} {'added':>8} {'CPU ms':>8} {'added':>8}")
        for name, w, dw, c, dc in rows:
            print(f"{name:34} {w:8.1f} {dw:+8.1f} {c:8.1f} {dc:+8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
