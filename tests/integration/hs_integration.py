"""Helpers for integration tests: real `heapscope record` runs checked by SQL.

Each test compiles a target from tests/programs/ (ground truth in its comments and
from `PROGRAM --print-truth`), records it in a subprocess and reads the profile
database. Every subprocess is started in its own session and killed as a group if
it outlives its timeout, so a hang fails the test instead of the run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sqlite3
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

# Not importorskip: CI installs heapscope, and a missing package must fail loudly.
import heapscope  # noqa: F401

PROGRAMS_DIR = Path(__file__).resolve().parents[1] / "programs"
HEAPSCOPE = (sys.executable, "-m", "heapscope")
DEFAULT_SEED = 12345


# The example query of Perfetto's heapprofd docs (docs/profile.md), copied verbatim.
SEED_EXAMPLE_QUERY = """\
select a.callsite_id, a.ts, a.upid, f.name, f.rel_pc, m.build_id, m.name as mapping_name,
sum(a.size) as space_size, sum(a.count) as space_count
from heap_profile_allocation a join
stack_profile_callsite c ON (a.callsite_id = c.id) join
stack_profile_frame f ON (c.frame_id = f.id) join
stack_profile_mapping m ON (f.mapping = m.id)
group by 1, 2, 3, 4, 5, 6, 7 order by space_size desc;
"""


def _load_build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("heapscope_test_programs_build", PROGRAMS_DIR / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_programs = _load_build_module()


# --- ground truth -----------------------------------------------------------------


@dataclass(frozen=True)
class Views:
    """heapprofd's four views of one call path. -1 in a ground truth means "not fixed"."""

    alloc_space: int
    alloc_objects: int
    space: int
    objects: int

    def fields(self) -> dict[str, int]:
        return {
            "alloc_space": self.alloc_space,
            "alloc_objects": self.alloc_objects,
            "space": self.space,
            "objects": self.objects,
        }


def read_truth(binary: Path) -> dict[str, Views]:
    """Run `binary --print-truth` (unprofiled) and parse its `truth` lines."""
    out = subprocess.run([str(binary), "--print-truth"], capture_output=True, text=True, timeout=30, check=True)
    truth: dict[str, Views] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "truth":
            truth[parts[1]] = Views(*(int(p) for p in parts[2:]))
    assert truth, f"{binary} --print-truth printed no truth lines:\n{out.stdout}"
    return truth


class Programs:
    """Test programs compiled on first use and cached in tests/programs/bin/."""

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}

    def path(self, name: str) -> Path:
        if name not in self._paths:
            self._paths[name] = build_programs.build(name)
        return self._paths[name]

    def truth(self, name: str) -> dict[str, Views]:
        return read_truth(self.path(name))


# --- running processes ------------------------------------------------------------


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the session/process group a test started, then reap its leader."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
        proc.communicate(timeout=10)


@dataclass
class Run:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes

    def describe(self) -> str:
        err = self.stderr.decode(errors="replace")
        if len(err) > 4000:
            err = "...\n" + err[-4000:]
        return f"$ {' '.join(self.argv)}\nexit status {self.returncode}\n--- stderr ---\n{err}"


def run_process(
    argv: Sequence[str | Path],
    *,
    input: bytes | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> Run:
    """Run argv in its own session; on timeout kill the whole group and fail."""
    args = [str(a) for a in argv]
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    try:
        stdout, stderr = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"timed out after {timeout}s: {' '.join(args)}")
    finally:
        if proc.returncode is None:
            kill_group(proc)
    return Run(args, proc.returncode, stdout, stderr)


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Recording(Run):
    db: Path = field(default_factory=Path)

    def profile(self) -> Profile:
        assert self.db.exists(), f"no profile written at {self.db}\n{self.describe()}"
        return Profile(self.db)


class Recorder:
    """Runs `heapscope record` into a fresh database under the test's tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.count = 0

    def __call__(
        self,
        cmd: Sequence[str | Path],
        *,
        interval: int | None = 1,
        seed: int | None = DEFAULT_SEED,
        extra: Sequence[str] = (),
        input: bytes | None = None,
        timeout: float = 90,
    ) -> Recording:
        self.count += 1
        db = self.tmp_path / f"profile{self.count}.db"
        argv: list[str] = [*HEAPSCOPE, "record", "-o", str(db)]
        if interval is not None:
            argv += ["-i", str(interval)]
        if seed is not None:
            argv += ["--seed", str(seed)]
        argv += [*extra, "--", *(str(c) for c in cmd)]
        run = run_process(argv, input=input, timeout=timeout)
        return Recording(run.argv, run.returncode, run.stdout, run.stderr, db)


# --- reading profiles -------------------------------------------------------------


def frame_matches(frame_name: str | None, function: str) -> bool:
    """True if a frame's (demangled) name is `function`, with or without C++ parameters."""
    if not frame_name:
        return False
    return frame_name == function or frame_name.startswith(function + "(")


