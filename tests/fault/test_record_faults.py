"""`heapscope record` under faults: it supervises the target to its end and exits
with its status, whatever happens to heapscope, and it never harms what it attaches to.

The targets (tests/fault/programs/record_*.c) answer one line per command on
their stdout; the tests wait on those lines and on heapscope's -v log lines
(reader threads, queue timeouts), never on sleeps. Every process is started in
its own session and killed as a group if a test leaves it running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pty
import pwd
import queue
import re
import resource
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

HERE = Path(__file__).resolve().parent / "programs"
HEAPSCOPE = (sys.executable, "-m", "heapscope")
WAIT_S = 60.0
BLOCK = 64 * 1024

pytestmark = pytest.mark.timeout(300)


# --- programs and processes --------------------------------------------------------


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("record-faults-bin")
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    built: dict[str, Path] = {}
    for name in ("record_driven", "record_fanout", "record_threads3", "record_idle", "record_sigcount",
                 "record_stacks"):
        subprocess.run([cc, "-O0", "-g", "-fno-omit-frame-pointer", "-Wall", "-pthread", "-o", str(out / name),
                        str(HERE / f"{name}.c")], check=True, timeout=120)
        built[name] = out / name
    return built


class Lines:
    """A pipe read line by line by a thread; wait_for() waits with a timeout."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.closed = False
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: IO[bytes]) -> None:
        with contextlib.suppress(OSError):  # a pty's master reads EIO once its last user has gone: EOF
            for raw in iter(pipe.readline, b""):
                self.q.put(raw.decode(errors="replace").rstrip("\n"))
        self.q.put(None)

    def wait_for(self, pattern: str, timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"timed out waiting for {pattern!r}; seen:\n" + "\n".join(self.seen[-30:]))
            if line is None:
                self.closed = True
                pytest.fail(f"pipe closed while waiting for {pattern!r}; seen:\n" + "\n".join(self.seen[-30:]))
            self.seen.append(line)
            if re.search(pattern, line):
                return line

    def rest(self, timeout: float = WAIT_S) -> list[str]:
        """Every line up to EOF."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            try:
                line = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("pipe still open at the deadline; seen:\n" + "\n".join(self.seen[-30:]))
            if line is None:
                self.closed = True
            else:
                self.seen.append(line)
        return self.seen


class Proc:
    """A child in its own session with piped stdio."""

    def __init__(self, argv: list[str | Path], **kw: Any) -> None:
        self.p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True, **kw)
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)

    def send(self, cmd: str) -> None:
        assert self.p.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.p.stdin.write(cmd.encode() + b"\n")
            self.p.stdin.flush()

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.p.args!r} did not exit in {timeout} s; stderr:\n" + "\n".join(self.err.seen[-30:]))

    def errors(self) -> list[str]:
        return self.err.rest()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.p.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []

    def start(argv: list[str | Path], **kw: Any) -> Proc:
        p = Proc(argv, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.p.poll() is None:
            p.kill()


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Orphaned descendants (a target whose heapscope was killed) are re-parented to us."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_child_subreaper = 36
    assert libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0
    try:
        yield
    finally:
        libc.prctl(pr_set_child_subreaper, 0, 0, 0, 0)


def record(*opts: str | Path, verbose: bool = True) -> list[str | Path]:
    return [*HEAPSCOPE, *(["-v"] if verbose else []), "record", "-q", "-i", "1", "--seed", "1",
            "--no-symbolize", *opts]


def query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def unreleased(db: Path) -> int:
    total: int = query(db, "SELECT COALESCE(SUM(size), 0) FROM heap_profile_allocation")[0][0]
    return total


def heapscope_lines(lines: list[str]) -> list[str]:
    return [s for s in lines if s.startswith("heapscope:")]


def no_traceback(lines: list[str]) -> None:
    assert not any("Traceback" in s for s in lines), "\n".join(lines)


def wait_pid(pid: int, timeout: float = WAIT_S) -> int:
    """Exit status (shell style) of a child of ours (or an orphan we reap)."""
    fd = os.pidfd_open(pid)
    try:
        import select
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"pid {pid} still running at the deadline"
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def gdb_or_skip() -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (apt-get install gdb)")


# --- the target ends badly, or heapscope does -----------------------------------------------


def test_producer_sigkill_mid_run_leaves_the_target_running(bins: dict[str, Path], tmp_path: Path,
                                                            procs: Callable[..., Proc],
                                                            subreaper: None) -> None:
    # GIVEN a recording whose target holds 64 KiB
    h = procs(record("-o", tmp_path / "k.db", "--", bins["record_driven"]))
    target = int(h.out.wait_for(r"^ready ").split()[1])
    h.send("a")
    h.out.wait_for(r"^ok a 65536$")
    # WHEN heapscope is SIGKILLed
    os.kill(h.p.pid, signal.SIGKILL)
    assert h.p.wait(timeout=WAIT_S) == -signal.SIGKILL
    # THEN the target carries on (it is ours now) and ends with its own status
    h.send("a")
    h.out.wait_for(r"^ok a 131072$")
    h.send("x 7")
    assert wait_pid(target) == 7


@pytest.mark.parametrize(("command", "sig"), [("kill", signal.SIGKILL), ("segv", signal.SIGSEGV),
                                              ("abort", signal.SIGABRT)])
def test_target_killed_record_exits_128_plus_n_and_writes(bins: dict[str, Path], tmp_path: Path, procs: Callable[...,
                                                          Proc], command: str,
                                                          sig: int) -> None:
    db = tmp_path / "d.db"
    h = procs(record("-o", db, "--", bins["record_driven"]))
    h.out.wait_for(r"^ready ")
    for k in (1, 2):
        h.send("a")
        h.out.wait_for(rf"^ok a {k * BLOCK}$")
    h.send(command)
    assert h.wait() == 128 + sig
    no_traceback(h.errors())
    # the two blocks are in the profile, and the process ended
    assert unreleased(db) == 2 * BLOCK
    assert query(db, "SELECT COUNT(*) FROM process WHERE end_ts IS NOT NULL") == [(1,)]


def test_64_concurrent_processes(bins: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    r = subprocess.run(record("-o", db, "--", bins["record_fanout"], "together", "64", verbose=False),
                       capture_output=True, timeout=240)
    assert r.returncode == 0, r.stderr.decode()
    assert b"all 64 ready" in r.stdout
    assert query(db, "SELECT COUNT(*) FROM process") == [(65,)]
    # each child's two allocations (1000 and 3000 bytes) are in
    assert query(db, "SELECT SUM(count), SUM(size) FROM heap_profile_allocation WHERE count > 0"
                     " AND upid > 1") == [(128, 64 * 4000)]


def test_1000_processes_in_one_recording(bins: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    r = subprocess.run(record("-o", db, "--", bins["record_fanout"], "serial", "1000", "8", verbose=False),
                       capture_output=True, timeout=280)
    assert r.returncode == 0, r.stderr.decode()
    assert query(db, "SELECT COUNT(*) FROM process") == [(1001,)]
    # every child freed both its blocks: 2000 allocations seen, nothing unreleased
    assert query(db, "SELECT SUM(count), SUM(size) FROM heap_profile_allocation WHERE upid > 1"
                     " AND count > 0") == [(2000, 1000 * 4000)]
    assert query(db, "SELECT SUM(size) FROM heap_profile_allocation WHERE upid > 1") == [(0,)]


def test_descriptors_above_1024(bins: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN heapscope holding 1100 descriptors before it starts (select() stops at 1024)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 1300")
    fds = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300) if hard == resource.RLIM_INFINITY
                                                    else min(max(soft, 1300), hard), hard))
        null = os.open(os.devnull, os.O_RDONLY)
        fds = [null] + [os.dup(null) for _ in range(1100)]
        assert max(fds) > 1024
        db = tmp_path / "fd.db"
        r = subprocess.run(record("-o", db, "--", bins["record_fanout"], "together", "16", verbose=False),
                           capture_output=True, timeout=120, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    # THEN every client socket above 1024 is served
    assert r.returncode == 0, r.stderr.decode()
    assert query(db, "SELECT COUNT(*) FROM process") == [(17,)]


def test_600_concurrent_processes_under_a_1024_descriptor_limit(bins: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN heapscope started with the common soft limit of 1024 descriptors, and
    # 600 processes alive at once (a socket and a ring each: 1200 descriptors)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 2048")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    db = tmp_path / "many.db"
    r = subprocess.run(record("-o", db, "--shmem-size", "64k", "--", bins["record_fanout"], "together", "600",
                              verbose=False), capture_output=True, timeout=280, preexec_fn=limit)
    # THEN all of them are profiled
    assert r.returncode == 0, r.stderr.decode()
    assert b"all 600 ready" in r.stdout
    assert query(db, "SELECT COUNT(*) FROM process") == [(601,)]
    assert query(db, "SELECT SUM(count) FROM heap_profile_allocation WHERE upid > 1 AND count > 0") == [(1200,)]


def test_out_of_descriptors_is_counted_and_said(bins: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN a hard limit of 1024 descriptors that heapscope cannot raise, and 600 processes at once
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    db = tmp_path / "few.db"
    argv = [*HEAPSCOPE, "record", "-o", str(db), "--shmem-size", "64k", "--", str(bins["record_fanout"]), "together",
            "600"]
    r = subprocess.run(argv, capture_output=True, timeout=280, preexec_fn=limit)
    # THEN every process runs to its end; those heapscope could not take are counted and said
    assert r.returncode == 0, r.stderr.decode()
    assert b"all 600 ready" in r.stdout and b"done 600" in r.stdout
    ((profiled,),) = query(db, "SELECT COUNT(*) FROM process")
    ((refused,),) = query(db, "SELECT value FROM stats WHERE name = 'clients_without_descriptors'")
    assert refused > 0 and profiled + refused == 601
    assert f"{refused:,} processes not profiled: heapscope ran out of file descriptors".encode() in r.stderr


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True,
                       timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; its path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * 4096
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
    return filler


def test_disk_full_keeps_what_fits_and_the_status(bins: dict[str, Path], procs: Callable[..., Proc],
                                                  small_tmpfs: Path) -> None:
    db = small_tmpfs / "full.db"
    h = procs(record("-o", db, "-c", "20", "--", bins["record_driven"]))
    h.out.wait_for(r"^ready ")
    h.send("a")
    h.out.wait_for(r"^ok a 65536$")
    h.err.wait_for(r"dump \d+ \(periodic\) of pid \d+: 65536 bytes unreleased")
    # WHEN the disk fills up while the target keeps allocating
    filler = fill(small_tmpfs)
    for k in range(2, 40):
        h.send("a")
        h.out.wait_for(rf"^ok a {k * BLOCK}$")
    h.err.wait_for(r"disk full")
    h.send("x 5")
    # THEN the target's status, one line that says so, and the profile up to then
    assert h.wait() == 5
    lines = h.errors()
    no_traceback(lines)
    assert len([s for s in lines if "disk full" in s]) == 1, "\n".join(lines)
    filler.unlink()
    assert unreleased(db) >= BLOCK


def test_a_disk_full_from_the_start_leaves_the_target_its_run_and_status(small_tmpfs: Path) -> None:
    # GIVEN a file system already full: the profile's files can be created (empty), its schema not.
    # `record` makes the schema after the target's spawn (start-up cost), so the target starts.
    filler = fill(small_tmpfs)
    db = small_tmpfs / "full.db"
    # WHEN a program is recorded there
    r = subprocess.run(record("-o", db, "--", "sh", "-c", "echo ran; exit 7"), capture_output=True, text=True,
                       timeout=WAIT_S)
    filler.unlink()
    # THEN it runs, unprofiled, with its output and status, and one line says why
    assert r.stdout == "ran\n"
    assert r.returncode == 7, r.stderr
    lines = r.stderr.splitlines()
    no_traceback(lines)
    errors = [s for s in lines if "error:" in s]
    assert len(errors) == 1 and "disk is full" in errors[0] and "runs on unprofiled" in errors[0], r.stderr


def readable_alone(files: list[Path], into: Path) -> int:
    """The profile made of `files` copied into a fresh directory: its unreleased bytes."""
    into.mkdir()
    for f in files:
        shutil.copy(f, into / f.name)
    return unreleased(into / files[0].name)


def test_a_disk_full_at_the_final_checkpoint_says_which_files_make_the_profile(bins: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    # GIVEN file systems of sizes around the profile's: the smaller fill up during the dumps, the
    # larger hold the log and the file it is folded into; between, the dumps fit and the final
    # checkpoint (which copies the log into the file) does not
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    checkpoint_only = 0
    for size_kib in range(1280, 2304, 64):  # at -i 1 its log is ~1.4 MiB before the checkpoint
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
                           capture_output=True, timeout=30)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
        try:
            db = mnt / "p.db"
            # WHEN a program is recorded there
            done = subprocess.run(record("-o", db, "--", bins["record_stacks"], verbose=False), capture_output=True,
                                  text=True, timeout=WAIT_S)
            lines = done.stderr.splitlines()
            # THEN record exits with its status, and either the profile is one file, or record
            # says it is two, and those two make it
            assert done.returncode == 3, f"{size_kib} KiB: " + done.stderr
            no_traceback(lines)
            two = [s for s in lines if f"{db}-wal together" in s]
            if two:
                kept = readable_alone([db, Path(f"{db}-wal")], tmp_path / f"two{size_kib}")
                if len(lines) == 1:  # no dump failed before: only the checkpoint, all of it kept
                    checkpoint_only += 1
                    assert kept > 0
            else:
                assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
                readable_alone([db], tmp_path / f"one{size_kib}")
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
    assert checkpoint_only, "no size had room for the dumps and not for the checkpoint"


def test_internal_error_one_line_and_target_supervised(bins: dict[str, Path], tmp_path: Path, procs: Callable[...,
                                                       Proc]) -> None:
    # GIVEN a recording that works
    db = tmp_path / "ie.db"
    h = procs(record("-o", db, "--", bins["record_driven"]))
    target = int(h.out.wait_for(r"^ready ").split()[1])
    h.send("a")
    h.out.wait_for(r"^ok a 65536$")
    os.kill(h.p.pid, signal.SIGUSR1)
    h.err.wait_for(r"\(signal\) of pid")
    # WHEN heapscope can no longer grow its files (a real EFBIG from the kernel)
    sizes = [p.stat().st_size for p in tmp_path.iterdir() if p.name.startswith("ie.db")]
    resource.prlimit(h.p.pid, resource.RLIMIT_FSIZE, (max(sizes), max(sizes)))
    for k in range(2, 200):
        h.send("a")
        h.out.wait_for(rf"^ok a {k * BLOCK}$")
        os.kill(h.p.pid, signal.SIGUSR1)
        line = h.err.wait_for(r"\(signal\) of pid|error:")
        if "error:" in line:
            break
    else:
        pytest.fail("no error while the profile could not grow")
    # THEN one line, and the target is still supervised: alive, then its status
    assert "profiling stopped" in line and "runs on unprofiled" in line, line
    assert os.path.exists(f"/proc/{target}")
    h.send("a")
    h.out.wait_for(r"^ok a ")
    h.send("x 9")
    assert h.wait() == 9
    lines = h.errors()
    no_traceback(lines)
    assert len([s for s in lines if "error:" in s]) == 1, "\n".join(lines)


# --- signals at any moment -------------------------------------------------------------------


def wait_gone(pid: int, timeout_s: float = 30.0) -> None:
    """Until `pid` has terminated (a zombie counts): its pidfd becomes readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([fd], [], [], timeout_s)[0], f"pid {pid} still runs after {timeout_s} s"
    finally:
        os.close(fd)


