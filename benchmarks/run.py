"""Overhead of `heapscope record` next to heaptrack and memray, in one run.

    python benchmarks/run.py [--quick] [--rounds N] [--heapscope CMD] [--memray CMD]

Every (workload, tool) pair runs once per round; rounds are interleaved and the
order of the tools rotates from round to round, so drift of the machine hits every
tool alike. Reported numbers are medians over rounds, ratios are against the
unprofiled run of the same command in the same round set:

  target wall x   heapscope only: the target's own run time (spawn to exit, measured by
                  heapscope), without its start-up and post-processing (symbolization)
  wall x, cpu x   wall time and user+sys CPU of the whole process tree (target,
                  and the profiler's own processes; wait4 rusage via measure.c)
  peak RSS        ru_maxrss of that tree: the largest single process in it
                  (target or profiler process, whichever is bigger; not separable
                  for heaptrack and heapscope from outside)
  profile         size of the file the tool wrote
  samples/s etc.  what heapscope's `stats` table says (every stat is printed)

memray profiles Python processes only: it runs on the `pyhost` workloads (a Python
host calling the same C workload via ctypes) and `python-json`, and is n/a for the
other native programs. Nothing here asserts on time: tests never time things.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


# --- building the workloads -------------------------------------------------------


def build_native(out: Path) -> tuple[Path, Path]:
    exe, lib = out / "alloc_bench", out / "liballoc_bench.so"
    src = HERE / "alloc_bench.c"
    common = ["-O2", "-g", "-pthread", "-Wall"]
    subprocess.run(["cc", "-O2", "-Wall", "-o", str(out / "measure"), str(HERE / "measure.c")], check=True)
    subprocess.run(["cc", *common, "-o", str(exe), str(src)], check=True)
    subprocess.run(
        ["cc", *common, "-shared", "-fPIC", "-DALLOC_BENCH_LIBRARY", "-o", str(lib), str(src)], check=True
    )
    return exe, lib


def generate_c_file(path: Path, functions: int) -> None:
    """A big C translation unit with no #include: work for cc1's optimizer."""
    parts = []
    for i in range(functions):
        parts.append(
            f"""
struct s{i} {{ int a, b; long c[8]; }};
static long helper{i}(struct s{i} *p, int n) {{
  long acc = {i};
  for (int k = 0; k < n; k++) {{
    switch ((k + p->a) % 7) {{
      case 0: acc += p->c[k % 8] * {i % 13 + 1}; break;
      case 1: acc ^= (acc << 3) + p->b; break;
      case 2: acc -= k * {i % 5 + 2}; break;
      case 3: p->c[(k + 1) % 8] = acc; break;
      case 4: acc = acc * 31 + {i}; break;
      default: acc += (long)k * k;
    }}
  }}
  return acc;
}}
long entry{i}(int n) {{ struct s{i} v = {{n, n + 1, {{0}}}}; return helper{i}(&v, n) + helper{i}(&v, n / 2); }}
"""
        )
    path.write_text("".join(parts))


def sqlite_script(path: Path, rows: int) -> None:
    path.write_text(
        f"""
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, score INTEGER, blob BLOB);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
INSERT INTO t SELECT x, 'name' || x, abs(random()) % 100000, randomblob(32) FROM c;
COMMIT;
CREATE INDEX t_score ON t(score);
SELECT count(*), sum(length(name)) FROM (SELECT name FROM t ORDER BY name DESC);
SELECT score % 100 AS k, count(*) FROM t GROUP BY k ORDER BY 2 DESC LIMIT 3;
"""
    )


@dataclass
class Workload:
    name: str
    argv: list[str]
    stdin: Path | None = None
    python: bool = False  # a Python process: memray can profile it
    script: list[str] = field(default_factory=list)  # for memray: script + args