class Profile:
    """Read-only queries on a heapscope profile database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    def query(self, sql: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        return self.db.execute(sql, params).fetchall()

    def processes(self) -> list[sqlite3.Row]:
        return self.query("SELECT upid, pid, name, cmdline FROM process ORDER BY upid")

    def upids_named(self, name: str) -> list[int]:
        return [r["upid"] for r in self.processes() if r["name"] == name]

    def upid_of_pid(self, pid: int) -> int | None:
        rows = self.query("SELECT upid FROM process WHERE pid = ? ORDER BY upid", (pid,))
        return rows[-1]["upid"] if rows else None

    def only_upid(self, name: str) -> int:
        upids = self.upids_named(name)
        assert len(upids) == 1, f"expected one process named {name!r}, got {self.processes_text()}"
        return upids[0]

    def processes_text(self) -> str:
        return "; ".join(f"upid {r['upid']} pid {r['pid']} {r['name']!r}" for r in self.processes())

    def heapscope_process(self, upid: int) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM heapscope_process WHERE upid = ?", (upid,))
        return rows[0] if rows else None

    def stats(self, upid: int | None = None) -> dict[str, int]:
        """Stats by name, summed; with upid, that process's rows plus global (NULL idx) rows."""
        if upid is None:
            rows = self.query("SELECT name, SUM(value) AS v FROM stats GROUP BY name")
        else:
            rows = self.query(
                "SELECT name, SUM(value) AS v FROM stats WHERE idx = ? OR idx IS NULL GROUP BY name", (upid,)
            )
        return {r["name"]: r["v"] for r in rows}

    def callsite_views(self, upid: int) -> dict[int, Views]:
        """The four views per callsite of a process at its last dump."""
        rows = self.query(
            """
            SELECT callsite_id,
                   SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS alloc_space,
                   SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS alloc_objects,
                   SUM(size) AS space,
                   SUM(count) AS objects
            FROM heap_profile_allocation WHERE upid = ? GROUP BY callsite_id
            """,
            (upid,),
        )
        return {
            r["callsite_id"]: Views(r["alloc_space"], r["alloc_objects"], r["space"], r["objects"]) for r in rows
        }

    def stacks(self, upid: int) -> dict[int, list[str]]:
        """For each callsite with allocations in upid: frame names from leaf to root."""
        rows = self.query(
            """
            WITH RECURSIVE
              leaf(id) AS (SELECT DISTINCT callsite_id FROM heap_profile_allocation WHERE upid = ?),
              walk(leaf_id, id, depth) AS (
                SELECT id, id, 0 FROM leaf
                UNION ALL
                SELECT walk.leaf_id, c.parent_id, walk.depth + 1
                FROM walk JOIN stack_profile_callsite c ON c.id = walk.id
                WHERE c.parent_id IS NOT NULL AND walk.depth < 1000
              )
            SELECT walk.leaf_id AS leaf_id, walk.depth AS up, f.name AS name
            FROM walk
            JOIN stack_profile_callsite c ON c.id = walk.id
            JOIN stack_profile_frame f ON f.id = c.frame_id
            ORDER BY walk.leaf_id, walk.depth
            """,
            (upid,),
        )
        stacks: dict[int, list[str]] = defaultdict(list)
        for r in rows:
            stacks[r["leaf_id"]].append(r["name"] or "")
        return dict(stacks)

    def views_of(self, upid: int, function: str) -> Views:
        """Views summed over every callsite whose stack contains `function` (each callsite once)."""
        per_callsite = self.callsite_views(upid)
        stacks = self.stacks(upid)
        total = [0, 0, 0, 0]
        for cs, views in per_callsite.items():
            if any(frame_matches(name, function) for name in stacks.get(cs, [])):
                for i, v in enumerate((views.alloc_space, views.alloc_objects, views.space, views.objects)):
                    total[i] += v
        return Views(*total)

    def describe_process(self, upid: int) -> str:
        """Every callsite of a process with its views and stack, for failure messages."""
        lines = [f"profile {self.path}, upid {upid}; processes: {self.processes_text()}"]
        hp = self.heapscope_process(upid)
        if hp is not None:
            facts = dict(zip(hp.keys(), tuple(hp), strict=True))  # sqlite3.Row has no items()
            lines.append("heapscope_process: " + ", ".join(f"{k}={v!r}" for k, v in facts.items()))
        lines.append(f"stats: {self.stats(upid)}")
        stacks = self.stacks(upid)
        for cs, v in sorted(self.callsite_views(upid).items(), key=lambda kv: -kv[1].alloc_space)[:40]:
            lines.append(
                f"  cs {cs}: alloc {v.alloc_space}/{v.alloc_objects} space {v.space}/{v.objects}  "
                + " <- ".join(stacks.get(cs, ["?"])[:8])
            )
        return "\n".join(lines)


def mismatches(
    profile: Profile, upid: int, truth: dict[str, Views], functions: Sequence[str] | None = None
) -> list[str]:
    """Every (function, view) whose profiled value differs from the ground truth."""
    out = []
    for fn in functions if functions is not None else truth:
        got = profile.views_of(upid, fn).fields()
        for view, expected in truth[fn].fields().items():
            if expected >= 0 and got[view] != expected:
                out.append(f"{fn}: {view} expected {expected}, got {got[view]}")
    return out


def assert_exact(
    profile: Profile, upid: int, truth: dict[str, Views], functions: Sequence[str] | None = None, context: str = ""
) -> None:
    bad = mismatches(profile, upid, truth, functions)
    assert not bad, "\n".join([*bad, context, profile.describe_process(upid)])


def joined_fixes(stderr: str) -> str:
    """record's summary with each module's fix back on its module's line: the summary puts a fix
    on a line of its own when the two would not fit in 120 columns."""
    lines = stderr.splitlines()
    for line in lines:  # ...and only then: a line with a fix fits, or is the fix alone
        if "; fix: " in line:
            assert len(line) <= 120, line
    return stderr.replace("\nheapscope:     fix: ", "; fix: ")
