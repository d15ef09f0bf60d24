"""Overhead of `heapscope record` next to heaptrack and memray, in one run: the tables of RESULTS.md.

    python benchmarks/run.py [--quick] [--rounds N] [--sections overhead,python,fleet,trees,pyperf,reading]
                             [--only TEXT]... [--heapscope CMD] [--bench-venv DIR]
                             [--taskset CPUS] [--interval BYTES] [--no-peers]

One command regenerates the overhead tables of benchmarks/RESULTS.md and prints them as
markdown, each with the targets it checks and whether they are met:

  overhead  synthetic 1 thread at ~1.1 M samples/s (and the older 165 k/s one),
            2 threads on 2 cores, CPython json, CPython dicts with PYTHONMALLOC=malloc,
            sqlite3 inserts + sort, cc1plus -fsyntax-only of the libstdc++ headers,
            `git log -p` of a generated 4,000-commit history, cc1 -O2 of a generated file (a run of >= 10 s),
            and `record -- /bin/true` (the fixed cost); heapscope vs heaptrack (and memray
            where the target is a Python process)
  python    json, dict/set building, a small object-heavy program and a
            pip-installed pure-Python library (Python-Markdown) doing real work; heapscope
            (default interval, Python frames on) vs `memray run`, `--native` and
            `--trace-python-allocators`; profile sizes and sampled peaks compared (whole, and
            like for like: the script's own bytes at the peak, benchmarks/peak_split.py)
  onecore   the overhead table's synthetic and real programs again, every command under `taskset -c 0`
  alwayson  the same at `record -i 512k` (the two settings below, heapscope alone)
  fleet     benchmarks/fleet.py --overhead (`--serve` with a scraper polling every
            second and `--push` every 10 s against a plain recording), bytes per pushed
            profile, rows/s into chDB
  trees     benchmarks/proctree.py: a shell starting /bin/true 200 times (the ms each short process
            adds) and `make -j2` of brotli's C sources (~113 processes), beside `heaptrack make`
  pyperf    benchmarks/pyperf_table.py (rounds halved): Scalene's Table 3 benchmarks of pyperformance,
            a pandas/numpy job, black and a json/dict service under heapscope, memray (and
            --native), Fil, Scalene --memory and memory_profiler
  reading   report, leaks, flamegraph, diff and every export of a recorded build (the read targets),
            and each tool's own reader on its profile of cc1plus (heaptrack) and python json (memray)
            (benchmarks/run_scripts.py runs these three)

Two settings of the overhead table measure other targets (the table says which it checks):

  --taskset 0     every command, the unprofiled one too, under `taskset -c 0`: the producer
                  and the program share one CPU, as in a 1-CPU container (<= 1.25x on the
                  synthetic benchmark, <= 1.15x on the real programs)
  --interval 512k heapscope records at one sample per 512 KiB (`record -i 512k`), the rate Go
                  and tcmalloc use in production: the always-on setting (<= 1.03x synthetic,
                  <= 1.01x the real programs)

--no-peers leaves heaptrack and memray out (their figures do not change with the setting);
--only, repeatable, keeps the workloads whose name contains any of its texts.

Every (workload, tool) pair runs once per round (the /bin/true workload several times);
rounds are interleaved and the order of the tools rotates from round to round, so drift
of the machine hits every tool alike; each workload's turn begins with an unprofiled run that
is not counted, so that every tool finds the page cache as warm. Figures are medians over
rounds; ratios are against the unprofiled run of the same command in the same run. Columns:

  wall x          the whole command as a user runs it (heapscope: Python start-up, the
                  run, the final dumps, symbolization, the database) over the unprofiled one
  target wall x   heapscope only: the target's own run (spawn to exit, as heapscope timed
                  it) over the unprofiled wall
  cpu x           user+sys of the whole process tree (wait4 rusage via measure.c)
  peak RSS        ru_maxrss of that tree: its largest single process
  profile         size of the file(s) the tool wrote
  samples/s       heapscope's heap_samples over the unprofiled wall: the rate at the
                  program's own speed (the producer table also gives it under profiling)
  added / heaptrack's   (heapscope wall - unprofiled) / (heaptrack wall - unprofiled)
  producer CPU/record   heapscope's own process CPU (read at its exit by self_cpu.py, so
                  neither the target nor llvm-symbolizer), less the same figure for
                  `record -- /bin/true`, per record drained (heap_samples + frees)

memray runs in a benchmark venv that this script creates (benchmarks/out/venv: memray and
Markdown from PyPI, pinned below) on the same base interpreter as this script; every Python
workload runs with that venv's python, unprofiled too. Nothing here asserts on time: tests
never time things. The machine should be otherwise idle; --quick (1 round, short inputs) is
a smoke test of the harness, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from peak_split import ScriptFiles, heapscope_split
from run_scripts import pyperf_section, reading_section, trees_section
from self_cpu import interpreter_of, no_profile_argv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
BENCH_PACKAGES = ["memray==1.20.0", "Markdown==3.11.3"]
SECTIONS = ("overhead", "python", "fleet", "onecore", "alwayson", "trees", "pyperf", "reading")
# The workloads of the one-core and always-on tables: the synthetic one and the real programs.
SETTING_LOADS = ("synth 1 thread, ~1.1", "python json", "sqlite3", "cc1plus", "git log")
FIXED = "record -- /bin/true"


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


def generate_git_repo(path: Path, commits: int) -> None:
    """A git repository with a fixed history, written by `git fast-import`.

    120 text files; each commit edits six lines in each of six files (and every fifth
    commit moves a line), so `git log -p` diffs every commit: ~1.3 s of CPU for 4,000
    commits, the length of run the overhead targets name. Built once per output folder.
    """
    done = path / ".heapscope-bench"
    if done.exists() and done.read_text() == str(commits):
        return
    shutil.rmtree(path, ignore_errors=True)
    files, lines = 120, 160
    text = [[f"line {f}.{i}: {'x' * (i % 37)} value {i * 7919 % 10007}\n" for i in range(lines)]
            for f in range(files)]
    out: list[bytes] = []

    def data(b: bytes) -> None:
        out.extend((b"data %d\n" % len(b), b, b"\n"))

    for c in range(commits):
        out.append(b"commit refs/heads/main\n")
        out.append(b"committer Bench <bench@example.invalid> %d +0000\n" % (1_600_000_000 + c * 60))
        data(f"change {c}".encode())
        touched = range(files) if c == 0 else [(c * 7 + k * 31) % files for k in range(6)]
        for f in touched:
            t = text[f]
            if c:
                for k in range(6):
                    i = (c * 13 + k * 29 + f) % lines
                    t[i] = f"line {f}.{i}: edited in {c} {'y' * ((c + k) % 23)}\n"
                if c % 5 == 0:
                    t.insert((c * 3) % lines, f"inserted {c}\n")
                    del t[(c * 11) % len(t)]
            out.append(b"M 100644 inline src/f%03d.txt\n" % f)
            data("".join(t).encode())
        out.append(b"\n")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=b"".join(out), check=True)
    subprocess.run(["git", "-C", str(path), "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    done.write_text(str(commits))


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


def cc1plus_command(out: Path, quick: bool) -> list[str] | None:
    """cc1plus as the machine's g++ runs it (`g++ -###`) on a header-heavy C++ file.

    The file includes the whole of libstdc++ (<bits/stdc++.h>: every standard header)
    and instantiates a few heavy templates; --quick includes three headers only.
    """
    if not shutil.which("g++"):
        return None
    src = out / "headers.cc"
    if quick:
        src.write_text("#include <map>\n#include <string>\n#include <vector>\n"
                       "int main() { std::map<std::string, std::vector<int>> m; return (int)m.size(); }\n")
    else:
        src.write_text(
            "#include <bits/stdc++.h>\n"
            "int main() {\n"
            "  std::map<std::string, std::vector<std::pair<int, double>>> m;\n"
            "  std::unordered_map<std::string, std::set<long>> u;\n"
            "  std::regex re(\"[a-z]+([0-9]*)\");\n"
            "  std::smatch sm;\n"
            "  std::string s = \"abc123\";\n"
            "  std::regex_search(s, sm, re);\n"
            "  std::sort(m[\"x\"].begin(), m[\"x\"].end());\n"
            "  return (int)(m.size() + u.size() + sm.size());\n"
            "}\n")
    std = "-std=c++17" if quick else "-std=c++20"
    probe = subprocess.run(["g++", "-###", std, "-fsyntax-only", str(src)], capture_output=True, text=True,
                           cwd=out)
    for line in probe.stderr.splitlines():
        words = shlex.split(line)
        if words and Path(words[0]).name == "cc1plus":
            return words
    return None


@dataclass
class Workload:
    name: str
    argv: list[str]
    tables: tuple[str, ...]  # which of the report's tables the workload belongs to: "overhead", "python"
    kind: str  # synthetic, synthetic-2t, real, long, fixed, python, other: picks the target
    stdin: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    script: list[str] = field(default_factory=list)  # a Python program (script + args): memray can run it
    repeat: int = 1  # runs per round


@dataclass
class Python:
    """The interpreter of the Python workloads and what it has installed."""

    exe: str
    memray: bool
    markdown: bool


def bench_venv(path: Path, quick: bool) -> Python:
    """The benchmark venv (memray, Markdown), created on first use; falls back to this interpreter."""
    py = path / "bin" / "python"
    if not py.exists():
        print(f"creating the benchmark venv {path} ({', '.join(BENCH_PACKAGES)})", file=sys.stderr)
        made = subprocess.run([sys.executable, "-m", "venv", str(path)]).returncode == 0 and subprocess.run(
            [str(py), "-m", "pip", "install", "-q", *BENCH_PACKAGES]).returncode == 0
        if not made:
            print("could not create the benchmark venv: memray columns and the library workload are n/a",
                  file=sys.stderr)
            shutil.rmtree(path, ignore_errors=True)
            return Python(sys.executable, False, False)

    def has(module: str) -> bool:
        return subprocess.run([str(py), "-c", f"import {module}"], capture_output=True).returncode == 0

    return Python(str(py), has("memray"), has("markdown"))


def workloads(quick: bool, out: Path, py: Python) -> list[Workload]:
    exe, lib = build_native(out)
    q = quick
    # alloc_bench with WORK=25: ~17 M allocations/s of ~330 B on average on one core, so
    # ~1.1 M samples/s at the default interval (4096 B); the older row keeps WORK=200.
    fast_ops = 3_000_000 if q else 18_000_000
    old_ops = 500_000 if q else 3_000_000
    big_c = out / "big.c"
    generate_c_file(big_c, 100 if q else 1700)  # ~12 s unprofiled: a run of >= 10 s
    sql = out / "work.sql"
    sqlite_script(sql, 100_000 if q else 1_000_000)
    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True, check=True).stdout.strip()
    cc1plus = cc1plus_command(out, quick)
    pyhost = [str(HERE / "pyhost.py"), str(lib), "1", str(fast_ops), "25"]

    def pyload(name: str, script: str, args: list[str], tables: tuple[str, ...],
               env: dict[str, str] | None = None) -> Workload:
        s = [str(HERE / script), *args]
        return Workload(name, [py.exe, *s], tables, "python" if "python" in tables else "real", env=env or {},
                        script=s)

    found = [
        Workload("synth 1 thread, ~1.1 M samples/s", [str(exe), "1", str(fast_ops), "25"], ("overhead",), "synthetic"),
        Workload("synth 2 threads on 2 cores", [str(exe), "2", str(2 * fast_ops), "25"], ("overhead",), "synthetic-2t"),
        Workload("synth 1 thread, 165 k samples/s", [str(exe), "1", str(old_ops)], ("overhead",), "other"),
        Workload("synth 1 thread ~1.1 M/s, Python host", [py.exe, *pyhost], ("overhead",), "other", script=pyhost),
        pyload("python json", "pywork.py", [str(20_000 if q else 200_000)], ("overhead", "python")),
        pyload("python dicts, PYTHONMALLOC=malloc", "pydicts.py", [str(30_000 if q else 300_000)], ("overhead",),
               {"PYTHONMALLOC": "malloc"}),
    ]
    if shutil.which("sqlite3"):
        found.append(Workload("sqlite3 inserts+sort", ["sqlite3", ":memory:"], ("overhead",), "real", stdin=sql))
    else:
        print("sqlite3 not on PATH: its row is left out", file=sys.stderr)
    if cc1plus:
        found.append(Workload("cc1plus -fsyntax-only <bits/stdc++.h>", cc1plus, ("overhead",), "real"))
    else:
        print("g++'s cc1plus not found: its row is left out", file=sys.stderr)
    if shutil.which("git"):
        repo = out / "history.git"
        generate_git_repo(repo, 200 if q else 4000)
        found.append(Workload("git log -p (generated history)", ["git", "-C", str(repo), "--no-pager", "log", "-p"],
                              ("overhead",), "real"))
    else:
        print("git not on PATH: its row is left out", file=sys.stderr)
    found += [
        Workload("cc1 -O2, long run", [cc1, "-quiet", "-O2", str(big_c), "-o", str(out / "big.s")], ("overhead",),
                 "long"),
        Workload(FIXED, ["/bin/true"], ("overhead",), "fixed", repeat=2 if q else 5),
        pyload("python dict/set building", "pydicts.py", [str(30_000 if q else 300_000)], ("python",)),
        pyload("python objects", "pyobjects.py", ["12", "4"] if q else ["16", "22"], ("python",)),
    ]
    if py.markdown:
        found.append(pyload("python Markdown (PyPI)", "pylib.py", [str(100 if q else 1000)], ("python",)))
    else:
        print("Markdown not installed in the benchmark venv: the library row is left out", file=sys.stderr)
    return found


# --- tools ------------------------------------------------------------------------


class Tool:
    name = ""
    env: dict[str, str] = {}  # noqa: RUF012 (never changed in place: a tool sets its own)

    def argv(self, w: Workload, profile: Path, cpu_file: Path) -> list[str] | None:
        raise NotImplementedError

    def profile_files(self, profile: Path) -> list[Path]:
        return [p for p in profile.parent.glob(profile.name + "*") if p.is_file()]


class Unprofiled(Tool):
    name = "none"

    def argv(self, w: Workload, profile: Path, cpu_file: Path) -> list[str] | None:
        return w.argv


class NoProfile(Tool):
    """heapscope recording as `record` does but writing nothing (no_profile.py): the floor that
    fewer rows, or rows written earlier, could reach."""

    name = "heapscope (no profile)"

    def __init__(self, cmd: list[str], interval: str | None = None) -> None:
        self.prefix = no_profile_argv(cmd, interval)

    def argv(self, w: Workload, profile: Path, cpu_file: Path) -> list[str] | None:
        return [*self.prefix, *w.argv] if "overhead" in w.tables else None


class Heapscope(Tool):
    name = "heapscope"

    def __init__(self, cmd: list[str], name: str = "heapscope", interval: str | None = None,
                 cache: Path | None = None) -> None:
        self.cmd, self.name, self.interval = cmd, name, interval
        self.launcher = self._launcher(cmd)
        # Two versions side by side each keep a symbol cache of their own: one may read the
        # other's entries as damaged and symbolize anew at every round (llvm-symbolizer's time
        # and RSS counted against it).
        self.env = {"XDG_CACHE_HOME": str(cache)} if cache is not None else {}

    @staticmethod
    def _launcher(cmd: list[str]) -> tuple[list[str], list[str]] | None:
        """cmd under self_cpu.py: (its interpreter and self_cpu.py, the script), or None if it is not Python."""
        if len(cmd) >= 3 and cmd[1] == "-m":
            return [cmd[0], str(HERE / "self_cpu.py")], ["-m", *cmd[2:]]
        if len(cmd) == 1 and (found := interpreter_of(cmd[0])) is not None:
            return [*found[0], str(HERE / "self_cpu.py")], found[1]
        return None

    def argv(self, w: Workload, profile: Path, cpu_file: Path) -> list[str] | None:
        # run_once removes the last round's profile first; --force is only for
        # a profile left behind, and older installs (--compare) lack the flag.
        args = ["record", "-o", str(profile), *(["--force"] if self.name == "heapscope" else []),
                *(["-i", self.interval] if self.interval else []), "--", *w.argv]
        if self.launcher is None:
            return [*self.cmd, *args]
        interp, script = self.launcher
        return [*interp, str(cpu_file), *script, *args]


class Heaptrack(Tool):
    name = "heaptrack"

    def argv(self, w: Workload, profile: Path, cpu_file: Path) -> list[str] | None:
        return ["heaptrack", "-o", str(profile), *w.argv] if "overhead" in w.tables else None


MEMRAY_MODES = {"memray": [], "memray --native": ["--native"],
                "memray --trace-python-allocators": ["--trace-python-allocators"]}


class Memray(Tool):
    def __init__(self, python: str, name: str) -> None:
        self.python, self.name, self.flags = python, name, MEMRAY_MODES[name]

    def argv(self, w: Workload, profile: Path, cpu_file: Path) -> list[str] | None:
        if not w.script:
            return None
        return [self.python, "-m", "memray", "run", "-q", "-f", "-o", str(profile), *self.flags, *w.script]

    def peak(self, profile: Path) -> int | None:
        """memray's own peak of the run (`memray stats --json`)."""
        out = profile.parent / "stats.json"
        r = subprocess.run([self.python, "-m", "memray", "stats", "--json", "-f", "-o", str(out), str(profile)],
                           capture_output=True)
        try:
            return int(json.loads(out.read_text())["metadata"]["peak_memory"]) if r.returncode == 0 else None
        except (OSError, ValueError, KeyError):
            return None
        finally:
            out.unlink(missing_ok=True)

    def script_peak(self, profile: Path, script: str) -> int | None:
        """Of memray's peak, the bytes the script's own code holds (peak_split.py, in the venv of memray)."""
        r = subprocess.run([self.python, str(HERE / "peak_split.py"), "--script", script, "--memray", str(profile),
                            "--json"], capture_output=True, text=True)
        try:
            return int(json.loads(r.stdout)["memray"]["script"]["bytes"]) if r.returncode == 0 else None
        except (ValueError, KeyError, TypeError):
            return None


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
    producer_cpu: float | None = None  # heapscope's own process, user+sys
    producer_rss_kib: int | None = None
    peak: int | None = None  # the tool's peak of the heap (heapscope: sampled; memray: its stats)
    script_peak: int | None = None  # of that peak, what the script's own code holds (peak_split.py)