def workloads(quick: bool, out: Path) -> list[Workload]:
    exe, lib = build_native(out)
    ops = 1_000_000 if quick else 3_000_000
    big_c = out / "big.c"
    generate_c_file(big_c, 300 if quick else 1500)
    sql = out / "work.sql"
    sqlite_script(sql, 200_000 if quick else 1_000_000)
    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True, check=True).stdout.strip()
    py = sys.executable
    found: list[Workload] = [
        Workload("synth 1 thread", [str(exe), "1", str(ops)]),
        Workload("synth 4 threads", [str(exe), "4", str(ops)]),
        Workload("synth 1 thread, pyhost", [py, str(HERE / "pyhost.py"), str(lib), "1", str(ops)], python=True,
                 script=[str(HERE / "pyhost.py"), str(lib), "1", str(ops)]),
        Workload("synth 4 threads, pyhost", [py, str(HERE / "pyhost.py"), str(lib), "4", str(ops)], python=True,
                 script=[str(HERE / "pyhost.py"), str(lib), "4", str(ops)]),
        Workload("cc1 -O2 (gcc)", [cc1, "-quiet", "-O2", str(big_c), "-o", str(out / "big.s")]),
        Workload("python3 json", [py, str(HERE / "pywork.py"), str(50_000 if quick else 200_000)], python=True,
                 script=[str(HERE / "pywork.py"), str(50_000 if quick else 200_000)]),
    ]
    if shutil.which("sqlite3"):
        found.insert(5, Workload("sqlite3 inserts+sort", ["sqlite3", ":memory:"], stdin=sql))
    return found


# --- tools ------------------------------------------------------------------------


@dataclass
class Tool:
    name: str

    def argv(self, w: Workload, profile: Path) -> list[str] | None:
        raise NotImplementedError

    def profile_files(self, profile: Path) -> list[Path]:
        return [p for p in profile.parent.glob(profile.name + "*") if p.is_file()]


class Unprofiled(Tool):
    def argv(self, w, profile):
        return w.argv


class Heapscope(Tool):
    def __init__(self, cmd: list[str]) -> None:
        super().__init__("heapscope")
        self.cmd = cmd

    def argv(self, w, profile):
        return [*self.cmd, "record", "-o", str(profile), "--", *w.argv]


class Heaptrack(Tool):
    def argv(self, w, profile):
        return ["heaptrack", "-o", str(profile), *w.argv]


class Memray(Tool):
    def __init__(self, cmd: list[str], native: bool) -> None:
        super().__init__("memray --native" if native else "memray")
        self.cmd, self.native = cmd, native

    def argv(self, w, profile):
        if not w.python:
            return None
        return [*self.cmd, "run", "-q", "-f", "-o", str(profile), *(["--native"] if self.native else []), *w.script]


# --- measuring --------------------------------------------------------------------


@dataclass
class Sample:
    wall: float
    cpu: float
    maxrss_kib: int
    status: int
    profile_bytes: int
    stats: dict[str, int]
    target_wall: float | None = None  # heapscope: spawn to exit of the target only


def run_once(argv: list[str], stdin: Path | None, tool: Tool, profile: Path, work_dir: Path) -> Sample:
    """One timed run under `measure` (see measure.c), which reports the tree's rusage."""
    for old in tool.profile_files(profile):
        old.unlink()
    usage = work_dir / "rusage.txt"
    usage.unlink(missing_ok=True)
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as stdin_f:
        t0 = time.perf_counter()
        proc = subprocess.run([str(work_dir / "measure"), str(usage), *argv], stdin=stdin_f,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - t0
    utime, stime, maxrss = usage.read_text().split() if usage.exists() else ("nan", "nan", "0")
    files = tool.profile_files(profile)
    stats, target_wall = (heapscope_readout(profile) if isinstance(tool, Heapscope) and profile.exists()
                          else ({}, None))
    if proc.returncode != 0:
        sys.stderr.write(f"[{tool.name}] exit {proc.returncode}: {' '.join(argv)}\n")
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:] + "\n")
    return Sample(wall, float(utime) + float(stime), int(maxrss), proc.returncode,
                  sum(f.stat().st_size for f in files), stats, target_wall)


