"""Profiling sessions: continuous dumps, SIGUSR1, dump-at-max, -n, -p attach/detach, guardrails,
and the Recording object used in-process (what a test-runner plugin or a live view drives).

The target (sessions/phases.c) is driven one command per line on its stdin and
answers one line per finished phase on its stdout; `heapscope record -v` logs
each dump (with its unreleased bytes) and each attach on stderr. The tests wait
on those lines (reader threads, queue timeouts), never on sleeps.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from heapscope.producer.config import RecordConfig
from heapscope.session import Recording, RecordingOptions

HERE = Path(__file__).resolve().parent / "sessions"
HEAPSCOPE = (sys.executable, "-m", "heapscope")
MIB = 1 << 20
WAIT_S = 30.0


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sessions-bin")
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", "-o", str(out / "phases"), str(HERE / "phases.c")],
                   check=True, timeout=60)
    for name in ("other_a", "other_b"):
        shutil.copy2(out / "phases", out / name)
    return out


class Lines:
    """A pipe read line by line by a thread; get() waits with a timeout."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe: IO[bytes]) -> None:
        for raw in iter(pipe.readline, b""):
            self.q.put(raw.decode(errors="replace").rstrip("\n"))
        self.q.put(None)

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = WAIT_S) -> str:
        while True:
            try:
                line = self.q.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"timed out waiting for {what}; seen:\n" + "\n".join(self.seen[-30:]))
            if line is None:
                pytest.fail(f"pipe closed while waiting for {what}; seen:\n" + "\n".join(self.seen[-30:]))
            self.seen.append(line)
            if predicate(line):
                return line


