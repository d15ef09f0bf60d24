"""`heapscope record -p PID` again and again on one process, and the attaches it refuses.

A process can be attached, detached and attached again any number of times: each attach
starts a new session in the client already loaded (client/session.c, start_again), and each
profile holds what was allocated in its own window only. A refused attach writes no file,
exits with status 3 (errors.AttachError) and says why in one line.

The targets are driven one command per line on their stdin and answer one line each; the
tests wait on those lines and on `record -v`'s attach line, never on sleeps.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_python import INTERPRETERS, _paths
from test_sessions import HEAPSCOPE, HERE, MIB, Proc, cumulative_by_dump, query, record

Procs = Callable[[list[str | Path]], Proc]

pytestmark = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)")

ATTACH_REFUSED = 3  # errors.AttachError.exit_code, docs/recording.md
PY_TARGET = Path(__file__).parents[1] / "programs" / "python" / "attached.py"


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """phases (tests/integration/sessions/phases.c): a C server that grows and frees on command."""
    out = tmp_path_factory.mktemp("reattach-bin")
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", "-o", str(out / "phases"), str(HERE / "phases.c")],
                   check=True, timeout=60)
    return out


@pytest.fixture
def procs() -> Iterator[Callable[[list[str | Path]], Proc]]:
    started: list[Proc] = []

    def start(argv: list[str | Path]) -> Proc:
        p = Proc([str(a) for a in argv])
        started.append(p)
        return p

    yield start
    for p in started:
        if p.p.poll() is None:
            p.kill()


def _quiet_record(*opts: str | Path) -> list[str | Path]:
    """`record` without -v (which shows a refusal's traceback, for debugging)."""
    return [*HEAPSCOPE, "record", "-q", "--no-symbolize", *opts]


def _no_profile(db: Path) -> None:
    for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        assert not name.exists(), f"{name} was written by a refused attach"


def _attach(db: Path, pid: int, procs: Procs, *opts: str) -> Proc:
    h: Proc = procs(record("-o", db, *opts, "-p", str(pid)))
    h.err.wait_for(lambda s: "attached to pid" in s, "the attach")
    return h


def _detach(h: Proc) -> None:
    h.p.send_signal(signal.SIGINT)
    assert h.wait() == 0, "\n".join(h.err.seen)
    h.err.wait_for(lambda s: "detached from pid" in s, "the detach line")


@pytest.mark.timeout(300)
def test_a_c_server_is_attached_three_times(bins: Path, tmp_path: Path, procs: Procs) -> None:
    # GIVEN a C server holding 4 blocks of 64 KiB from before any attach
    t = procs([bins / "phases", "pre", "4"])
    t.out.wait_for(lambda s: s.startswith("ready"), "target start")
    pre = 4 * 64 * 1024
    # WHEN it is attached and grows by 1 MiB, then detached
    h = _attach(tmp_path / "1.db", t.p.pid, procs)
    assert t.step("a") == pre + MIB
    _detach(h)
    assert t.step("a") == pre + 2 * MIB  # between two sessions: not in any profile
    # AND attached again: it grows by 1 MiB and frees everything, the first window's blocks too
    h = _attach(tmp_path / "2.db", t.p.pid, procs)
    assert t.step("a") == pre + 3 * MIB
    assert t.step("f") == 0
    _detach(h)
    # AND a third time: 1 MiB more
    h = _attach(tmp_path / "3.db", t.p.pid, procs)
    assert t.step("a") == MIB
    _detach(h)
    t.send("q")
    t.out.wait_for(lambda s: s.startswith("bye"), "target exit")
    assert t.wait() == 0
    # THEN each profile holds its own window: 16 blocks each (interval 1: every block), and
    # only the second window's frees of its own blocks (the first window's are not its own)
    expected = {"1.db": (16, 0, MIB), "2.db": (16, 16, 0), "3.db": (16, 0, MIB)}
    for name, (samples, frees, unreleased) in expected.items():
        db = tmp_path / name
        ((upid,),) = query(db, "SELECT upid FROM process")
        stats = dict(query(db, "SELECT name, value FROM stats WHERE idx = ?", (upid,)))
        assert (stats["heap_samples"], stats["frees"]) == (samples, frees), (name, stats)
        assert cumulative_by_dump(db, upid)[-1] == ("end", unreleased), name
        assert query(db, "SELECT from_startup, disconnected, rejected_concurrent FROM heapscope_process") == \
            [(0, 0, 0)], name


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
def test_a_python_server_is_attached_three_times(tmp_path: Path, procs: Procs) -> None:
    from hs_integration import Profile

    python = INTERPRETERS[-1]
    truth = subprocess.run([python, str(PY_TARGET), "--print-truth"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    n, small_size, _, _ = map(int, truth.split())
    t = procs([python, str(PY_TARGET)])
    t.out.wait_for(lambda s: s == "ready", "target start")
    lines = PY_TARGET.read_text().splitlines()
    small_line = next(i + 1 for i, s in enumerate(lines) if "# ALLOC small" in s)
    for window in range(1, 4):
        # WHEN it is attached, makes N small objects (pymalloc's) `window` times, and is detached
        db = tmp_path / f"{window}.db"
        h = _attach(db, t.p.pid, procs, "-i", "1")
        t.send("wrap")
        assert t.out.wait_for(lambda s: s.startswith("wrapped"), "the wrap") == "wrapped 1"
        for _ in range(window):
            t.send("small")
            t.out.wait_for(lambda s: s == "ok small", "small")
        _detach(h)
        t.send("small")  # between two sessions: in no profile
        t.out.wait_for(lambda s: s == "ok small", "small")
        # THEN its profile holds exactly the small objects of its own window, in Python's heap
        profile = Profile(db)
        sizes = {r["callsite_id"]: int(r["s"]) for r in profile.query(
            "SELECT callsite_id, SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS s"
            " FROM heap_profile_allocation GROUP BY callsite_id")}
        got: dict[str, int] = defaultdict(int)
        for cs, frames in _paths(profile).items():
            py = [f for f in frames if f[1] == "python"]
            if py and py[0][2] == str(PY_TARGET) and py[0][0] == "small" and py[0][3] == small_line:
                got["small"] += sizes.get(cs, 0)
        assert got["small"] == window * n * small_size, (window, dict(got))
        assert profile.stats().get("python_allocators") == 1, profile.stats()
    t.send("quit")
    assert t.wait() == 0


def test_attaching_a_pid_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    r = subprocess.run(_quiet_record("-o", str(db), "-p", "999999999"), capture_output=True, timeout=60)
    assert r.returncode == ATTACH_REFUSED, r.stderr
    assert r.stderr.decode().strip() == "heapscope: error: no process with pid 999999999"
    _no_profile(db)


@pytest.mark.timeout(120)
def test_attaching_a_pid_another_session_profiles_is_refused(bins: Path, tmp_path: Path,
                                                             procs: Procs) -> None:
    t = procs([bins / "phases"])
    t.out.wait_for(lambda s: s.startswith("ready"), "target start")
    h = _attach(tmp_path / "first.db", t.p.pid, procs)
    second = tmp_path / "second.db"
    r = subprocess.run(_quiet_record("-o", second, "-p", str(t.p.pid)), capture_output=True, timeout=60)
    assert r.returncode == ATTACH_REFUSED, r.stderr
    assert b"already being profiled by another heapscope session" in r.stderr
    assert b"Traceback" not in r.stderr
    _no_profile(second)
    assert t.step("a") == MIB  # the first session is unharmed
    _detach(h)
    assert cumulative_by_dump(tmp_path / "first.db", 1)[-1] == ("end", MIB)
    t.send("q")
    assert t.wait() == 0


@pytest.mark.timeout(120)
def test_attaching_a_program_started_under_heapscope_is_refused(bins: Path, tmp_path: Path,
                                                                procs: Procs) -> None:
    # GIVEN a program that `record` started (the client preloaded, its session running)
    started = procs(record("-o", tmp_path / "started.db", "--", bins / "phases"))
    started.out.wait_for(lambda s: s.startswith("ready"), "target start")
    (pid,) = [int(p) for p in subprocess.run(["pgrep", "-P", str(started.p.pid)], capture_output=True,
                                             text=True, timeout=10).stdout.split()]
    # WHEN another session attaches to it: the client says its session is running
    db = tmp_path / "attach.db"
    r = subprocess.run(_quiet_record("-o", db, "-p", str(pid)), capture_output=True, timeout=120)
    assert r.returncode == ATTACH_REFUSED, r.stderr
    assert b"is already being profiled" in r.stderr
    _no_profile(db)
    # THEN the first session goes on
    started.send("a")
    started.out.wait_for(lambda s: s.startswith("ok a "), "phase a")
    started.send("q")
    assert started.wait() == 0
    reason, unreleased = cumulative_by_dump(tmp_path / "started.db", 1)[-1]
    assert reason == "exit" and MIB <= unreleased < MIB + 4096  # with the C library's own start-up blocks
