"""`heapscope record` sharing its process group in a terminal (a pipeline, make, /usr/bin/time)
and `heapscope live`: each signal reaches the target as often as it does without heapscope
(heapscope/jobs.py, heapscope/launch.py).

Each case runs twice in an interactive bash in a tmux pane (tests/terminal_support.py): the
target alone, then under heapscope, and both must give the same counts. The target
(programs/record_groupsig.c) never touches the terminal: it reads its commands from a FIFO and
writes its counts to another, so what it counts is only what was sent to it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from terminal_support import WAIT_S, Pane, compiled, foreground, pane_for, state

HERE = Path(__file__).resolve().parent / "programs"

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("bash") is None,
                                 reason="tmux and bash are needed (apt-get install tmux)")]

# What each way of signalling gives the target without heapscope (and must give under it).
EXPECTED = {
    "kill-group": {"TERM": 1, "INT": 0, "HUP": 0, "USR2": 0, "CONT": 0},
    "kill-0": {"TERM": 1, "INT": 0, "HUP": 0, "USR2": 0, "CONT": 0},
    "ctrl-c": {"TERM": 0, "INT": 1, "HUP": 0, "USR2": 0, "CONT": 0},
    "ctrl-z-fg": {"TERM": 0, "INT": 0, "HUP": 0, "USR2": 0, "CONT": 1},
    "hup-usr2": {"TERM": 0, "INT": 0, "HUP": 1, "USR2": 1, "CONT": 0},
}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled(tmp_path_factory.mktemp("record-shared-bin"), HERE / "record_groupsig.c")


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    yield from pane_for(tmp_path)


class Target:
    """One run of record_groupsig: its command FIFO and what it writes."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.commands = tmp_path / f"{name}.in"
        self.out = tmp_path / f"{name}.out"
        os.mkfifo(self.commands)
        os.mkfifo(self.out)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(OSError), open(self.out, "rb") as f:  # waits for the target's open
            for raw in f:
                self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str) -> re.Match[str]:
        while True:
            try:
                line = self.lines.get(timeout=WAIT_S)
            except queue.Empty:
                pytest.fail(f"timed out waiting for {pattern!r}; the target wrote:\n" + "\n".join(self.seen))
            if line is None:
                pytest.fail(f"the target ended while waiting for {pattern!r}:\n" + "\n".join(self.seen))
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def send(self, text: str) -> None:
        fd = os.open(self.commands, os.O_WRONLY | os.O_NONBLOCK)  # the target holds it open
        try:
            os.write(fd, text.encode() + b"\n")
        finally:
            os.close(fd)

    def counts(self, pattern: str) -> dict[str, int]:
        return {k: int(v) for k, v in re.findall(r"([A-Z0-9]+)=(\d+)", self.wait_for(pattern).string)}


def command(context: str, wrap: str, tmp_path: Path, prog: Path, run: Target) -> str:
    """The line typed into the shell: the target run alone (wrap "") or under heapscope, in
    `context`."""
    inner = f"{wrap}{prog} {run.commands} {run.out}"
    if context == "pipeline":
        return f"{inner} | (trap '' INT TERM; cat)"
    if context == "time":
        return f"/usr/bin/time -f 'time status=%x' {inner}"
    if context == "make":
        makefile = tmp_path / f"{run.commands.stem}.mk"
        makefile.write_text(f"all:\n\t{inner}\n")
        return f"make -s -f {makefile}"
    assert context == "live"
    return inner


def heapscope(verb: str, tmp_path: Path, name: str) -> str:
    return (f"{sys.executable} -m heapscope {verb} -q -i 1 --seed 1 --no-symbolize -o {tmp_path / name}.db"
            " -- ")


def expected(context: str, way: str) -> dict[str, int]:
    """EXPECTED, but SIGHUP in place of SIGTERM under make: make passes a SIGTERM it gets on to
    its children, so that its target gets one or two (they merge when the second comes before the
    first is taken) without heapscope; no count to compare with."""
    counts = dict(EXPECTED[way])
    if context == "make" and way in ("kill-group", "kill-0"):
        counts["HUP"], counts["TERM"] = counts["TERM"], 0
    return counts


def signal_it(context: str, way: str, pane: Pane, run: Target, job: int) -> None:
    """`way` to the target's job (the group `job`), and its stop and `fg` for Ctrl-Z."""
    hup = context == "make"
    if way == "kill-group":
        os.killpg(job, signal.SIGHUP if hup else signal.SIGTERM)
    elif way == "kill-0":
        run.send("h" if hup else "k")
    elif way == "ctrl-c":
        pane.key("C-c")
    elif way == "hup-usr2":
        os.killpg(job, signal.SIGHUP)
        run.wait_for(r"^got .*HUP=1")
        os.killpg(job, signal.SIGUSR2)
    else:
        pane.key("C-z")
        pane.wait_for(r"^\[\d+\]\+\s+Stopped\s")
        pane.type("fg")
    run.wait_for("^got " + " ".join(f"{k}={v}" for k, v in expected(context, way).items()) + "$")