def run_once(w: Workload, tool: Tool, profile: Path, work_dir: Path, want_peak: bool,
             prefix: list[str] | None = None) -> Sample:
    """One timed run under `measure` (see measure.c), which reports the tree's rusage; `prefix`
    (`taskset -c 0`) goes before the tool's command, inside `measure`: it execs the command."""
    for old in tool.profile_files(profile):
        old.unlink()
    usage, cpu_file = work_dir / "rusage.txt", work_dir / "self_cpu.txt"
    usage.unlink(missing_ok=True)
    cpu_file.unlink(missing_ok=True)
    argv = tool.argv(w, profile, cpu_file)
    assert argv is not None
    env = {**os.environ, **w.env, **tool.env}
    with open(w.stdin, "rb") if w.stdin else open(os.devnull, "rb") as stdin_f:
        t0 = time.perf_counter()
        proc = subprocess.run([str(work_dir / "measure"), str(usage), *(prefix or []), *argv], stdin=stdin_f,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - t0
    utime, stime, maxrss = usage.read_text().split() if usage.exists() else ("nan", "nan", "0")
    files = tool.profile_files(profile)
    sample = Sample(wall, float(utime) + float(stime), int(maxrss), proc.returncode,
                    sum(f.stat().st_size for f in files), {})
    if isinstance(tool, Heapscope) and profile.exists():
        sample.stats, sample.target_wall = heapscope_readout(profile)
        sample.peak = sample.stats.get("peak_heap_bytes")
        if "python" in w.tables and w.script and proc.returncode == 0:
            sample.script_peak = heapscope_script_peak(profile, w.script[0])
        # `record` ends with os._exit (cli/__init__.py), so self_cpu.py's atexit
        # hook does not run: the profile's own figures (taken just before its
        # last write) come first.
        if "producer_cpu_ns" in sample.stats:
            sample.producer_cpu = sample.stats["producer_cpu_ns"] / 1e9
            sample.producer_rss_kib = sample.stats.get("producer_peak_rss_bytes", 0) // 1024
        elif cpu_file.exists():
            u, s, rss = cpu_file.read_text().split()
            sample.producer_cpu, sample.producer_rss_kib = float(u) + float(s), int(rss)
    if isinstance(tool, Memray) and want_peak and profile.exists() and proc.returncode == 0:
        sample.peak = tool.peak(profile)
        sample.script_peak = tool.script_peak(profile, w.script[0])
    if proc.returncode != 0:
        sys.stderr.write(f"[{tool.name}] exit {proc.returncode}: {' '.join(argv)}\n")
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:] + "\n")
    return sample