def heapscope_readout(db: Path) -> tuple[dict[str, int], float | None]:
    """The profile's stats summed by name, and the target's own run time in seconds."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT name, SUM(value) FROM stats GROUP BY name ORDER BY name").fetchall()
            wall = con.execute("SELECT value FROM heapscope_metadata WHERE key = 'target_wall_ns'").fetchone()
        finally:
            con.close()
    except sqlite3.Error as e:
        return {f"(stats unreadable: {e})": 0}, None
    return {name: int(v) for name, v in rows}, int(wall[0]) / 1e9 if wall else None


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def fmt_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def machine() -> str:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs ({model or platform.processor()}), Linux {platform.release()}, "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, smaller inputs")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5, --quick 1)")
    parser.add_argument("--heapscope", default=None, help="heapscope command (default: on PATH, else python -m)")
    parser.add_argument("--memray", default=None, help="memray command (default: on PATH, else python -m memray)")
    parser.add_argument("--only", default=None, help="run only workloads whose name contains this")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)

    OUT.mkdir(exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="run-", dir=OUT))
    heapscope_cmd = args.heapscope.split() if args.heapscope else (
        [shutil.which("heapscope")] if shutil.which("heapscope") else [sys.executable, "-m", "heapscope"])
    tools: list[Tool] = [Unprofiled("none"), Heapscope(heapscope_cmd)]
    if shutil.which("heaptrack"):
        tools.append(Heaptrack("heaptrack"))
    memray_cmd = args.memray.split() if args.memray else (
        [shutil.which("memray")] if shutil.which("memray") else [sys.executable, "-m", "memray"])
    if subprocess.run([*memray_cmd, "--version"], capture_output=True).returncode == 0:
        tools += [Memray(memray_cmd, native=False), Memray(memray_cmd, native=True)]
    else:
        print(f"memray not runnable as {' '.join(memray_cmd)}: memray columns are n/a", file=sys.stderr)

    loads = [w for w in workloads(args.quick, work_dir) if not args.only or args.only in w.name]
    results: dict[tuple[str, str], list[Sample]] = {}
    for r in range(rounds):
        order = tools[r % len(tools):] + tools[: r % len(tools)]
        for w in loads:
            for tool in order:
                cmd = tool.argv(w, work_dir / f"profile-{tool.name.replace(' ', '')}")
                if cmd is None:
                    continue
                sample = run_once(cmd, w.stdin, tool, work_dir / f"profile-{tool.name.replace(' ', '')}", work_dir)
                results.setdefault((w.name, tool.name), []).append(sample)
                print(f"round {r + 1}/{rounds} {w.name:26} {tool.name:16} {sample.wall:7.2f}s "
                      f"exit {sample.status}", file=sys.stderr)

    print(f"\nMachine: {machine()}; {rounds} round(s), medians.\n")
    print("| workload | tool | wall | wall x | target wall x | cpu x | peak RSS | profile | heapscope samples/s | "
          "heapscope blocked / drops |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    stats_lines = []
    for w in loads:
        base = results.get((w.name, "none"))
        base_wall = statistics.median(s.wall for s in base) if base else None
        base_cpu = statistics.median(s.cpu for s in base) if base else None
        for tool in tools:
            samples = results.get((w.name, tool.name))
            if not samples:
                print(f"| {w.name} | {tool.name} | n/a | n/a | n/a | n/a | n/a | n/a | | |")
                continue
            failed = [s.status for s in samples if s.status != 0]
            if failed:
                print(f"| {w.name} | {tool.name} (FAILED: exit {failed[0]} in {len(failed)}/{len(samples)} runs) "
                      "| n/a | n/a | n/a | n/a | n/a | n/a | | |")
                continue
            wall = statistics.median(s.wall for s in samples)
            cpu = statistics.median(s.cpu for s in samples)
            rss = statistics.median(s.maxrss_kib for s in samples) * 1024
            size = statistics.median(s.profile_bytes for s in samples)
            sps = blocked = ""
            target_walls = [s.target_wall for s in samples if s.target_wall is not None]
            target_x = (statistics.median(target_walls) / base_wall
                        if target_walls and base_wall else None)
            last = samples[-1].stats
            if isinstance(tool, Heapscope):
                n = last.get("heap_samples")
                sps = f"{n / wall:,.0f}" if n is not None else "no heap_samples stat"
                blocked_keys = [k for k in last if "block" in k]
                drop_keys = [k for k in last if "drop" in k or "lost" in k or "overran" in k]
                blocked = ", ".join(f"{k}={last[k]}" for k in blocked_keys + drop_keys) or "-"
                stats_lines.append(f"- {w.name}: " + ", ".join(f"{k}={v}" for k, v in last.items()))
            print(f"| {w.name} | {tool.name} | {wall:.2f}s | "
                  f"{fmt_ratio(wall / base_wall if base_wall and tool.name != 'none' else None)} | "
                  f"{fmt_ratio(target_x)} | "
                  f"{fmt_ratio(cpu / base_cpu if base_cpu and tool.name != 'none' else None)} | "
                  f"{fmt_size(rss)} | {fmt_size(size) if size else '-'} | {sps} | {blocked} |")
    if stats_lines:
        print("\nheapscope `stats` (last round, summed over processes):")
        print("\n".join(stats_lines))
    shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
