"""`heapscope record` in a terminal, as a shell's job: each signal reaches the target once and
job control works as without heapscope (heapscope/jobs.py).

An interactive bash runs in a tmux pane (a real terminal, a real shell's job control); the
tests type into it and read what the pane shows through `tmux pipe-pane`, line by line, with a
timeout on every wait. The target (programs/record_jobs.c) reads its commands from the
terminal and prints its signal counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from terminal_support import Pane, compiled, exit_status, foreground, pane_for, state, wait_foreground

HERE = Path(__file__).resolve().parent / "programs"

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("bash") is None,
                                 reason="tmux and bash are needed (apt-get install tmux)")]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled(tmp_path_factory.mktemp("record-terminal-bin"), HERE / "record_jobs.c")


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    yield from pane_for(tmp_path)


class Job:
    """`heapscope record -- record_jobs` typed into the pane, run as the shell's foreground job."""

    def __init__(self, pane: Pane, tmp_path: Path, target: Path, *args: str, quiet: bool = True) -> None:
        self.pane = pane
        cmd = [sys.executable, "-m", "heapscope", "record", *(["-q"] if quiet else []), "-i", "1", "--seed", "1",
               "--no-symbolize", "-o", str(tmp_path / "t.db"), "--", str(target), *args]
        pane.type(" ".join(cmd))
        ready = pane.wait_for(r"^ready pid=(\d+) pgid=(\d+) ppid=(\d+) fg=(\d)")
        self.pid, self.pgid, self.recorder, fg = map(int, ready.groups())
        pane.groups += [self.pgid, self.recorder]
        # THEN (every test) the target has a group of its own, the terminal's foreground
        assert self.pgid == self.pid and os.getpgid(self.recorder) == self.recorder != self.pgid
        assert fg == 1

    def counts(self, pattern: str) -> dict[str, int]:
        """The counts of the first line matching `pattern` ("got ..." or "final ...")."""
        line = self.pane.wait_for(pattern).string
        return {k: int(v) for k, v in re.findall(r"([A-Z]+)=(\d+)", line)}

    def finish(self, status: int) -> dict[str, int]:
        """`x STATUS` typed: the target's final counts; the shell saw record exit with STATUS."""
        self.pane.type(f"x {status}")
        final = self.counts(r"\bfinal ")
        self.pane.type("echo status=$?")
        assert self.pane.wait_for(r"^status=(\d+)").group(1) == str(status)
        return final


@pytest.mark.parametrize("route", ["kill-group", "kill-0"])
def test_a_signal_to_a_group_reaches_the_target_once(pane: Pane, tmp_path: Path, target: Path, route: str) -> None:
    # GIVEN record as a shell's foreground job, its target counting signals
    job = Job(pane, tmp_path, target)
    # WHEN a SIGTERM reaches record's group (`kill -- -PGID`), or the target's own (`kill 0`)
    if route == "kill-group":
        os.killpg(job.recorder, signal.SIGTERM)
    else:
        pane.type("k")
    assert job.counts(r"\bgot ")["TERM"] == 1
    # ... then a SIGHUP, a SIGINT and a SIGCONT to record alone, each passed on: once the target
    # has the SIGCONT, anything record would have passed on before it has arrived (Python runs
    # pending handlers lowest signal first, SIGTERM before SIGCONT)
    os.kill(job.recorder, signal.SIGHUP)
    pane.wait_for(r"\bgot .*HUP=1")
    os.kill(job.recorder, signal.SIGINT)
    pane.wait_for(r"\bgot .*INT=1")
    os.kill(job.recorder, signal.SIGCONT)
    pane.wait_for(r"\bgot .*CONT=1")
    # THEN each reached the target once, and record exits with its status
    assert job.finish(3) == {"TERM": 1, "HUP": 1, "INT": 1, "CONT": 1}


def test_ctrl_c_reaches_the_target_once(pane: Pane, tmp_path: Path, target: Path) -> None:
    # GIVEN a target that counts SIGINT, in the foreground
    job = Job(pane, tmp_path, target)
    # WHEN the user types Ctrl-C (then a SIGCONT to record alone, passed on after it)
    pane.key("C-c")
    pane.wait_for(r"\bgot .*INT=1")
    os.kill(job.recorder, signal.SIGCONT)
    pane.wait_for(r"\bgot .*CONT=1")
    # THEN the terminal's SIGINT reached it once; record did not die of it
    assert job.finish(0) == {"TERM": 0, "HUP": 0, "INT": 1, "CONT": 1}