def final_counts(out: Lines, send: Callable[[str], None]) -> dict[str, int]:
    """The target's (record_sigcount) signal counts at its exit."""
    send("x 0")
    line = out.wait_for(r"^final ")
    return {k: int(v) for k, v in (f.split("=") for f in line.split()[1:])}


def counted_once(h: Proc, route: Callable[[], None], name: str, recorder: int) -> dict[str, int]:
    """`route()` sends SIGHUP (or what `name` counts) some way; then a SIGTERM to record alone,
    passed on after it: once the target has that one, anything of the first that record passed
    on has arrived too (Python runs pending handlers lowest signal first). The final counts."""
    route()
    h.out.wait_for(rf"^got .*{name}=[1-9]")
    os.kill(recorder, signal.SIGTERM)
    h.out.wait_for(r"^got .*TERM=[1-9]")
    return final_counts(h.out, h.send)


@pytest.mark.parametrize("route", ["kill-group", "own-group", "timeout"])
def test_a_signal_to_the_group_reaches_the_target_once(bins: dict[str, Path], tmp_path: Path, procs: Callable[...,
                                                       Proc],
                                                       route: str) -> None:
    # GIVEN a target that counts its signals, recorded without a terminal (as by a supervisor)
    argv = record("-o", tmp_path / "g.db", "--", bins["record_sigcount"])
    if route == "timeout":
        argv = ["timeout", str(int(WAIT_S)), *argv]
    h = procs(argv)
    h.out.wait_for(r"^ready ")
    # WHEN a SIGHUP reaches record's process group: `kill -- -PGID`, the target's own `kill 0`,
    # timeout(1) passing one it got on to its child and then to its group (as at its time limit)
    sends = {"kill-group": lambda: os.killpg(h.p.pid, signal.SIGHUP), "own-group": lambda: h.send("g"),
             "timeout": lambda: os.kill(h.p.pid, signal.SIGHUP)}
    recorder = h.p.pid
    if route == "timeout":  # record is timeout's child
        (recorder,) = map(int, Path(f"/proc/{h.p.pid}/task/{h.p.pid}/children").read_text().split())
    counts = counted_once(h, sends[route], "HUP", recorder)
    # THEN the target got it once, as it would have without heapscope; a SIGTERM to record alone, once
    assert counts == {"HUP": 1, "TERM": 1, "INT": 0}
    assert h.wait() == 0, "\n".join(h.errors())