class Proc:
    """A child in its own session with piped stdio; killed as a group if left running."""

    def __init__(self, argv: Sequence[str | Path], **kw: Any) -> None:
        self.p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True, **kw)
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)

    def send(self, cmd: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(cmd.encode() + b"\n")
        self.p.stdin.flush()

    def step(self, cmd: str) -> int:
        """Send one phase command; return the bytes the target keeps after it."""
        self.send(cmd)
        line = self.out.wait_for(lambda s: s.startswith(f"ok {cmd} "), f"phase {cmd}")
        return int(line.split()[2])

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.p.args!r} did not exit in {timeout} s")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.p.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []

    def start(argv: Sequence[str | Path], **kw: Any) -> Proc:
        p = Proc(argv, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.p.poll() is None:
            p.kill()


def dump_line(reason: str, unreleased: int | None = None) -> Callable[[str], bool]:
    def match(line: str) -> bool:
        if f"({reason}) of pid" not in line:
            return False
        return unreleased is None or line.endswith(f": {unreleased} bytes unreleased")
    return match


def query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def cumulative_by_dump(db: Path, upid: int) -> list[tuple[str, int]]:
    """(reason, unreleased bytes up to that dump) for each dump of upid, in order."""
    dumps = query(db, "SELECT reason, ts_end FROM heap_profile WHERE upid = ? ORDER BY ts_end", (upid,))
    return [(reason, query(db, "SELECT COALESCE(SUM(size), 0) FROM heap_profile_allocation"
                               " WHERE upid = ? AND ts <= ?", (upid, ts))[0][0]) for reason, ts in dumps]


def record(*opts: str | Path) -> list[str | Path]:
    return [*HEAPSCOPE, "-v", "record", "-q", "-i", "1", "--seed", "1", "--no-symbolize", *opts]


def test_continuous_dumps_show_growth_dump_by_dump(bin_dir: Path, tmp_path: Path, procs: Callable[..., Proc]) -> None:
    # GIVEN a target that grows by 1 MiB per phase, recorded with a dump every 50 ms
    db = tmp_path / "c.db"
    h = procs(record("-o", db, "-c", "50", "--dump-phase", "0", "--", bin_dir / "phases"))
    h.out.wait_for(lambda s: s.startswith("ready"), "target start")
    # WHEN each phase ends, a periodic dump shows exactly the bytes kept so far
    for k in (1, 2, 3):
        assert h.step("a") == k * MIB
        h.err.wait_for(dump_line("periodic", k * MIB), f"a periodic dump with {k} MiB")
    h.send("q")
    assert h.wait() == 0
    # THEN the profile's dumps grow 0 -> 1 -> 2 -> 3 MiB, never shrink, one row per dump
    (upid,) = query(db, "SELECT upid FROM process")[0]
    series = cumulative_by_dump(db, upid)
    values = [v for _, v in series]
    assert values == sorted(values)
    for k in (1, 2, 3):
        assert k * MIB in values
    assert series[-1] == ("exit", 3 * MIB)
    # a dump with no change still has its row: more heap_profile rows than distinct values
    assert len(series) > len(set(values))


def test_sigusr1_dumps_once_per_signal(bin_dir: Path, tmp_path: Path, procs: Callable[..., Proc]) -> None:
    db = tmp_path / "u.db"
    h = procs(record("-o", db, "--", bin_dir / "phases"))
    h.out.wait_for(lambda s: s.startswith("ready"), "target start")
    assert h.step("a") == MIB
    # WHEN heapscope gets SIGUSR1 twice (waiting for each dump)
    os.kill(h.p.pid, signal.SIGUSR1)
    h.err.wait_for(dump_line("signal", MIB), "the first signal dump")
    assert h.step("a") == 2 * MIB
    os.kill(h.p.pid, signal.SIGUSR1)
    h.err.wait_for(dump_line("signal", 2 * MIB), "the second signal dump")
    h.send("q")
    assert h.wait() == 0
    # THEN exactly one dump per signal, plus the final one
    (upid,) = query(db, "SELECT upid FROM process")[0]
    assert cumulative_by_dump(db, upid) == [("signal", MIB), ("signal", 2 * MIB), ("exit", 2 * MIB)]


def test_dump_at_max_reports_the_peak_not_the_end(bin_dir: Path, tmp_path: Path, procs: Callable[..., Proc]) -> None:
    # GIVEN 3 MiB kept, all freed, 1 MiB kept again, and a 1 MiB spike that is freed at once
    db = tmp_path / "m.db"
    h = procs(record("-o", db, "--dump-at-max", "--", bin_dir / "phases"))
    h.out.wait_for(lambda s: s.startswith("ready"), "target start")
    for cmd in ("a", "a", "a", "f", "a", "p"):
        h.step(cmd)
    h.send("q")
    assert h.wait() == 0
    # THEN the dump holds the peak (3 MiB, all from grow), not the end state (1 MiB)
    (upid,) = query(db, "SELECT upid FROM process")[0]
    assert cumulative_by_dump(db, upid) == [("exit", 3 * MIB)]
    rows = query(db, "SELECT count, size FROM heap_profile_allocation WHERE upid = ?", (upid,))
    assert sum(c for c, _ in rows) == 48 and all(s > 0 for _, s in rows)


def test_name_picks_only_matching_children_of_a_script(bin_dir: Path, tmp_path: Path) -> None:
    # GIVEN a shell script that runs other_a twice and other_b once (all the same program)
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\nfor p in other_a other_b other_a; do\n"
                      f"  printf 'a\\nq\\n' | {bin_dir}/$p > /dev/null || exit 1\ndone\n")
    script.chmod(0o755)
    db = tmp_path / "n.db"
    r = subprocess.run(record("-o", db, "-n", "other_a", "--", script), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    # THEN only the two other_a processes are in the profile, each with its 1 MiB
    procs_rows = query(db, "SELECT upid, name FROM process ORDER BY upid")
    assert [n for _, n in procs_rows] == ["other_a", "other_a"], procs_rows
    for upid, _ in procs_rows:
        assert cumulative_by_dump(db, upid)[-1][1] == MIB
    stats = dict(query(db, "SELECT name, value FROM stats WHERE idx IS NULL"))
    assert stats["rejected_clients"] == 0
    assert stats["untargeted_clients"] >= 2  # the shell and other_b (more if sh forks before exec)


def _gdb_or_skip() -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (apt-get install gdb)")


# "registers": the calls heapscope makes itself on a CPU where gdb cannot restore the vector
# registers (producer/attach.py), forced here so that every machine checks that path too.
@pytest.mark.parametrize("calls", ["auto", "registers"])
def test_attach_then_detach_leaves_the_target_running(bin_dir: Path, tmp_path: Path, procs: Callable[...,
                                                      Proc], calls: str) -> None:
    _gdb_or_skip()
    # GIVEN a running target holding 4 blocks allocated before any attach
    expected = subprocess.run([bin_dir / "phases", "pre", "4"], input=b"a\nf\na\nq\n", capture_output=True,
                              timeout=30).stdout
    t = procs([bin_dir / "phases", "pre", "4"])
    t.out.wait_for(lambda s: s.startswith("ready"), "target start")
    db = tmp_path / "p.db"
    h = procs(record("-o", db, "-p", str(t.p.pid)), env={**os.environ, "HEAPSCOPE_ATTACH_CALLS": calls})
    h.err.wait_for(lambda s: "attached to pid" in s, "the attach")
    # WHEN it grows by 1 MiB, then frees everything (its pre-attach blocks too)
    assert t.step("a") == 16 * 64 * 1024 + 4 * 64 * 1024
    assert t.step("f") == 0
    h.p.send_signal(signal.SIGINT)  # Ctrl-C: detach
    assert h.wait() == 0, "\n".join(h.err.seen)
    # THEN the target runs on unprofiled and ends as it would have without heapscope
    assert t.step("a") == MIB
    t.send("q")
    t.out.wait_for(lambda s: s.startswith("bye"), "target exit")
    assert t.wait() == 0
    assert "\n".join(t.out.seen).encode() + b"\n" == expected
    (upid,) = query(db, "SELECT upid FROM process")[0]
    flags = query(db, "SELECT from_startup, disconnected, rejected_concurrent FROM heapscope_process")
    assert flags == [(0, 0, 0)]
    # only what was allocated after the attach is booked; the other frees are ignored
    stats = dict(query(db, "SELECT name, value FROM stats WHERE idx = ?", (upid,)))
    assert stats["heap_samples"] == 16 and stats["frees"] == 16
    assert cumulative_by_dump(db, upid)[-1] == ("end", 0)
    h.err.wait_for(lambda s: "detached from pid" in s, "the detach line")


def test_attaching_twice_is_rejected(bin_dir: Path, tmp_path: Path, procs: Callable[..., Proc]) -> None:
    _gdb_or_skip()
    t = procs([bin_dir / "phases"])
    t.out.wait_for(lambda s: s.startswith("ready"), "target start")
    h = procs(record("-o", tmp_path / "first.db", "-p", str(t.p.pid)))
    h.err.wait_for(lambda s: "attached to pid" in s, "the first attach")
    # WHEN a second session asks for the same pid
    second = tmp_path / "second.db"
    r = subprocess.run(record("-o", second, "-p", str(t.p.pid)), capture_output=True, timeout=60)
    # THEN it is refused with nothing written (test_reattach.py checks the status and the files)
    assert r.returncode != 0
    assert b"already being profiled" in r.stderr
    assert not second.exists()
    # and the first session is unharmed
    assert t.step("a") == MIB
    h.p.send_signal(signal.SIGINT)
    assert h.wait() == 0
    assert cumulative_by_dump(tmp_path / "first.db", 1)[-1] == ("end", MIB)
    t.send("q")
    assert t.wait() == 0


def test_attach_errors_are_clear(tmp_path: Path) -> None:
    _gdb_or_skip()
    base = [*HEAPSCOPE, "record", "-q", "-o", str(tmp_path / "x.db")]
    r = subprocess.run([*base, "-p", "999999999"], capture_output=True, timeout=60)
    assert r.returncode != 0 and b"no process with pid 999999999" in r.stderr
    r = subprocess.run([*base, "-p", "1", "--", "true"], capture_output=True, timeout=60)
    assert r.returncode == 2 and b"not both" in r.stderr
    assert b"Traceback" not in r.stderr


def test_attach_with_duration_detaches_by_itself(bin_dir: Path, tmp_path: Path, procs: Callable[..., Proc]) -> None:
    _gdb_or_skip()
    t = procs([bin_dir / "phases"])
    t.out.wait_for(lambda s: s.startswith("ready"), "target start")
    db = tmp_path / "d.db"
    r = subprocess.run(record("-o", db, "-p", str(t.p.pid), "--duration", "200ms"), capture_output=True,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    assert b"detached from pid" in r.stderr
    assert t.step("a") == MIB  # still alive, hooks inert
    t.send("q")
    assert t.wait() == 0


def test_memory_guardrail_stops_profiling_and_the_target_runs_on(bin_dir: Path, tmp_path: Path, procs: Callable[...,
                                                                 Proc]) -> None:
    # GIVEN a limit of 1 MB for heapscope itself (a Python process never fits in it)
    db = tmp_path / "g.db"
    h = procs(record("-o", db, "--max-producer-memory", "1", "--", bin_dir / "phases"))
    h.out.wait_for(lambda s: s.startswith("ready"), "target start")
    assert h.step("a") == MIB
    h.err.wait_for(lambda s: "guardrail hit" in s, "the guardrail")
    # WHEN the target keeps allocating after the guardrail
    assert h.step("a") == 2 * MIB
    h.send("q")
    assert h.wait() == 0
    # THEN one final dump with at most what came before it (the check runs once a
    # second, so it may come before the first phase too), and the flags say so
    (upid,) = query(db, "SELECT upid FROM process")[0]
    assert query(db, "SELECT hit_guardrail, disconnected FROM heapscope_process") == [(1, 0)]
    ((reason, kept),) = cumulative_by_dump(db, upid)
    assert reason == "guardrail" and kept in (0, MIB)
    assert query(db, "SELECT value FROM stats WHERE name = 'hit_guardrail'") == [(1,)]


def test_cpu_guardrail(bin_dir: Path, tmp_path: Path, procs: Callable[..., Proc]) -> None:
    db = tmp_path / "cpu.db"
    h = procs(record("-o", db, "--max-producer-cpu", "0.001", "--", bin_dir / "phases"))
    h.out.wait_for(lambda s: s.startswith("ready"), "target start")
    h.err.wait_for(lambda s: "guardrail hit: producer CPU" in s, "the CPU guardrail")
    h.send("q")
    assert h.wait() == 0
    assert query(db, "SELECT hit_guardrail FROM heapscope_process") == [(1,)]


class InProcess:
    """A Recording run in this process: the loop in this (main) thread, the test's
    steps in another; the Recording's -v log lines go to a queue the steps wait on."""

    def __init__(self, bin_dir: Path, db: Path) -> None:
        self.log: queue.Queue[str] = queue.Queue()
        self.rec = Recording(RecordConfig(interval=1, seed=1), db,
                             RecordingOptions(symbolize=False, forward_signals=False), log=self.log.put)
        self.argv = [str(bin_dir / "phases")]
        self.failure: list[BaseException] = []

    def wait_log(self, pattern: str) -> str:
        while True:
            line = self.log.get(timeout=WAIT_S)
            if pattern in line:
                return line

    def run(self, steps: Callable[[Recording, IO[bytes], Lines], None]) -> int:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        with self.rec as rec:
            rec.start(self.argv, stdin=in_r, stdout=out_w)
            os.close(in_r)
            os.close(out_w)
            stdin, out = os.fdopen(in_w, "wb", buffering=0), Lines(os.fdopen(out_r, "rb"))

            def drive() -> None:
                try:
                    steps(rec, stdin, out)
                except BaseException as e:  # reported by the test's thread
                    self.failure.append(e)
                    with contextlib.suppress(OSError):
                        stdin.write(b"q\n")
                    rec.stop()

            t = threading.Thread(target=drive, daemon=True)
            t.start()
            code = rec.run_until_exit()
            t.join(timeout=WAIT_S)
            stdin.close()
        if self.failure:
            raise self.failure[0]
        return code


def test_recording_in_process_dump_on_request(bin_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "inproc.db"
    ip = InProcess(bin_dir, db)

    def steps(rec: Recording, stdin: IO[bytes], out: Lines) -> None:
        out.wait_for(lambda s: s.startswith("ready"), "target start")
        stdin.write(b"a\n")
        out.wait_for(lambda s: s.startswith("ok a "), "phase a")
        # WHEN another thread asks for a dump (a live view, an HTTP endpoint)
        rec.request_dump("manual")
        assert rec.child is not None
        ip.wait_log(f"(manual) of pid {rec.child.pid}: {MIB} bytes unreleased")
        stdin.write(b"a\nq\n")

    # THEN the dump is in the profile, and the figures are the run's
    assert ip.run(steps) == 0
    (upid,) = query(db, "SELECT upid FROM process")[0]
    assert cumulative_by_dump(db, upid) == [("manual", MIB), ("exit", 2 * MIB)]
    s = ip.rec.summary
    assert (s.processes, s.samples, s.exit_status, s.problems) == (1, 32, 0, [])
    assert s.sampled_bytes == 2 * MIB and s.output_bytes > 0


def test_recording_in_process_stop_lets_the_target_run_on(bin_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "stop.db"
    ip = InProcess(bin_dir, db)

    def steps(rec: Recording, stdin: IO[bytes], out: Lines) -> None:
        out.wait_for(lambda s: s.startswith("ready"), "target start")
        stdin.write(b"a\n")
        out.wait_for(lambda s: s.startswith("ok a "), "phase a")
        # WHEN the session is stopped while the target runs
        rec.stop()
        ip.wait_log("(end) of pid")
        # THEN the target runs on unprofiled, and the recording waits for its end
        stdin.write(b"a\n")
        out.wait_for(lambda s: s.startswith(f"ok a {2 * MIB}"), "phase a after the stop")
        stdin.write(b"q\n")

    assert ip.run(steps) == 0
    (upid,) = query(db, "SELECT upid FROM process")[0]
    assert cumulative_by_dump(db, upid) == [("end", MIB)]
    assert ip.rec.summary.exit_status == 0


HOST = r"""
import signal, sys
from pathlib import Path
from heapscope.producer.config import RecordConfig
from heapscope.session import Recording, RecordingOptions

def ignored():
    return next(line for line in open("/proc/self/status") if line.startswith("SigIgn"))

before = ignored()
with Recording(RecordConfig(interval=1, seed=1), Path(sys.argv[1]), RecordingOptions(symbolize=False)) as rec:
    rec.start(["/bin/true"])
    print("status", rec.run_until_exit())
print("same", before == ignored(), signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
      signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_an_in_process_recording_leaves_its_hosts_signals_as_they_were(tmp_path: Path) -> None:
    # record's end leaves the signals it passed on ignored until it exits (cli/record.py);
    # a host that goes on must get its own back: with them ignored, every later child
    # inherited SIGTERM ignored, and a multiprocessing Pool's workers outlived terminate().
    out = subprocess.run([sys.executable, "-c", HOST, str(tmp_path / "host.db")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["status 0", "same True True True"], out.stdout + out.stderr