@pytest.mark.parametrize(("key", "sig"), [("C-c", signal.SIGINT), ("C-\\", signal.SIGQUIT)])
def test_a_target_killed_from_the_keyboard_gives_its_status_and_the_terminal_back(
        pane: Pane, tmp_path: Path, target: Path, key: str, sig: signal.Signals) -> None:
    # GIVEN `stty tostop`: a process writing to the terminal while another group has it stops
    pane.type("stty tostop")
    # ... and a target that dies of SIGINT and SIGQUIT, record's summary on
    job = Job(pane, tmp_path, target, "die", quiet=False)
    # WHEN the user types Ctrl-C or Ctrl-\
    pane.key(key)
    # THEN record writes its summary (its group has the terminal again) and exits with the status
    pane.wait_for(rf"^heapscope: target died of {sig.name}")
    pane.wait_for(r"^heapscope: next: heapscope report")
    pane.type("echo status=$?")
    assert pane.wait_for(r"^status=(\d+)").group(1) == str(128 + sig)
    assert not os.path.exists(f"/proc/{job.pid}")


@pytest.mark.parametrize("route", ["ctrl-z", "kill-tstp"])
def test_ctrl_z_stops_the_job_and_fg_resumes_it(pane: Pane, tmp_path: Path, target: Path, route: str) -> None:
    # GIVEN a target in the foreground
    job = Job(pane, tmp_path, target)
    # WHEN the user types Ctrl-Z (SIGTSTP to the target's group), or SIGTSTP is sent to record alone
    if route == "ctrl-z":
        pane.key("C-z")
    else:
        os.kill(job.recorder, signal.SIGTSTP)
    # THEN the shell sees its job stopped and has the terminal back
    pane.wait_for(r"^\[1\]\+\s+Stopped\s")
    assert state(job.pid) == "T" and state(job.recorder) == "T"
    pane.type("echo between")
    pane.wait_for(r"^between$")
    # WHEN `fg`
    pane.type("fg")
    # THEN the target is continued once, in the foreground: it reads the terminal and sets its modes
    pane.wait_for(r"\bgot .*CONT=1")
    pane.type("t")
    pane.wait_for(r"^tty ok$")
    pane.type("e again")
    pane.wait_for(r"^echo again$")
    # ... and its exit status is record's
    assert job.finish(4) == {"TERM": 0, "HUP": 0, "INT": 0, "CONT": 1}


def test_bg_runs_the_job_in_the_background_and_fg_brings_it_back(pane: Pane, tmp_path: Path,
                                                                  target: Path) -> None:
    # GIVEN a stopped job (Ctrl-Z) whose target leaves the terminal alone until a SIGHUP (a
    # background job that reads the terminal would stop at the shell's next keystroke)
    job = Job(pane, tmp_path, target)
    pane.type("p")
    pane.wait_for(r"^paused$")
    pane.key("C-z")
    pane.wait_for(r"^\[1\]\+\s+Stopped\s")
    # WHEN `bg`
    pane.type("bg")
    # THEN the target runs on (continued once), in the background: the shell has the terminal
    pane.wait_for(r"\bgot .*CONT=1")
    pane.type("jobs")
    pane.wait_for(r"^\[1\]\+\s+Running\s")
    assert state(job.pid) != "T" and state(job.recorder) != "T"
    # WHEN `fg` (the shell gives the terminal to record's group and continues nothing: the job
    # runs), and the target reads the terminal again
    pane.type("fg")
    wait_foreground(job.recorder, job.recorder)
    os.kill(job.recorder, signal.SIGHUP)
    pane.type("e back")
    # THEN the kernel stops it (SIGTTIN: its group is not the foreground), record gives it the
    # terminal and continues it, and it reads what was typed
    pane.wait_for(r"^echo back$")
    assert foreground(job.recorder) == job.pgid
    assert job.finish(6) == {"TERM": 0, "HUP": 1, "INT": 0, "CONT": 2}