def test_ctrl_c_on_a_terminal_reaches_the_target_once(bins: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN record in the foreground of a terminal (a pty), its target counting signals
    pid, master = pty.fork()
    if pid == 0:  # the child: a session of its own, the pty its controlling terminal
        argv = [str(a) for a in record("-o", tmp_path / "t.db", "--", bins["record_sigcount"])]
        os.execv(argv[0], argv)
    try:
        out = Lines(os.fdopen(master, "rb", buffering=0))

        def send(text: str) -> None:
            os.write(master, text.encode() + b"\n")

        out.wait_for(r"^ready ")
        # WHEN the user types Ctrl-C (then a SIGTERM to record alone, which it passes on after)
        os.write(master, b"\x03")
        out.wait_for(r"got .*INT=1")  # after the terminal's echo of it, "^C"
        os.kill(pid, signal.SIGTERM)
        out.wait_for(r"got .*TERM=1")
        counts = final_counts(out, send)
        # THEN the terminal's SIGINT reached it once, and record did not die of it
        assert counts == {"HUP": 0, "TERM": 1, "INT": 1}
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


@pytest.mark.parametrize("moment", ["start", "mid-run", "after-exit"])
@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGINT, signal.SIGTERM])
def test_signals_at_any_moment(bins: dict[str, Path], tmp_path: Path, procs: Callable[..., Proc], sig: int,
                               moment: str) -> None:
    db = tmp_path / "s.db"
    h = procs(record("-o", db, "--", bins["record_driven"]))
    target = int(h.out.wait_for(r"^ready ").split()[1])
    if moment == "mid-run":
        h.send("a")
        h.out.wait_for(r"^ok a 65536$")
    if moment == "after-exit":
        h.send("a")
        h.out.wait_for(r"^ok a 65536$")
        h.send("x 3")
        # the target's final dump is written (its client says so from its last destructor)...
        h.err.wait_for(r"\(exit\) of pid")
        # ...and the target has gone (before that, a signal passed on still finds it alive)
        wait_gone(target)
    os.kill(h.p.pid, sig)
    if sig == signal.SIGUSR1 and moment != "after-exit":
        h.err.wait_for(r"\(signal\) of pid")
        h.send("x 3")
    code = h.wait()
    lines = h.errors()
    no_traceback(lines)
    if sig == signal.SIGUSR1 or moment == "after-exit":
        # a dump, or nothing: the target ends as it would have
        assert code == 3, "\n".join(lines)
    else:
        # passed on to the target, which dies of it: record says so with its status
        assert code == 128 + sig, "\n".join(lines)
    assert query(db, "SELECT COUNT(*) FROM process WHERE end_ts IS NOT NULL") == [(1,)]
    if moment != "start":
        assert unreleased(db) == BLOCK