def heapscope_script_peak(db: Path, script: str) -> int | None:
    """Of heapscope's peak, the bytes the script's own code holds (peak_split.py)."""
    try:
        return heapscope_split(db, ScriptFiles(script)).bytes["script"]
    except sqlite3.Error:
        return None


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
    return {name: int(v) for name, v in rows if v is not None}, int(wall[0]) / 1e9 if wall else None


# --- summarizing ------------------------------------------------------------------


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass
class Figures:
    """Medians of one (workload, tool) pair."""

    runs: int
    failed: str = ""
    wall: float = 0.0
    spread: float = 0.0  # the slowest round's wall over the fastest's, minus 1
    cpu: float = 0.0
    rss: float = 0.0
    size: float = 0.0
    target_wall: float | None = None
    producer_cpu: float | None = None
    producer_rss: float | None = None
    peak: float | None = None
    script_peak: float | None = None
    stats: dict[str, int] = field(default_factory=dict)


def figures(samples: list[Sample]) -> Figures:
    failed = [s.status for s in samples if s.status != 0]
    if failed:
        return Figures(len(samples), failed=f"FAILED: exit {failed[0]} in {len(failed)}/{len(samples)} runs")
    walls = [s.wall for s in samples]
    return Figures(
        len(samples),
        wall=statistics.median(walls),
        spread=max(walls) / min(walls) - 1 if min(walls) > 0 else 0.0,
        cpu=statistics.median(s.cpu for s in samples),
        rss=statistics.median(s.maxrss_kib for s in samples) * 1024,
        size=statistics.median(s.profile_bytes for s in samples),
        target_wall=med([s.target_wall for s in samples if s.target_wall is not None]),
        producer_cpu=med([s.producer_cpu for s in samples if s.producer_cpu is not None]),
        producer_rss=med([s.producer_rss_kib * 1024 for s in samples if s.producer_rss_kib is not None]),
        peak=med([s.peak for s in samples if s.peak is not None]),
        script_peak=med([s.script_peak for s in samples if s.script_peak is not None]),
        stats=samples[-1].stats,
    )