def one_run(pane: Pane, tmp_path: Path, prog: Path, context: str, way: str, under: bool) -> dict[str, int]:
    """The target's final counts after `way`, alone or under heapscope, in `context`."""
    name = f"{context}-{way}-{'hs' if under else 'alone'}"
    run = Target(tmp_path, name)
    wrap = heapscope("live" if context == "live" else "record", tmp_path, name) if under else ""
    pane.type(command(context, wrap, tmp_path, prog, run))
    pid, pgid = map(int, run.wait_for(r"^ready pid=(\d+) pgid=(\d+)").groups())
    job = _job_group(pid)
    pane.groups += [pgid, job]
    if under:  # a group of its own, the job's left to the others (make, time, cat, record)
        assert pgid == pid != job
    parent = _parent(pid)
    signal_it(context, way, pane, run, job)
    run.send("x 0")
    final = run.counts(r"^final ")
    _wait_gone(parent if under else pid)
    return final


@pytest.mark.parametrize("way", ["kill-group", "kill-0", "ctrl-c", "ctrl-z-fg", "hup-usr2"])
@pytest.mark.parametrize("context", ["pipeline", "make", "time"])
def test_record_sharing_its_group_passes_each_signal_once(pane: Pane, tmp_path: Path, target: Path,
                                                           context: str, way: str) -> None:
    if context == "time" and not os.access("/usr/bin/time", os.X_OK):
        pytest.skip("/usr/bin/time is needed (apt-get install time)")
    if context == "make" and shutil.which("make") is None:
        pytest.skip("make is needed")
    # GIVEN the target run by the shell in a pipeline, by make, or by /usr/bin/time: alone, then
    # under `heapscope record` (which then shares the job's group with cat, make or time)
    # WHEN the job's group gets a SIGTERM (`kill -- -PGID`; SIGHUP under make, expected()), the
    # target sends one to its own (`kill 0`), the user types Ctrl-C, or Ctrl-Z then `fg`, or the
    # group gets SIGHUP, then SIGUSR2
    alone = one_run(pane, tmp_path, target, context, way, under=False)
    pane.type("echo between")
    pane.wait_for(r"^between$")
    under = one_run(pane, tmp_path, target, context, way, under=True)
    # THEN the target counted what it counts without heapscope
    assert alone == expected(context, way)
    assert under == alone


@pytest.mark.parametrize("way", ["kill-group", "kill-0"])
def test_live_passes_each_signal_once(pane: Pane, tmp_path: Path, target: Path, way: str) -> None:
    pytest.importorskip("textual")
    # GIVEN the target alone, then under `heapscope live` (its view has the terminal: Ctrl-C and
    # Ctrl-Z are its keys, not signals)
    # WHEN the job's group gets a SIGTERM, or the target sends one to its own group
    alone = one_run(pane, tmp_path, target, "live", way, under=False)
    pane.type("echo between")
    pane.wait_for(r"^between$")
    under = one_run(pane, tmp_path, target, "live", way, under=True)
    # THEN the target counted what it counts without heapscope
    assert alone == expected("live", way)
    assert under == alone


def _job_group(pid: int) -> int:
    """The terminal's foreground process group seen from `pid` (tpgid): the shell's job."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[5])


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[1])


def _wait_gone(pid: int) -> None:
    """Until `pid` has exited and been reaped, or is a zombie (a bounded poll: it is not our child)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if state(pid) == "Z":
                return
        except OSError:
            return
        assert time.monotonic() < deadline, f"pid {pid} did not exit"
        select.select([], [], [], 0.01)


@pytest.mark.parametrize("under", [False, True])
def test_a_stop_and_continue_of_makes_group_at_once_leave_the_target_running(tmp_path: Path, target: Path,
                                                                             under: bool) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is needed")
    # GIVEN the target run by make (a group of its own, whose parent is in another: not orphaned),
    # alone or under record, which then shares make's group
    run = Target(tmp_path, "tstp")
    wrap = heapscope("record", tmp_path, "tstp") if under else ""
    makefile = tmp_path / "tstp.mk"
    makefile.write_text(f"all:\n\t{wrap}{target} {run.commands} {run.out}\n")
    make = subprocess.Popen(["make", "-s", "-f", str(makefile)], preexec_fn=os.setpgrp,  # noqa: PLW1509
                            stdin=subprocess.DEVNULL)
    target_group = None
    try:
        target_group = int(run.wait_for(r"^ready pid=\d+ pgid=(\d+)").group(1))
        # WHEN a SIGTSTP then a SIGCONT reach make's group at once, again and again (record may
        # see the SIGCONT before its SIGTSTP handler has run)
        rounds = 20
        for n in range(1, rounds + 1):
            os.killpg(make.pid, signal.SIGTSTP)
            os.killpg(make.pid, signal.SIGCONT)
            run.wait_for(rf"^got .*CONT={n}$")
        # THEN the target runs on: it answers, with one SIGCONT a round, and make ends with it
        run.send("x 0")
        assert run.counts(r"^final ") == {"TERM": 0, "INT": 0, "HUP": 0, "USR2": 0, "CONT": rounds}
        assert make.wait(timeout=WAIT_S) == 0
    finally:
        for group in (make.pid, target_group):  # the target has a group of its own under record
            if group is not None:
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
        make.wait()


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """programs/record_jobs.c: a target that reads the terminal (test_record_terminal.py's)."""
    return compiled(tmp_path_factory.mktemp("record-shared-reader"), HERE / "record_jobs.c")


