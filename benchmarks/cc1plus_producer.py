"""The producer's CPU on cc1plus: `heapscope record` of the cc1plus run.py measures.

    python benchmarks/cc1plus_producer.py [--rounds 5] [--heapscope [LABEL=]CMD ...] [--profile-dir DIR]
                                          [--record-args ARGS]

Runs, round by round, `record -- /bin/true` and `record -- cc1plus ...` (run.py's
cc1plus_command: <bits/stdc++.h> with -fsyntax-only) and prints per run the producer's
CPU (the profile's producer_cpu_ns stat), its peak RSS, the records drained, the target's
wall (target_wall_ns) and the whole command's wall; then the medians, the net producer CPU
(cc1plus less /bin/true) and the headroom run.py reports as run.py computes it (records per
second of net producer CPU over records per second of the target's run under `record`); a
bare cc1plus run each round gives the unprofiled CPU for reference. Several --heapscope (two
installs, say) run interleaved round by round. Wall figures are noisy on a shared machine: prefer
CPU.
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
sys.path.insert(0, str(HERE))

from run import cc1plus_command  # noqa: E402


def _stats(profile: Path) -> dict[str, int]:
    db = sqlite3.connect(profile)
    try:
        out = {str(n): int(v) for n, v in db.execute(
            "SELECT name, SUM(value) FROM stats WHERE name IN ('producer_cpu_ns', 'producer_peak_rss_bytes',"
            " 'heap_samples', 'frees') GROUP BY name")}
        for key in ("target_wall_ns",):
            row = db.execute("SELECT value FROM heapscope_metadata WHERE key = ?", (key,)).fetchone()
            out[key] = int(row[0]) if row else 0
        out["callsites"] = int(db.execute("SELECT COUNT(*) FROM stack_profile_callsite").fetchone()[0])
        return out
    finally:
        db.close()


def _record(hs: list[str], target: list[str], profile: Path, cwd: Path, extra: list[str]) -> dict[str, float] | None:
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing can block on it
        t0 = time.perf_counter()
        proc = subprocess.Popen([*hs, "record", *extra, "-o", str(profile), "--force", "--", *target],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if status != 0:
            err.seek(0)
            print(err.read().decode(errors="replace"), file=sys.stderr)
            return None
    st = _stats(profile)
    return {"producer_cpu_s": st.get("producer_cpu_ns", 0) / 1e9,
            "rss_mib": st.get("producer_peak_rss_bytes", 0) / 2**20,
            "records": st.get("heap_samples", 0) + st.get("frees", 0),
            "callsites": st["callsites"], "target_wall_s": st["target_wall_ns"] / 1e9,
            "wall_s": wall, "tree_cpu_s": usage.ru_utime + usage.ru_stime,
            "after_exit_s": wall - st["target_wall_ns"] / 1e9}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--heapscope", action="append", default=[],
                    help="[LABEL=]command, repeatable (default: this interpreter's -m heapscope)")
    ap.add_argument("--profile-dir", default=None, help="keep the profiles here (default: a temp dir)")
    ap.add_argument("--record-args", default="", help="more options of `record` (say --no-symbolize)")
    args = ap.parse_args()
    tools: dict[str, list[str]] = {}
    for spec in args.heapscope or [f"{sys.executable} -m heapscope"]:
        label, _, cmd = spec.partition("=") if "=" in spec.split(" ")[0] else ("", "", spec)
        tools[label or f"#{len(tools) + 1}"] = shlex.split(cmd)
    tmp = Path(args.profile_dir or tempfile.mkdtemp(prefix="cc1plus-producer-"))
    tmp.mkdir(parents=True, exist_ok=True)
    cc1 = cc1plus_command(tmp, quick=False)
    if cc1 is None:
        print("g++'s cc1plus not found", file=sys.stderr)
        return 1
    print(f"load average before: {os.getloadavg()}")
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    bare: list[float] = []
    for r in range(args.rounds):
        proc = subprocess.Popen(cc1, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=tmp)
        _pid, _status, usage = os.wait4(proc.pid, 0)
        bare.append(usage.ru_utime + usage.ru_stime)
        order = list(tools.items())
        order = order[r % len(order):] + order[:r % len(order)]  # rotate: drift hits every install alike
        for label, hs in order:
            for name, target in (("true", ["/bin/true"]), ("cc1plus", cc1)):
                row = _record(hs, target, tmp / f"{label}-{name}-{r}.hsprof", tmp, shlex.split(args.record_args))
                if row is None:
                    return 1
                rows.setdefault((label, name), []).append(row)
                print(f"{label} {name:8} round {r}: " + "  ".join(
                    f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(f"unprofiled cc1plus CPU: median {statistics.median(bare):.3f} s")
    for label in tools:
        med = {name: {k: statistics.median(x[k] for x in rows[(label, name)]) for k in rows[(label, name)][0]}
               for name in ("true", "cc1plus")}
        for name, m in med.items():
            print(f"{label} median {name:8}: " + "  ".join(f"{k} {v:.3f}" for k, v in m.items()))
        net = med["cc1plus"]["producer_cpu_s"] - med["true"]["producer_cpu_s"]
        print(f"{label} net producer CPU (cc1plus - /bin/true): {net:.3f} s for {med['cc1plus']['records']:.0f}"
              " records")
        if net > 0:
            # run.py's headroom: (records / net producer CPU) / (records / the target's wall under record)
            wall = med["cc1plus"]["target_wall_s"]
            print(f"{label} headroom (run.py's): target wall {wall:.3f} s / net producer CPU {net:.3f} s"
                  f" = {wall / net:.1f}x; against the unprofiled CPU {statistics.median(bare) / net:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
