"""Page faults in the target, per part, and what they cost it.

    python benchmarks/faults.py [--heapscope [LABEL=]CMD ...] [--python PY] [--rounds N] [--top N]
                                [--only true,objects,json,git,cc1plus] [--out DIR] [--no-perf]

For each target: `perf record -e page-faults -c 1 -g` of the target alone and under `heapscope
record` (default interval) of each build given (--heapscope, repeatable: before=/venv/a/bin/heapscope
after=/venv/b/bin/heapscope), then `perf report --sort comm,dso,sym`: the target's faults (its comm
only, so neither the producer nor the wrapper counts), in total and per symbol, and the symbols
whose faults grew the most. Then the target's own rusage (sys CPU, minor faults; native_targets.py's
wrapper, its child only) over N interleaved rounds, medians: the faults' cost is the target's
kernel time. Nothing is asserted; perf needs perf_event_paranoid <= 2 (user-space events of our own
processes).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as bench_run  # noqa: E402

# Runs argv[2:] as a child and writes the child's rusage to argv[1]: user s, sys s, minor faults,
# peak RSS in KiB. Under record this wrapper is profiled too, but only its child is counted. Spawned
# (glibc: clone with CLONE_VM | CLONE_VFORK, then exec), not forked: a fork child of a profiled Python
# process restarts the client (client/session.c, restart_in_child) before its exec, and its faults counted.
_WRAPPER = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{ru.ru_utime} {ru.ru_stime} {ru.ru_minflt} {ru.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
"""


def targets(out: Path, py: str, only: set[str]) -> list[tuple[str, str, list[str]]]:
    """(name, comm, argv) of each target asked for."""
    found: list[tuple[str, str, list[str]]] = []
    comm = Path(os.path.realpath(py)).name[:15]
    if "true" in only:
        found.append(("true", "true", ["/bin/true"]))
    if "objects" in only:
        found.append(("objects", comm, [py, str(HERE / "pyobjects.py"), "16", "22"]))
    if "json" in only:
        found.append(("json", comm, [py, str(HERE / "pywork.py"), "40000"]))
    if "git" in only and shutil.which("git"):
        repo = out / "gitrepo"
        bench_run.generate_git_repo(repo, 4000)
        found.append(("git", "git", ["git", "-C", str(repo), "--no-pager", "log", "-p"]))
    if "cc1plus" in only:
        cmd = bench_run.cc1plus_command(out, False)
        if cmd:
            found.append(("cc1plus", "cc1plus", cmd))
    return found


def faults_by_symbol(data: Path, comm: str) -> collections.Counter[str]:
    """The samples (one per fault) of `comm` in a perf.data, per `dso:symbol`."""
    rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none",
                          "--sort", "comm,dso,sym", "-F", "sample,comm,dso,sym", "--comm", comm],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    per: collections.Counter[str] = collections.Counter()
    for line in rep.splitlines():
        parts = line.split()
        if not parts or line.startswith("#") or not parts[0].isdigit():
            continue
        # samples, dso, [.] or [k], symbol... (no comm column: --comm filters by it)
        dso = parts[1]
        sym = " ".join(parts[3:]) if len(parts) > 3 else "?"
        per[f"{dso}:{sym}"] += int(parts[0])
    return per


def perf_faults(out: Path, argv: list[str], comm: str, hs: list[str] | None) -> collections.Counter[str]:
    data = out / "faults.perf.data"
    db = out / "faults.db"
    cmd = argv if hs is None else [*hs, "record", "-q", "--no-symbolize", "-o", str(db), "--", *argv]
    db.unlink(missing_ok=True)
    subprocess.run(["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-g", "-o", str(data), "--", *cmd],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900, cwd=out)
    return faults_by_symbol(data, comm)


def rusage_rows(out: Path, name: str, argv: list[str], builds: dict[str, list[str]], rounds: int) -> None:
    """The target's own user and sys CPU, minor faults (page faults taken, and pages a
    MADV_POPULATE_WRITE filled: rusage counts both, perf only the first) and peak RSS, alone and
    under record with each build, over interleaved rounds: medians, and every round's sys."""
    res: dict[str, list[list[float]]] = {"plain": [], **{b: [] for b in builds}}
    ru, db = out / f"faults.{name}.rusage", out / f"faults.{name}.db"
    for _ in range(rounds):
        for kind in res:
            inner = [sys.executable, "-c", _WRAPPER, str(ru), *argv]
            cmd = inner if kind == "plain" else [*builds[kind], "record", "-q", "--no-symbolize", "-o", str(db),
                                                 "--", *inner]
            db.unlink(missing_ok=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900, cwd=out)
            res[kind].append([float(x) for x in ru.read_text().split()])
    for kind, rows in res.items():
        med = [sorted(r[i] for r in rows)[len(rows) // 2] for i in range(4)]
        every = ", ".join(f"{r[1] * 1000:.0f}" for r in rows)
        print(f"{name} {kind:6}: user {med[0]:.3f} s, sys {med[1] * 1000:.1f} ms, minor faults {med[2]:,.0f},"
              f" peak RSS {med[3] / 1024:.1f} MiB  [sys ms: {every}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heapscope", action="append", metavar="[LABEL=]CMD",
                    help="a heapscope command (default: the one on PATH); give several to compare builds")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the Python targets")
    ap.add_argument("--only", default="true,objects,json,git,cc1plus")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--no-perf", action="store_true", help="rusage rounds only")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    builds: dict[str, list[str]] = {}
    for i, spec in enumerate(args.heapscope or [shutil.which("heapscope") or "heapscope"]):
        label, _, cmd = spec.rpartition("=") if "=" in spec.split()[0] else (f"prof{i or ''}", "", spec)
        builds[label] = cmd.split()
    for name, comm, argv in targets(args.out, args.python, set(args.only.split(","))):
        if not args.no_perf:
            with tempfile.TemporaryDirectory(dir=args.out) as tmp:
                plain = perf_faults(Path(tmp), argv, comm, None)
                print(f"{name}: target faults {sum(plain.values()):,} alone")
                for label, hs in builds.items():
                    prof = perf_faults(Path(tmp), argv, comm, hs)
                    grew = {k: prof[k] - plain.get(k, 0) for k in prof}
                    total = sum(prof.values())
                    print(f"  {label}: {total:,} under record (+{total - sum(plain.values()):,})")
                    for k, v in sorted(grew.items(), key=lambda kv: -kv[1])[:args.top]:
                        print(f"    {v:+7,}  {k}  ({plain.get(k, 0):,} -> {prof[k]:,})")
        rusage_rows(args.out, name, argv, builds, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