def test_a_background_job_that_reads_the_terminal_stops_until_fg(pane: Pane, tmp_path: Path) -> None:
    # GIVEN `head -n 1` recorded as a background job (`&`), the shell notifying at once (set -b)
    pane.type("set -b")
    pane.type(f"{sys.executable} -m heapscope record -q --no-symbolize -o {tmp_path / 'b.db'} -- head -n 1 &")
    # WHEN head reads the terminal, which the shell has
    # THEN the kernel stops it, record stops with it: the shell sees its job stopped for tty input
    pane.wait_for(r"^\[1\]\+\s+Stopped\s")
    pane.type("jobs -l")  # (`jobs` alone says only "Stopped")
    pane.wait_for(r"^\[1\]\+\s+\d+ Stopped \(tty input\)\s")
    # WHEN `fg`: head gets the terminal and reads the line typed
    pane.type("fg")
    pane.wait_for(r"head -n 1$")  # the shell echoes the job it brings to the foreground
    pane.type("typed after fg")
    pane.wait_for(r"^typed after fg$")
    pane.wait_for(r"^typed after fg$")
    pane.type("echo status=$?")
    assert pane.wait_for(r"^status=(\d+)").group(1) == "0"


def test_in_a_pipeline_the_target_gets_the_terminal_when_it_reads_it(pane: Pane, tmp_path: Path,
                                                                      target: Path) -> None:
    # GIVEN `record -- target | cat`: the shell's job is the pipeline, whose other command must
    # keep the terminal's keys (a `less` there reads them); cat ignores the Ctrl-C below
    pane.type("set -o pipefail")  # the job's status: record's, not cat's
    pane.type(f"{sys.executable} -m heapscope record -q --no-symbolize -o {tmp_path / 'p.db'} -- {target}"
              " | (trap '' INT; cat)")
    ready = pane.wait_for(r"^ready pid=(\d+) pgid=(\d+) ppid=(\d+) fg=(\d)")
    pid, pgid, recorder, fg = map(int, ready.groups())
    pane.groups += [pgid, recorder]
    # THEN the target has a group of its own; the pipeline's (record leads it) keeps the terminal
    assert pgid == pid and os.getpgid(recorder) == recorder and fg == 0
    # WHEN Ctrl-C (caught; record passes it on), Ctrl-Z then `fg`
    pane.key("C-c")
    pane.wait_for(r"\bgot .*INT=1")
    pane.key("C-z")
    pane.wait_for(r"^\[1\]\+\s+Stopped\s")
    pane.type("fg")
    pane.wait_for(r"\bgot .*CONT=1")
    # ... and the target reads the terminal: stopped by the kernel (SIGTTIN), its group is given
    # the terminal and continued, and it reads what was typed
    pane.type("e piped")
    pane.wait_for(r"^echo piped$")
    assert foreground(pid) == pid
    pane.type("x 2")
    # THEN one SIGINT, and the SIGCONT of `fg` plus the one that continued it with the terminal
    # (a target that never reads the terminal gets none: test_record_terminal_shared.py); the
    # status kept
    assert dict(re.findall(r"([A-Z]+)=(\d+)", pane.wait_for(r"\bfinal ").string)) == {
        "TERM": "0", "HUP": "0", "INT": "1", "CONT": "2"}
    pane.type("echo status=$?")
    assert pane.wait_for(r"^status=(\d+)").group(1) == "2"


def test_a_target_that_reads_the_terminal(pane: Pane, tmp_path: Path) -> None:
    # GIVEN `head -n 1` recorded in the foreground, under `stty tostop`
    pane.type("stty tostop")
    pane.type(f"{sys.executable} -m heapscope record -q --no-symbolize -o {tmp_path / 'h.db'} -- head -n 1")
    # WHEN the user types a line
    pane.wait_for(r"heapscope record")
    pane.type("a line from the keyboard")
    # THEN head read it from the terminal and printed it (the terminal's echo, then head's line)
    pane.wait_for(r"^a line from the keyboard$")
    pane.wait_for(r"^a line from the keyboard$")
    pane.type("echo status=$?")
    assert pane.wait_for(r"^status=(\d+)").group(1) == "0"