def fmt_x(x: float | None, limit: float | None = None) -> str:
    """x as `1.07x`; with three decimals when two would read as the `limit` it is checked against
    (1.103 against 1.10: shown `1.103x`, so a miss never reads as the limit itself)."""
    if x is None:
        return "n/a"
    if limit is not None and f"{x:.2f}" == f"{limit:.2f}" and x != limit:
        return f"{x:.3f}x"
    return f"{x:.2f}x"


def fmt_size(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# An unprofiled row whose rounds spread more than this ran on a busy machine: its ratios say
# little about heapscope (objects once read 0.88x with rounds of 0.61-1.13 s); the tables say so.
NOISY_SPREAD = 0.10


def noise_lines(r: Results, loads: list[Workload]) -> list[str]:
    """One line naming the rows whose unprofiled rounds spread over NOISY_SPREAD, if any."""
    noisy = [(w.name, b.spread) for w in loads if (b := r.base(w)) and b.spread > NOISY_SPREAD]
    if not noisy:
        return []
    named = ", ".join(f"{name} ({spread:.0%})" for name, spread in noisy)
    return ["", f"**Noisy:** the unprofiled rounds of {named} spread by more than {NOISY_SPREAD:.0%} "
                "(slowest over fastest): the machine was busy, their ratios are not evidence; rerun them."]


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


@dataclass(frozen=True)
class Setting:
    """How every command runs: under `taskset -c CPUS`, and heapscope at an interval of its own."""

    taskset: str | None = None
    interval: str | None = None

    def prefix(self) -> list[str]:
        return ["taskset", "-c", self.taskset] if self.taskset else []

    def targets(self) -> dict[str, float]:
        """The whole-command ratio each kind of workload is held to in this setting."""
        if self.taskset and self.interval:
            return {}  # no target of its own: shown for what it is
        if self.taskset:
            return ONE_CORE_TARGET
        if self.interval:
            return ALWAYS_ON_TARGET
        return WHOLE_TARGET

    def describe(self) -> str:
        parts = []
        if self.taskset:
            parts.append(f"every command under `taskset -c {self.taskset}` (the producer and the program on one CPU)")
        if self.interval:
            parts.append(f"heapscope at `-i {self.interval}`")
        return ", ".join(parts)


class Results:
    def __init__(self, loads: list[Workload], tools: list[Tool], samples: dict[tuple[str, str], list[Sample]],
                 setting: Setting | None = None):
        self.loads, self.tools = loads, tools
        self.setting = setting or Setting()
        self.fig = {key: figures(s) for key, s in samples.items()}

    def get(self, w: Workload, tool: str) -> Figures | None:
        f = self.fig.get((w.name, tool))
        return f if f is not None and not f.failed else None

    def base(self, w: Workload) -> Figures | None:
        return self.get(w, "none")

    def ratio(self, w: Workload, tool: str) -> float | None:
        f, b = self.get(w, tool), self.base(w)
        return f.wall / b.wall if f and b and b.wall > 0 else None

    def added(self, w: Workload, tool: str) -> float | None:
        f, b = self.get(w, tool), self.base(w)
        return f.wall - b.wall if f and b else None

    def added_vs(self, w: Workload, tool: str, peer: str) -> float | None:
        mine, theirs = self.added(w, tool), self.added(w, peer)
        if mine is None or theirs is None or theirs <= 0:
            return None
        return max(mine, 0.0) / theirs

    def target_ratio(self, w: Workload, tool: str = "heapscope") -> float | None:
        f, b = self.get(w, tool), self.base(w)
        return f.target_wall / b.wall if f and b and f.target_wall is not None and b.wall > 0 else None

    def records(self, w: Workload) -> int | None:
        f = self.get(w, "heapscope")
        if f is None or "heap_samples" not in f.stats:
            return None
        # python.pymalloc's records (a Python program's small objects) are records too
        return (f.stats["heap_samples"] + f.stats.get("frees", 0)
                + f.stats.get("python_heap_samples", 0) + f.stats.get("python_heap_frees", 0))

    def producer_per_record(self, w: Workload, fixed: Workload | None) -> float | None:
        """Seconds of producer CPU per record, net of the fixed cost (the /bin/true command's)."""
        f, n = self.get(w, "heapscope"), self.records(w)
        if f is None or f.producer_cpu is None or not n:
            return None
        fx = self.get(fixed, "heapscope") if fixed else None
        net = f.producer_cpu - (fx.producer_cpu if fx and fx.producer_cpu is not None else 0.0)
        return max(net, 0.0) / n

    def headroom(self, w: Workload, fixed: Workload | None) -> float | None:
        """Records per second of producer CPU over records per second of the target's run."""
        per, n, f = self.producer_per_record(w, fixed), self.records(w), self.get(w, "heapscope")
        if per is None or not n or f is None or not f.target_wall or n < 1000:
            return None
        return float("inf") if per == 0 else (1 / per) / (n / f.target_wall)


def tools_for(results: Results, table: str) -> list[Tool]:
    return [t for t in results.tools if any(w.tables and table in w.tables and (w.name, t.name) in results.fig
                                            for w in results.loads)]


# --- overhead -------------------------------------------------------------------


WHOLE_TARGET = {"synthetic": 1.20, "synthetic-2t": 1.35, "real": 1.10, "long": 1.05, "python": 1.10}
# One CPU for the program and the producer (--taskset): the synthetic benchmark and the real
# programs (python json and cc1 -O2 among them); two threads on one CPU have no target.
ONE_CORE_TARGET = {"synthetic": 1.25, "real": 1.15, "long": 1.15, "python": 1.15}
# One sample per 512 KiB (--interval 512k), the rate Go and tcmalloc use in production.
ALWAYS_ON_TARGET = {"synthetic": 1.03, "real": 1.01, "long": 1.01, "python": 1.01}


def overhead_section(r: Results) -> list[str]:
    loads = [w for w in r.loads if "overhead" in w.tables]
    if not loads:
        return []
    fixed = next((w for w in loads if w.kind == "fixed"), None)
    peers = [t.name for t in tools_for(r, "overhead") if t.name not in ("none", "heapscope")]
    setting, targets = r.setting, r.setting.targets()
    if setting.taskset and setting.interval:
        aims = "none of its own (shown for what it is)"
    elif setting.taskset:
        aims = "synthetic 1 thread <= 1.25x whole; the real programs (python json and cc1 -O2 too) <= 1.15x"
    elif setting.interval:
        aims = "synthetic 1 thread <= 1.03x whole; the real programs (python json and cc1 -O2 too) <= 1.01x"
    else:
        aims = ("synthetic 1 thread at ~1 M samples/s <= 1.20x whole and <= 1.15x target; "
                "2 threads on 2 cores <= 1.35x; the real programs <= 1.10x, runs of >= 10 s <= 1.05x")
    title = f"### Overhead side by side: {setting.describe()}" if setting.describe() else "### Overhead side by side"
    lines = [title, "",
             "Whole command, median wall over the unprofiled run; heapscope's target alone in brackets. "
             f"Targets: {aims}; "
             "added time <= 1/4 of heaptrack's; `record -- /bin/true` <= 50 ms over the program.", "",
             "| workload (unprofiled wall) | heapscope (target) | " + "".join(f"{p} | " for p in peers)
             + "added / heaptrack's | target | met |",
             "|---|---|" + "---|" * len(peers) + "---|---|---|"]
    checks: list[tuple[str, str, bool | None]] = []
    for w in loads:
        b = r.base(w)
        if b is None:
            continue
        hs = r.get(w, "heapscope")
        vs_ht = r.added_vs(w, "heapscope", "heaptrack")
        if w.kind == "fixed":
            added = r.added(w, "heapscope")
            cells = f"+{added * 1000:.0f} ms" if added is not None else "n/a"
            goal, ok = "<= 50 ms added", (added <= 0.050 if added is not None else None)
            measured = f"+{added * 1000:.0f} ms" if added is not None else "n/a"
        else:
            limit = targets.get(w.kind)
            x = r.ratio(w, "heapscope")
            cells = f"{fmt_x(x, limit)} ({fmt_x(r.target_ratio(w), 1.15 if w.kind == 'synthetic' else None)})"
            if limit is None:
                goal, ok = "-", None
            elif w.kind == "synthetic" and targets is WHOLE_TARGET:
                tx = r.target_ratio(w)
                goal = "<= 1.20x whole, <= 1.15x target"
                ok = None if x is None or tx is None else (x <= 1.20 and tx <= 1.15)
            else:
                goal, ok = f"<= {limit:.2f}x whole", (None if x is None else x <= limit)
            measured = cells
        if hs is None:
            cells = r.fig[(w.name, "heapscope")].failed if (w.name, "heapscope") in r.fig else "n/a"
        peer_cells = []
        for p in peers:
            f = r.fig.get((w.name, p))
            if f is None:
                peer_cells.append("n/a")
            elif f.failed:
                peer_cells.append(f.failed)
            elif w.kind == "fixed":
                peer_cells.append(f"+{(f.wall - b.wall) * 1000:.0f} ms")
            else:
                peer_cells.append(fmt_x(f.wall / b.wall))
        lines.append(f"| {w.name} ({b.wall:.2f} s) | {cells} | " + "".join(f"{c} | " for c in peer_cells)
                     + f"{'n/a' if vs_ht is None else f'{vs_ht:.2f}'} | {goal} | {verdict(ok)} |")
        if goal != "-":
            checks.append((f"{w.name}: {goal}", measured, ok))
        if vs_ht is not None or (w.name, "heaptrack") in r.fig:
            checks.append((f"{w.name}: added <= 1/4 of heaptrack's",
                           "n/a" if vs_ht is None else f"{vs_ht:.2f}", None if vs_ht is None else vs_ht <= 0.25))

    lines += ["", "All columns (medians):", "",
              "| workload | tool | wall | wall x | target wall x | cpu x | peak RSS | profile | samples/s "
              "| added / heaptrack's | producer CPU / record |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in loads:
        b = r.base(w)
        for t in r.tools:
            f = r.fig.get((w.name, t.name))
            if f is None:
                continue
            if f.failed:
                lines.append(f"| {w.name} | {t.name} ({f.failed}) | n/a | n/a | n/a | n/a | n/a | n/a | | | |")
                continue
            is_hs = t.name == "heapscope"
            is_any_hs = t.name.startswith("heapscope")
            sps = ""
            if is_hs and b and b.wall > 0 and "heap_samples" in f.stats:
                sps = f"{(f.stats['heap_samples'] + f.stats.get('python_heap_samples', 0)) / b.wall:,.0f}"
            vs_ht = r.added_vs(w, "heapscope", "heaptrack") if is_hs else None
            per = r.producer_per_record(w, fixed) if is_hs and w.kind != "fixed" else None
            lines.append(
                f"| {w.name} | {t.name} | {f.wall:.2f}s | "
                f"{fmt_x(f.wall / b.wall if b and t.name != 'none' else None)} | "
                f"{fmt_x(r.target_ratio(w, t.name)) if is_any_hs else ''} | "
                f"{fmt_x(f.cpu / b.cpu if b and b.cpu > 0 and t.name != 'none' else None)} | "
                f"{fmt_size(f.rss)} | {fmt_size(f.size) if f.size else '-'} | {sps} | "
                f"{'' if vs_ht is None else f'{vs_ht:.2f}'} | {'' if per is None else f'{per * 1e6:.2f} us'} |")

    lines += ["", "Producer (heapscope's own process; CPU net of `record -- /bin/true`'s). Target: at "
              "least 5x headroom: records per second of producer CPU over records per second of the target.", "",
              "| workload | records | records/s in the target | producer CPU | CPU / record | headroom "
              "| producer peak RSS |", "|---|---|---|---|---|---|---|"]
    headrooms = []
    for w in loads:
        f, n = r.get(w, "heapscope"), r.records(w)
        if f is None or n is None or w.kind == "fixed":
            continue
        per, h = r.producer_per_record(w, fixed), r.headroom(w, fixed)
        if h is not None:
            headrooms.append((h, w.name))
        rate = n / f.target_wall if f.target_wall else None
        lines.append(f"| {w.name} | {n:,} | {'n/a' if rate is None else f'{rate:,.0f}'} | "
                     f"{'n/a' if f.producer_cpu is None else f'{f.producer_cpu:.2f} s'} | "
                     f"{'n/a' if per is None else f'{per * 1e6:.2f} us'} | "
                     f"{'n/a' if h is None else f'{h:.1f}x'} | {fmt_size(f.producer_rss)} |")
    if headrooms:
        low = min(headrooms)
        checks.append(("producer headroom >= 5x on every workload", f"lowest {low[0]:.1f}x ({low[1]})",
                       low[0] >= 5))
    else:
        checks.append(("producer headroom >= 5x on every workload", "not measured", None))
    lines += ["", "Against the overhead targets:", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {m} | {verdict(ok)} |" for name, m, ok in checks]
    lines += ["| a free of an unsampled address: one predictable branch, no shared cache line | "
              "instruction counts, not timed here (perf stat / callgrind) | n/a |"]
    return lines + noise_lines(r, loads)


# --- Python ---------------------------------------------------------------------


def python_section(r: Results) -> list[str]:
    loads = [w for w in r.loads if "python" in w.tables]
    if not loads:
        return []
    memrays = [m for m in MEMRAY_MODES if any((w.name, m) in r.fig for w in loads)]
    lines = ["### Python programs: heapscope next to memray", "",
             "heapscope at the default interval with Python frames and pymalloc sampling on; wall x is the whole "
             "command over the unprofiled run; 'added / X' is heapscope's added wall over X's. Targets: "
             "<= 1.10x; <= 1/5 of memray's added time (checked against `memray run`, the others shown); a profile "
             ">= 10x smaller than memray's and the sampled peak within 5% of memray's, both checked against "
             "`memray run --trace-python-allocators`, the mode that sees the same allocators as heapscope (every "
             "pymalloc and malloc request; plain `memray run` sees pymalloc's arenas, not the objects in them, so "
             "its profile holds far fewer events). The whole peaks differ by definition: heapscope tracks from "
             "the interpreter's start, memray from the script's, in a process that has already imported memray "
             "and its ~470 modules (rich, textual, jinja2, asyncio, logging, typing, re, ...), so a module the "
             "script imports again costs memray nothing. The like-for-like peak is what the script's own code "
             "holds at each tool's peak: the blocks whose Python stack has a frame of the script and no "
             "`_find_and_load` frame (no interpreter start-up, no imports; benchmarks/peak_split.py, "
             "docs/python-frames.md section 7); the 5% target is checked on it.", "",
             "| workload (unprofiled wall) | heapscope (target) | " + " | ".join(memrays) + " | "
             + " | ".join(f"added / {m}'s" for m in memrays)
             + " | profile: memray --trace-python-allocators' / heapscope's (memray's) | "
             "sampled peak vs --trace-python-allocators' | like for like: the script's own bytes at the peak | "
             "`memray run`'s peak (arenas, not objects) |",
             "|---|---|" + "---|" * (2 * len(memrays)) + "---|---|---|---|"]
    checks: list[tuple[str, str, bool | None]] = []
    for w in loads:
        b = r.base(w)
        if b is None:
            continue
        hs, plain, trace = r.get(w, "heapscope"), r.get(w, "memray"), r.get(w, "memray --trace-python-allocators")
        x = r.ratio(w, "heapscope")
        cells = [f"{fmt_x(x, 1.10)} ({fmt_x(r.target_ratio(w))})"] + [fmt_x(r.ratio(w, m)) if r.get(w, m) else
                              (r.fig[(w.name, m)].failed if (w.name, m) in r.fig else "n/a") for m in memrays]
        vs = [r.added_vs(w, "heapscope", m) for m in memrays]
        cells += ["n/a" if v is None else f"{v:.2f}" for v in vs]
        plain_ratio = plain.size / hs.size if hs and plain and hs.size else None
        size_ratio = trace.size / hs.size if hs and trace and hs.size else None
        cells.append(f"{'n/a' if size_ratio is None else f'{size_ratio:.1f}x'} "
                     f"({'n/a' if plain_ratio is None else f'{plain_ratio:.2f}x'})")
        peak_diff = (hs.peak / trace.peak - 1) if hs and trace and hs.peak and trace.peak else None
        cells.append("n/a" if peak_diff is None or not hs or not trace
                     else f"{fmt_size(hs.peak)} vs {fmt_size(trace.peak)} ({peak_diff * 100:+.1f}%)")
        own_diff = (hs.script_peak / trace.script_peak - 1) if hs and trace and hs.script_peak and \
            trace.script_peak else None
        cells.append("n/a" if own_diff is None or not hs or not trace
                     else f"{fmt_size(hs.script_peak)} vs {fmt_size(trace.script_peak)} ({own_diff * 100:+.1f}%)")
        cells.append("n/a" if not hs or not plain or not hs.peak or not plain.peak
                     else f"{fmt_size(plain.peak)} ({(hs.peak / plain.peak - 1) * 100:+.1f}%)")
        lines.append(f"| {w.name} ({b.wall:.2f} s) | " + " | ".join(cells) + " |")
        checks.append((f"{w.name}: <= 1.10x whole", fmt_x(x, 1.10), None if x is None else x <= 1.10))
        v = vs[memrays.index("memray")] if "memray" in memrays else None
        checks.append((f"{w.name}: added <= 1/5 of memray's", "n/a" if v is None else f"{v:.2f}",
                       None if v is None else v <= 0.2))
        checks.append((f"{w.name}: profile >= 10x smaller than memray --trace-python-allocators'",
                       "n/a" if size_ratio is None else f"{size_ratio:.1f}x",
                       None if size_ratio is None else size_ratio >= 10))
        whole = "n/a" if peak_diff is None else f"{peak_diff * 100:+.1f}%"
        checks.append((f"{w.name}: sampled peak within 5% of memray --trace-python-allocators' (like for like: "
                       f"the script's own bytes; whole peaks {whole})",
                       "n/a" if own_diff is None else f"{own_diff * 100:+.1f}%",
                       None if own_diff is None else abs(own_diff) <= 0.05))
    lines += ["", "All columns (medians; peak: heapscope's sampled peak, memray's `stats` peak_memory):", "",
              "| workload | tool | wall | wall x | cpu x | peak RSS | profile | peak |",
              "|---|---|---|---|---|---|---|---|"]
    for w in loads:
        b = r.base(w)
        for t in r.tools:
            f = r.fig.get((w.name, t.name))
            if f is None:
                continue
            if f.failed:
                lines.append(f"| {w.name} | {t.name} ({f.failed}) | n/a | n/a | n/a | n/a | n/a | n/a |")
                continue
            none = t.name == "none"
            lines.append(f"| {w.name} | {t.name} | {f.wall:.2f}s | {fmt_x(None if none or not b else f.wall / b.wall)}"
                         f" | {fmt_x(None if none or not b or b.cpu <= 0 else f.cpu / b.cpu)} | {fmt_size(f.rss)} | "
                         f"{fmt_size(f.size) if f.size else '-'} | {fmt_size(f.peak) if f.peak else ''} |")
    lines += ["", "Against the Python targets:", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {m} | {verdict(ok)} |" for name, m, ok in checks]
    return lines + noise_lines(r, loads)


# --- fleet ----------------------------------------------------------------------


def fleet_section(quick: bool, rounds: int, heapscope_cmd: list[str]) -> list[str]:
    sys.path.insert(0, str(HERE))
    import fleet  # benchmarks/fleet.py: needs heapscope importable here

    ops = 2_000_000 if quick else 40_000_000
    res = fleet.overhead(rounds, ops, heapscope_cmd)
    lines = ["### Many machines: serving and pushing while recording", "",
             f"`benchmarks/fleet.py --overhead --rounds {rounds} --ops {ops}`, run from this command: "
             "`record -c 10000` of alloc_bench (1 thread) plain, with `--serve` and a scraper fetching "
             "/debug/pprof/heap every second, and with `--push` to a loopback Pyroscope-shaped server (a push per "
             "10 s dump and the final one). Target: <= 1% added wall.", ""]
    lines += res.table()
    lines += [""]
    serve, push = res.added("serve + scrape 1/s"), res.added("push every 10 s")
    lines += ["| target | measured | met |", "|---|---|---|",
              f"| --serve, scraped every second: <= 1% added wall | {serve * 100:+.1f}% (spread of plain: "
              f"{res.spread() * 100:.1f}%) | {verdict(serve <= 0.01)} |",
              f"| --push every 10 s: <= 1% added wall | {push * 100:+.1f}% | {verdict(push <= 0.01)} |", ""]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        db = tmp / "synthetic.db"
        callsites = 2_000 if quick else 20_000
        fleet.build(db, callsites, 10)
        n, build_s, total_s = fleet.clickhouse_rate(db, tmp)
        sizes = fleet.pprof_sizes(db)
    lines += ["| profile | ClickHouse rows | rows/s built | rows/s built + inserted (chDB) | pprof bytes per pushed "
              "profile (median) |", "|---|---|---|---|---|",
              f"| synthetic, {callsites:,} callsites, 10 dumps | {n:,} | {n / build_s:,.0f} | {n / total_s:,.0f} | "
              f"{statistics.median(sizes):,.0f} |"]
    if res.real_rows is not None:
        n, build_s, total_s = res.real_rows
        lines.append(f"| alloc_bench recording (plain, last round) | {n:,} | {n / build_s:,.0f} | "
                     f"{n / total_s:,.0f} | {statistics.median(res.push_bytes):,.0f} (as pushed) |"
                     if res.push_bytes else f"| alloc_bench recording | {n:,} | {n / build_s:,.0f} | "
                     f"{n / total_s:,.0f} | n/a |")
    return lines


# --- the run ----------------------------------------------------------------------


def machine(load_before: float) -> str:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs ({model or platform.processor()}), Linux {platform.release()}, "
            f"Python {platform.python_version()}, load average {load_before:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end")


def versions(heapscope_cmd: list[str], py: Python) -> str:
    def first_line(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else "n/a"
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "n/a"

    commit = first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    parts = [f"{first_line([*heapscope_cmd, '--version'])} at {commit}"]
    if shutil.which("heaptrack"):
        parts.append(first_line(["heaptrack", "--version"]))
    if py.memray:
        parts.append("memray " + first_line([py.exe, "-m", "memray", "--version"]))
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, short inputs: a smoke test of the harness")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5, --quick 1)")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--only", action="append", default=None, metavar="TEXT",
                        help="run only the workloads whose name contains this (repeatable: any of them)")
    parser.add_argument("--heapscope", default=None, help="heapscope command (default: on PATH, else python -m)")
    parser.add_argument("--compare", default=None, metavar="CMD",
                        help="a second heapscope command (another install) measured in the same rounds; "
                             "shown in the 'All columns' tables as 'heapscope @ LABEL'")
    parser.add_argument("--compare-label", default="other", help="LABEL for --compare (e.g. a commit)")
    parser.add_argument("--taskset", default=None, metavar="CPUS",
                        help="run every command, the unprofiled one too, under `taskset -c CPUS` (one CPU: the "
                             "one-core targets)")
    parser.add_argument("--interval", default=None, metavar="BYTES",
                        help="heapscope records with `-i BYTES` (512k: the always-on targets)")
    parser.add_argument("--no-peers", action="store_true", help="leave heaptrack and memray out")
    parser.add_argument("--bench-venv", type=Path, default=OUT / "venv",
                        help="venv with memray and Markdown, created if missing (default benchmarks/out/venv)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if bad := [s for s in sections if s not in SECTIONS]:
        parser.error(f"unknown section {bad[0]!r}: pick from {', '.join(SECTIONS)}")

    OUT.mkdir(exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="run-", dir=OUT))
    heapscope_cmd = shlex.split(args.heapscope) if args.heapscope else (
        [shutil.which("heapscope") or ""] if shutil.which("heapscope") else [sys.executable, "-m", "heapscope"])
    py = bench_venv(args.bench_venv, args.quick)
    setting = Setting(args.taskset, args.interval)
    if setting.taskset and not shutil.which("taskset"):
        parser.error("--taskset needs taskset (util-linux) on PATH")

    def own(tag: str) -> Path | None:
        """With --compare, each heapscope's symbol cache (Heapscope's __init__ says why)."""
        return work_dir / f"cache-{tag}" if args.compare else None

    heapscope = Heapscope(heapscope_cmd, interval=args.interval, cache=own("heapscope"))
    if heapscope.launcher is None:
        print(f"{' '.join(heapscope_cmd)} is not a Python script: producer CPU is n/a", file=sys.stderr)
    tools: list[Tool] = [Unprofiled(), heapscope, NoProfile(heapscope_cmd, args.interval)]
    if args.compare:
        tools.append(Heapscope(shlex.split(args.compare), f"heapscope @ {args.compare_label}", args.interval,
                               own("compare")))
    if args.no_peers:
        pass
    elif shutil.which("heaptrack"):
        tools.append(Heaptrack())
    else:
        print("heaptrack not on PATH (Debian: apt-get install heaptrack): its columns are n/a", file=sys.stderr)
    if py.memray and not args.no_peers:
        tools += [Memray(py.exe, name) for name in MEMRAY_MODES]

    out_lines: list[str] = []
    started, load_before = time.time(), os.getloadavg()[0]
    try:
        tables = {s for s in sections if s in ("overhead", "python")}
        every = workloads(args.quick, work_dir, py)
        loads = [w for w in every if set(w.tables) & tables and (not args.only or any(o in w.name for o in args.only))]
        samples = run_rounds(loads, tools, rounds, work_dir, setting.prefix())
        results = Results(loads, tools, samples, setting)
        for section, make in (("overhead", overhead_section), ("python", python_section)):
            if section in sections:
                out_lines += [*make(results), ""]
        if "fleet" in sections and not args.only:
            try:
                out_lines += [*fleet_section(args.quick, rounds, heapscope_cmd), ""]
            except Exception as e:  # the tables above are still worth printing
                out_lines += [f"fleet section failed: {type(e).__name__}: {e}", ""]
        out_lines += setting_sections(sections, args, rounds, heapscope_cmd, work_dir, every)
        out_lines += script_sections(sections, args, rounds, heapscope_cmd, work_dir, every, py)
        stats_lines = [f"- {w.name}: " + ", ".join(f"{k}={v}" for k, v in f.stats.items())
                       for w in loads if (f := results.get(w, "heapscope")) is not None and f.stats]
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    head = [f"`python benchmarks/run.py{' --quick' if args.quick else ''}"
            f"{f' --rounds {args.rounds}' if args.rounds else ''}"
            f"{f' --sections {args.sections}' if args.sections != ','.join(SECTIONS) else ''}"
            f"{''.join(f' --only {shlex.quote(o)}' for o in args.only or [])}"
            f"{f' --taskset {args.taskset}' if args.taskset else ''}"
            f"{f' --interval {args.interval}' if args.interval else ''}"
            f"{' --no-peers' if args.no_peers else ''}"
            f"{f' --heapscope {shlex.quote(args.heapscope)}' if args.heapscope else ''}"
            f"{f' --compare {shlex.quote(args.compare)}' if args.compare else ''}"
            f"{f' --compare-label {args.compare_label}' if args.compare else ''}`: "
            f"{rounds} interleaved round(s), medians, "
            f"{(time.time() - started) / 60:.1f} min. Machine: {machine(load_before)}. "
            f"{versions(heapscope_cmd, py)}.", ""]
    if args.quick:
        head += ["**--quick: one round of short inputs, a smoke test of the harness; these figures are not "
                 "measurements.**", ""]
    print("\n".join(["", *head, *out_lines]))
    if stats_lines:
        print("heapscope `stats` (last round, summed over processes):")
        print("\n".join(stats_lines))
    return 0


def setting_sections(sections: list[str], args: argparse.Namespace, rounds: int, heapscope_cmd: list[str],
                     work_dir: Path, every: list[Workload]) -> list[str]:
    """The overhead table again on one CPU (`taskset -c 0`) and at `-i 512k`, heapscope alone:
    the one-core and always-on targets in the same run as the others."""
    if args.only or args.taskset or args.interval:
        return []  # the run is itself one of these settings
    lines: list[str] = []
    for section, setting in (("onecore", Setting("0", None)), ("alwayson", Setting(None, "512k"))):
        if section not in sections or not shutil.which("taskset") and setting.taskset:
            continue
        loads = [w for w in every if w.name.startswith(SETTING_LOADS)]
        tools: list[Tool] = [Unprofiled(), Heapscope(heapscope_cmd, interval=setting.interval),
                             NoProfile(heapscope_cmd, setting.interval)]
        samples = run_rounds(loads, tools, rounds, work_dir, setting.prefix())
        lines += [*overhead_section(Results(loads, tools, samples, setting)), ""]
    return lines


def script_sections(sections: list[str], args: argparse.Namespace, rounds: int, heapscope_cmd: list[str],
                    work_dir: Path, loads: list[Workload], py: Python) -> list[str]:
    """The trees, pyperf and reading sections (run_scripts.py), each after the tables above."""
    if args.only or args.taskset or args.interval:
        return []  # those options are the overhead tables'
    one = heapscope_cmd[0] if len(heapscope_cmd) == 1 else str(Path(sys.executable).with_name("heapscope"))
    lines: list[str] = []
    if "trees" in sections:
        lines += [*trees_section(args.quick, rounds, one, not args.no_peers), ""]
    if "pyperf" in sections:
        lines += [*pyperf_section(args.quick, (rounds + 1) // 2, shlex.join(heapscope_cmd), not args.no_peers), ""]
    if "reading" in sections:
        peers = [] if args.no_peers else [(w.name, w.argv, w.script) for w in loads
                                          if w.name.startswith(("cc1plus", "python json"))]
        try:
            lines += [*reading_section(args.quick, rounds, work_dir, peers, py.exe if py.memray else None), ""]
        except Exception as e:  # the tables above are still worth printing
            lines += [f"reading section failed: {type(e).__name__}: {e}", ""]
    return lines


def run_rounds(loads: list[Workload], tools: list[Tool], rounds: int, work_dir: Path,
               prefix: list[str] | None = None) -> dict[tuple[str, str], list[Sample]]:
    samples: dict[tuple[str, str], list[Sample]] = {}
    plain = next((t for t in tools if t.name == "none"), None)
    for r in range(rounds):
        order = tools[r % len(tools):] + tools[: r % len(tools)]
        for w in loads:
            if plain is not None:
                # Not counted: this VM drops file pages unused for a minute or two (DAMON's pageout),
                # so the round's first run of a workload read its files from disk again (a pandas
                # job: 5.7 s against 2.0 s, the same CPU), whichever tool ran first.
                warm = work_dir / "warm" / "profile"
                warm.parent.mkdir(exist_ok=True)
                run_once(w, plain, warm, work_dir, want_peak=False, prefix=prefix)
            for _ in range(w.repeat):
                for tool in order:
                    profile = work_dir / tool.name.replace(" ", "").replace("-", "") / "profile"
                    profile.parent.mkdir(exist_ok=True)
                    if tool.argv(w, profile, work_dir / "x") is None:
                        continue
                    s = run_once(w, tool, profile, work_dir, want_peak=r == rounds - 1, prefix=prefix)
                    samples.setdefault((w.name, tool.name), []).append(s)
                    print(f"round {r + 1}/{rounds} {w.name:40} {tool.name:32} {s.wall:7.2f}s exit {s.status}",
                          file=sys.stderr)
    return samples

if __name__ == "__main__":
    sys.exit(main())