def test_under_time_a_target_that_uses_the_terminal_gets_it_and_job_control_works(pane: Pane, tmp_path: Path,
                                                                                   reader: Path) -> None:
    if not os.access("/usr/bin/time", os.X_OK):
        pytest.skip("/usr/bin/time is needed (apt-get install time)")
    # GIVEN `/usr/bin/time heapscope record -- prog`, prog reading the terminal and setting its
    # modes as an editor does
    pane.type(f"/usr/bin/time -f 'time status=%x' {heapscope('record', tmp_path, 'vi')}{reader}")
    pid, pgid, recorder, fg = map(int, pane.wait_for(r"^ready pid=(\d+) pgid=(\d+) ppid=(\d+) fg=(\d)").groups())
    job = os.getpgid(recorder)
    pane.groups += [pgid, job]
    assert pgid == pid != job and fg == 0  # its own group; time's keeps the terminal for now
    # WHEN it sets the terminal's modes (SIGTTOU), then reads it
    pane.type("t")
    pane.wait_for(r"^tty ok$")
    pane.type("e typed")
    pane.wait_for(r"^echo typed$")
    # THEN it was given the terminal (continued once to take it: that count came with the lines above)
    assert foreground(pid) == pid
    if not [line for line in pane.seen if re.search(r"got .*CONT=1", line)]:  # (its line may share the echo's)
        pane.wait_for(r"got .*CONT=1")
    # WHEN Ctrl-Z (to its group alone now): time and record stop too, the shell has its job stopped
    pane.key("C-z")
    pane.wait_for(r"^\[\d+\]\+\s+Stopped\s")
    assert state(pid) == "T" and state(recorder) == "T" and state(job) == "T"
    # ... and `fg`: the terminal is the target's again, continued once, and reads
    pane.type("fg")
    pane.wait_for(r"\bgot .*CONT=2")
    pane.type("e again")
    pane.wait_for(r"^echo again$")
    pane.type("x 4")
    assert dict(re.findall(r"([A-Z]+)=(\d+)", pane.wait_for(r"\bfinal ").string)) == {
        "TERM": "0", "HUP": "0", "INT": "0", "CONT": "2"}
    # THEN time saw record exit with its status, and the shell has the terminal back
    pane.wait_for(r"time status=4")
    pane.type("echo status=$?")
    assert pane.wait_for(r"^status=(\d+)").group(1) == "4"


def test_a_signal_ignored_when_record_starts_stays_ignored_in_its_target(tmp_path: Path) -> None:
    # GIVEN record started with SIGHUP ignored (as by nohup), its target `sleep`, which sets nothing
    db = tmp_path / "n.db"
    argv = [sys.executable, "-m", "heapscope", "record", "-q", "--no-symbolize", "-o", str(db), "--", "sleep", "60"]
    def nohup() -> None:  # in the child: a group of its own, SIGHUP ignored
        os.setpgrp()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=nohup)  # noqa: PLW1509
    try:
        sleep = _child_running(p.pid, b"sleep\0")
        # THEN the target inherited it ignored
        assert _ignores(sleep, signal.SIGHUP)
        # WHEN a SIGHUP reaches record's group: passed on, ignored, the target runs on
        os.killpg(p.pid, signal.SIGHUP)
        os.kill(p.pid, signal.SIGTERM)  # passed on after it (lowest signal first): it ends the target
        # THEN it died of the SIGTERM, not of the SIGHUP
        assert p.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
    finally:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _child_running(pid: int, cmdline: bytes) -> int:
    """The child of `pid` that runs `cmdline` (its start, NUL-separated), once it does (a bounded
    poll: an editable install's import may run ninja first)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/cmdline").read_bytes().startswith(cmdline):
                    return int(child)
        assert time.monotonic() < deadline, f"{pid} runs no {cmdline!r}"
        select.select([], [], [], 0.01)


def _ignores(pid: int, sig: int) -> bool:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return False