def test_ctrl_z_where_nothing_does_job_control_leaves_no_target_stopped(tmp_path: Path, target: Path) -> None:
    # GIVEN record leading the terminal's session (a pane's own command, no shell above it: its
    # group is orphaned, and the kernel discards a stop of it), its target in the foreground
    db = tmp_path / "s.db"
    cmd = f"{sys.executable} -m heapscope record -q --no-symbolize -o {db} -- {target}"
    pane = Pane(tmp_path, f"sh -c 'read go; exec {cmd}'")  # started once the pane is read
    try:
        pane.type("go")
        ready = pane.wait_for(r"^ready pid=(\d+) pgid=(\d+) ppid=(\d+) fg=(\d)")
        pid, _, recorder, fg = map(int, ready.groups())
        pane.groups += [pid, recorder]
        assert fg == 1 and os.getsid(recorder) == recorder
        # WHEN the user types Ctrl-Z: the target stops (its group, under record, is not orphaned)
        pane.key("C-z")
        # THEN record, which could not stop, continues it: it runs on, and ends with its status
        pane.wait_for(r"\bgot .*CONT=1")
        pane.type("x 3")
        assert dict(re.findall(r"([A-Z]+)=(\d+)", pane.wait_for(r"\bfinal ").string))["CONT"] == "1"
        assert exit_status(pane, recorder) == 3, "\n".join(pane.seen[-20:])
    finally:
        for group in pane.groups:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        pane.close()


# The pane's own command: record made a foreground job of its own, as a shell would, by a
# parent that does no job control after it (no shell takes the terminal back): what the terminal's
# foreground group is once record has exited is what record left.
LAUNCHER = """
import os, signal, sys
signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # tcsetpgrp from here, its group in the background
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.tcsetpgrp(0, os.getpid())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    os.execv(sys.argv[1], sys.argv[1:])
os.setpgid(pid, pid) if os.getpgid(pid) != pid else None
_, status = os.waitpid(pid, 0)
print(f"after record={pid} fg={os.tcgetpgrp(0)} status={os.waitstatus_to_exitcode(status)}", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("end", ["exit", "ctrl-c", "record-fails"])
def test_record_gives_the_terminal_back_to_its_group(tmp_path: Path, target: Path, end: str) -> None:
    # GIVEN record as a foreground job of its own, started by a program that leaves the terminal
    # as record leaves it
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    db = tmp_path / "r.db"
    cmd = " ".join([sys.executable, str(launcher), sys.executable, "-m", "heapscope", "-v", "record", "-q", "-i", "1",
                    "--no-symbolize", "-o", str(db), "--", str(target), *(["die"] if end == "ctrl-c" else [])])
    pane = Pane(tmp_path, f"sh -c 'read go; exec {cmd}'")
    try:
        pane.type("go")
        ready = pane.wait_for(r"^ready pid=(\d+) pgid=(\d+) ppid=(\d+) fg=(\d)")
        pid, _, recorder, fg = map(int, ready.groups())
        pane.groups += [pid, recorder]
        assert fg == 1
        # WHEN the target exits, dies of the terminal's Ctrl-C, or exits after record's own code
        # failed (it can no longer grow its files: a real EFBIG) and went on supervising it
        if end == "record-fails":
            _fail_writing(pane, recorder, db)
        if end == "ctrl-c":
            pane.key("C-c")
        else:
            pane.type("x 3")
        # THEN record has exited with its status, and left its own group the terminal's foreground
        after = pane.wait_for(r"^after record=(\d+) fg=(\d+) status=(\d+)")
        assert after.groups() == (str(recorder), str(recorder), "3" if end != "ctrl-c" else "130")
    finally:
        for group in pane.groups:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        pane.close()


def _fail_writing(pane: Pane, recorder: int, db: Path) -> None:
    """Dumps (SIGUSR1) of new allocations, record's files limited to their size, until it says
    profiling stopped."""
    pane.type("a")
    pane.wait_for(r"^ok a ")
    os.kill(recorder, signal.SIGUSR1)
    pane.wait_for(r"\(signal\) of pid")
    sizes = [p.stat().st_size for p in db.parent.iterdir() if p.name.startswith(db.name)]
    resource.prlimit(recorder, resource.RLIMIT_FSIZE, (max(sizes), max(sizes)))
    for _ in range(100):
        pane.type("a")
        pane.wait_for(r"^ok a ")
        os.kill(recorder, signal.SIGUSR1)
        if "error:" in pane.wait_for(r"\(signal\) of pid|error:").string:
            assert "profiling stopped" in pane.seen[-1]
            return
    pytest.fail("no error while the profile could not grow")