def blocked_signals(pid: int) -> int:
    """SigBlk of /proc/PID/status: the mask of its main thread."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    pytest.fail(f"no SigBlk in /proc/{pid}/status")


def test_a_dump_signal_while_record_starts_waits_for_its_handler(bins: dict[str, Path], tmp_path: Path,
                                                                 procs: Callable[..., Proc]) -> None:
    # GIVEN record starting: its entry point has run its first line (SIGUSR1 held back), its
    # imports and handlers are still to come
    usr1 = 1 << (signal.SIGUSR1 - 1)
    for attempt in range(20):  # the window is ~40 ms: a busy machine may let this test miss it
        db = tmp_path / f"u{attempt}.db"
        h = procs(record("-o", db, "--", bins["record_driven"]))
        held = False
        while h.out.q.empty() and h.p.poll() is None:  # until its target has started
            with contextlib.suppress(FileNotFoundError):
                held = bool(blocked_signals(h.p.pid) & usr1)
            if held:
                break
        if held:
            break
        h.kill()
    else:
        pytest.fail("record never held SIGUSR1 back while it started")
    # WHEN a dump is asked for then
    os.kill(h.p.pid, signal.SIGUSR1)
    # THEN record lives on to start the target, which gets the mask record was given (this test
    # process's: a runner may start with some blocked), none of the ones record held back
    target = int(h.out.wait_for(r"^ready ").split()[1])
    held_back = sum(1 << (s - 1) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2,
                                           signal.SIGALRM))
    assert blocked_signals(target) == blocked_signals(os.getpid()) & ~held_back, \
        (blocked_signals(target), blocked_signals(os.getpid()))
    assert blocked_signals(target) & held_back == 0
    h.send("a")
    h.out.wait_for(r"^ok a 65536$")
    h.send("x 3")
    assert h.wait() == 3, "\n".join(h.errors())
    assert unreleased(db) == BLOCK


@pytest.mark.parametrize("stderr", ["closed", "full"])
def test_a_closed_or_failing_stderr_leaves_the_targets_status(bins: dict[str, Path], tmp_path: Path,
                                                              stderr: str) -> None:
    # GIVEN record with its summary and -v's log lines to write, its stderr closed (2>&-) or
    # on a device that refuses every write (2>/dev/full)
    db = tmp_path / "e.db"
    argv = [*HEAPSCOPE, "-v", "record", "-i", "1", "--seed", "1", "--no-symbolize", "-o", db, "--",
            bins["record_driven"]]
    redirect = "2>&-" if stderr == "closed" else "2>/dev/full"
    # WHEN the target keeps a block and exits 5
    r = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", *map(str, argv)], input=b"a\nx 5\n",
                       stdout=subprocess.PIPE, timeout=WAIT_S)
    # THEN record exits with its status and its profile is whole
    assert r.returncode == 5
    assert b"ok a 65536" in r.stdout
    assert unreleased(db) == BLOCK


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1])
def test_signals_from_the_targets_end_to_records_exit_leave_its_status(bins: dict[str, Path], tmp_path: Path,
                                                                       procs: Callable[..., Proc],
                                                                       sig: int) -> None:
    # One signal at a time finds the window only now and then (record died of SIGTERM, -15,
    # in one full run): from the target's end, one every 0.2 ms until record has exited.
    # Paced, to land in every moment of the window; a flood of dump requests is the next test.
    db = tmp_path / "s.db"
    h = procs(record("-o", db, "--", bins["record_driven"]))
    target = int(h.out.wait_for(r"^ready ").split()[1])
    h.send("a")
    h.out.wait_for(r"^ok a 65536$")
    h.send("x 3")
    wait_gone(target)
    sent = 0
    deadline = time.monotonic() + 60
    while h.p.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(h.p.pid, sig)
            sent += 1
        select.select([], [], [], 0.0002)
    code = h.wait()
    lines = h.errors()
    no_traceback(lines)
    assert sent > 0
    assert code == 3, f"{code} after {sent} signals\n" + "\n".join(lines)
    assert query(db, "SELECT COUNT(*) FROM process WHERE end_ts IS NOT NULL") == [(1,)]
    assert unreleased(db) == BLOCK


FLOODER = """
import os, signal, sys
pid = int(sys.argv[1])
sent = 0
while True:
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        break
    sent += 1
    if sent == 1000:
        print("flooding", flush=True)
print(sent)
"""


def _flooding(flooder: subprocess.Popen[str]) -> None:
    """Wait (bounded) until `flooder` has sent its first 1,000 signals: on a busy machine it
    could get no CPU before record ended, and the test would have shown nothing."""
    assert flooder.stdout is not None
    ready, _, _ = select.select([flooder.stdout], [], [], 60)
    assert ready and flooder.stdout.readline() == "flooding\n"


def test_a_flood_of_dump_requests_never_stops_the_recording(bins: dict[str, Path], tmp_path: Path,
                                                            procs: Callable[..., Proc]) -> None:
    # GIVEN a recording whose target keeps allocating while two processes send record SIGUSR1
    # (a dump request) as fast as they can, unpaced, until record has exited
    db = tmp_path / "f.db"
    h = procs(record("-o", db, "--", bins["record_driven"]))
    h.out.wait_for(r"^ready ")
    flooders = [subprocess.Popen([sys.executable, "-c", FLOODER, str(h.p.pid)], stdout=subprocess.PIPE, text=True)
                for _ in range(2)]
    try:
        for n in range(1, 6):
            h.send("a")
            h.out.wait_for(rf"^ok a {n * BLOCK}$")
        for f in flooders:
            _flooding(f)
        h.send("x 3")
        # THEN record ends as the target did, without a traceback, with everything recorded
        code = h.wait()
        sent = [int(f.communicate(timeout=60)[0] or 0) for f in flooders]
    finally:
        for f in flooders:
            if f.poll() is None:
                f.kill()
                f.wait(timeout=10)
    lines = h.errors()
    no_traceback(lines)
    assert code == 3, f"{code} after {sent} signals\n" + "\n".join(lines)
    assert unreleased(db) == 5 * BLOCK, f"after {sent} signals\n" + "\n".join(lines)
    # AND the requests that came while a dump was being taken were served together: far fewer
    # dumps than signals
    dumps = query(db, "SELECT COUNT(DISTINCT ts) FROM heap_profile_allocation")[0][0]
    assert 1 <= dumps < sum(sent) // 10, (dumps, sent)


# --- options --------------------------------------------------------------------------------


@pytest.mark.parametrize("opts", [
    ["-i", "0"], ["-i", str(2**63)], ["-i", str(2**40 + 1)], ["-i", "-5"], ["-i", ""],
    ["-n", ""], ["-n", "  "],
    ["-d", "nan"], ["-d", "inf"], ["-d", "0"], ["-d", "-1s"], ["-d", "1e30"],
    ["--max-producer-memory", "nan"], ["--max-producer-memory", "0"], ["--max-producer-memory", "inf"],
    ["--max-producer-cpu", "nan"], ["--max-producer-cpu", "-1"],
    ["-c", "-1"], ["-c", str(2**62)], ["--dump-phase", "-1"],
    ["--seed", "-1"], ["--seed", str(2**64)],
    ["--shmem-size", "12345"], ["--max-frames", "0"],
    ["-o", ""], ["--skip-symbol-prefix", ""],
    ["-p", "0"], ["-p", "x"],
])
def test_bad_option_values_are_refused_before_the_target_starts(tmp_path: Path, opts: list[str]) -> None:
    marker = tmp_path / "started"
    argv = [*HEAPSCOPE, "record", "-o", str(tmp_path / "o.db"), *opts]
    if opts[0] != "-p":
        argv += ["--", "sh", "-c", f"touch {marker}"]
    r = subprocess.run(argv, capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "Traceback" not in err
    assert len([s for s in err.splitlines() if "error" in s]) == 1, err
    assert not marker.exists(), "the target started"


# --- attach ---------------------------------------------------------------------------------


def attach_argv(pid: int | str, db: Path, *opts: str, verbose: bool = False) -> list[str | Path]:
    return record("-o", db, "-p", str(pid), *opts, verbose=verbose)


def test_attach_refuses_pid_1(tmp_path: Path) -> None:
    gdb_or_skip()
    r = subprocess.run(attach_argv(1, tmp_path / "x.db"), capture_output=True, timeout=60)
    assert r.returncode != 0 and b"pid 1 is init" in r.stderr, r.stderr.decode()
    assert b"Traceback" not in r.stderr


def test_attach_refuses_its_own_pid(tmp_path: Path) -> None:
    gdb_or_skip()
    # sh's $$ becomes heapscope's pid through exec
    cmd = " ".join(f"'{a}'" for a in attach_argv("$$", tmp_path / "x.db")).replace("'$$'", "$$")
    r = subprocess.run(["sh", "-c", f"exec {cmd}"], capture_output=True, timeout=60)
    assert r.returncode != 0 and b"this heapscope process itself" in r.stderr, r.stderr.decode()


def test_attach_refuses_a_static_binary(tmp_path: Path, procs: Callable[..., Proc]) -> None:
    gdb_or_skip()
    exe = tmp_path / "idle_static"
    build = subprocess.run(["cc", "-static", "-O0", "-o", str(exe), str(HERE / "record_idle.c")],
                           capture_output=True, timeout=120)
    if build.returncode != 0:
        pytest.skip(f"no static libc to link with: {build.stderr.decode()[-300:]}")
    t = procs([exe])
    t.out.wait_for(r"^ready ")
    r = subprocess.run(attach_argv(t.p.pid, tmp_path / "x.db"), capture_output=True, timeout=60)
    assert r.returncode != 0 and b"statically linked" in r.stderr, r.stderr.decode()
    # the target is unharmed
    t.send("q")
    assert t.wait() == 0


def test_attach_refuses_a_jemalloc_program(tmp_path: Path, procs: Callable[..., Proc]) -> None:
    gdb_or_skip()
    exe = tmp_path / "idle_jemalloc"
    build = subprocess.run(["cc", "-O0", "-o", str(exe), str(HERE / "record_idle.c"), "-ljemalloc"],
                           capture_output=True, timeout=120)
    if build.returncode != 0:
        pytest.skip("libjemalloc-dev is not installed (apt-get install libjemalloc-dev libjemalloc2)")
    t = procs([exe])
    t.out.wait_for(r"^ready ")
    r = subprocess.run(attach_argv(t.p.pid, tmp_path / "x.db"), capture_output=True, timeout=60)
    assert r.returncode != 0 and b"libjemalloc" in r.stderr, r.stderr.decode()
    assert len(heapscope_lines(r.stderr.decode().splitlines())) == 1
    t.send("q")
    assert t.wait() == 0


def test_attach_refuses_a_stopped_process(bins: dict[str, Path], tmp_path: Path, procs: Callable[..., Proc]) -> None:
    gdb_or_skip()
    t = procs([bins["record_driven"]])
    t.out.wait_for(r"^ready ")
    os.kill(t.p.pid, signal.SIGSTOP)
    try:
        r = subprocess.run(attach_argv(t.p.pid, tmp_path / "x.db"), capture_output=True, timeout=60)
    finally:
        os.kill(t.p.pid, signal.SIGCONT)
    assert r.returncode != 0 and b"is stopped" in r.stderr, r.stderr.decode()
    t.send("a")
    t.out.wait_for(r"^ok a 65536$")
    t.send("x 0")
    assert t.wait() == 0


def test_ten_attaches_to_a_threaded_allocating_program_never_hang(bins: dict[str, Path], tmp_path: Path,
                                                                  procs: Callable[..., Proc]) -> None:
    gdb_or_skip()
    for i in range(10):
        # a fresh process each time (one process attached again: the test after this one)
        t = procs([bins["record_threads3"]])
        t.out.wait_for(r"^ready ")
        r = subprocess.run(attach_argv(t.p.pid, tmp_path / f"a{i}.db", "-d", "300ms", verbose=True),
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        assert b"attached to pid" in r.stderr
        # every thread still makes progress (none is stuck on the malloc lock)
        t.send("c")
        t.out.wait_for(r"^ok c$", timeout=30)
        t.send("q")
        assert t.wait() == 0


def test_one_threaded_allocating_program_attached_five_times(bins: dict[str, Path], tmp_path: Path,
                                                             procs: Callable[..., Proc]) -> None:
    """Each attach after the first starts a new session while the program's threads allocate and
    free without pause: the old session's tables go only once no thread is inside them
    (client/session.c, start_again). No crash, no hang, and every session sees samples."""
    gdb_or_skip()
    t = procs([bins["record_threads3"]])
    t.out.wait_for(r"^ready ")
    for i in range(5):
        db = tmp_path / f"a{i}.db"
        r = subprocess.run(attach_argv(t.p.pid, db, "-d", "300ms", verbose=True),
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        assert b"attached to pid" in r.stderr
        con = sqlite3.connect(db)
        try:
            (samples,) = con.execute("SELECT value FROM stats WHERE name = 'heap_samples'").fetchone()
        finally:
            con.close()
        assert samples > 0, i
        t.send("c")
        t.out.wait_for(r"^ok c$", timeout=30)
    t.send("q")
    assert t.wait() == 0


def test_target_dying_during_an_attach_session(bins: dict[str, Path], tmp_path: Path, procs: Callable[...,
                                               Proc]) -> None:
    gdb_or_skip()
    t = procs([bins["record_driven"]])
    t.out.wait_for(r"^ready ")
    h = procs(attach_argv(t.p.pid, tmp_path / "die.db", verbose=True))
    h.err.wait_for(r"attached to pid")
    t.send("a")
    t.out.wait_for(r"^ok a 65536$")
    t.send("x 0")
    assert t.wait() == 0
    code = h.wait()
    lines = h.errors()
    no_traceback(lines)
    assert code != 0
    assert len([s for s in lines if f"pid {t.p.pid} exited during the session" in s]) == 1, "\n".join(lines)


@pytest.fixture
def unprivileged_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create an unprivileged user")
    name = f"hsatk{os.getpid() % 100000}"
    r = subprocess.run(["useradd", "-M", "-r", "-s", "/bin/false", name], capture_output=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"useradd failed: {r.stderr.decode().strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=30)


def test_attach_lock_is_not_a_planted_symlink(bins: dict[str, Path], tmp_path: Path, procs: Callable[..., Proc],
                                              unprivileged_user: pwd.struct_passwd) -> None:
    gdb_or_skip()
    # GIVEN a file of root's and a running target
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    t = procs([bins["record_driven"]])
    pid = int(t.out.wait_for(r"^ready ").split()[1])
    # WHEN an unprivileged user plants the old lock name as a symlink to it
    planted = Path(tempfile.gettempdir()) / f"heapscope-pid-{pid}.lock"
    r = subprocess.run(["ln", "-sfn", str(victim), str(planted)], user=unprivileged_user.pw_uid,
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    try:
        r = subprocess.run(attach_argv(pid, tmp_path / "l.db", "-d", "200ms"), capture_output=True, timeout=120)
    finally:
        with contextlib.suppress(FileNotFoundError):
            planted.unlink()
    # THEN root attached without writing through it
    assert r.returncode == 0, r.stderr.decode()
    assert victim.read_text() == "precious\n"
    t.send("x 0")
    assert t.wait() == 0


def test_attach_lock_is_not_held_by_another_user(bins: dict[str, Path], tmp_path: Path, procs: Callable[..., Proc],
                                                 unprivileged_user: pwd.struct_passwd) -> None:
    gdb_or_skip()
    # GIVEN a running target of root's
    t = procs([bins["record_driven"]])
    pid = int(t.out.wait_for(r"^ready ").split()[1])
    # and an unprivileged user's process holding the names another session could hold: the
    # abstract socket the lock once was, and the lock on /proc/PID/mem if it could open it
    squat = ("import os, socket, sys\n"
             "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
             f"s.bind(b'\\0heapscope-pid-{pid}')\n"
             "try:\n"
             f"    os.open('/proc/{pid}/mem', os.O_RDONLY)\n"
             "    print('opened', flush=True)\n"
             "except PermissionError:\n"
             "    print('refused', flush=True)\n"
             "sys.stdin.readline()\n")
    python = "/usr/bin/python3"  # the test's own may be in a directory only root can enter
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is needed to run a program as another user")
    squatter = procs([python, "-c", squat], user=unprivileged_user.pw_uid, cwd="/")
    try:
        assert squatter.out.wait_for(r"^(opened|refused)$") == "refused"
        # WHEN root attaches
        r = subprocess.run(attach_argv(pid, tmp_path / "l.db", "-d", "200ms"), capture_output=True, timeout=120)
        # THEN the other user's names did not keep it out
        assert r.returncode == 0, r.stderr.decode()
        assert b"already being profiled" not in r.stderr
        squatter.send("")
        assert squatter.wait() == 0
    finally:
        squatter.kill()  # before the user's removal (fixtures end in reverse): userdel refuses a user in use
    t.send("x 0")
    assert t.wait() == 0


# --- leftovers ------------------------------------------------------------------------------


def session_dir_of(pid: int) -> Path:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for item in env:
        if item.startswith(b"HEAPSCOPE_SOCKET="):
            return Path(item.split(b"=", 1)[1].decode()).parent
    pytest.fail(f"pid {pid} has no HEAPSCOPE_SOCKET in its environment")


def test_stale_session_dirs_of_a_killed_run_are_removed(bins: dict[str, Path], tmp_path: Path, procs: Callable[...,
                                                        Proc],
                                                        subreaper: None) -> None:
    # GIVEN a run SIGKILLed mid-run: its session directory stays behind
    h = procs(record("-o", tmp_path / "k.db", "--", bins["record_driven"]))
    target = int(h.out.wait_for(r"^ready ").split()[1])
    stale = session_dir_of(target)
    assert stale.name.startswith("heapscope-") and stale.is_dir()
    os.kill(h.p.pid, signal.SIGKILL)
    h.p.wait(timeout=WAIT_S)
    h.send("x 0")
    assert wait_pid(target) == 0
    assert stale.is_dir()
    # and a live run, and a heapscope-* directory that is not a session's
    live = procs(record("-o", tmp_path / "live.db", "--", bins["record_driven"]))
    live_target = int(live.out.wait_for(r"^ready ").split()[1])
    live_dir = session_dir_of(live_target)
    foreign = Path(tempfile.mkdtemp(prefix="heapscope-"))
    try:
        # WHEN the next run starts
        r = subprocess.run(record("-o", tmp_path / "n.db", "--", "true"), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        # THEN only the dead run's directory is gone
        assert not stale.exists()
        assert live_dir.is_dir() and foreign.is_dir()
    finally:
        shutil.rmtree(foreign, ignore_errors=True)
    live.send("x 0")
    assert live.wait() == 0
