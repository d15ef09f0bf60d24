"""The `heapscope` command (src/heapscope/cli/launcher.c): record's signals held from its first
instructions, through the interpreter's start, until its handlers exist; the target and every
other command get the signal mask they were given."""

from __future__ import annotations

import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from heapscope import sigmask

HERE = Path(__file__).resolve().parent / "programs"
LAUNCHER = Path(sys.executable).parent / "heapscope"  # where pip put the command beside this Python
WAIT_S = 60.0

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("launcher-bin") / "launch_traced"
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    subprocess.run([cc, "-O1", "-Wall", "-o", str(out), str(HERE / "launch_traced.c")], check=True, timeout=120)
    return out


def test_the_command_is_the_launcher() -> None:
    assert LAUNCHER.is_file(), f"{LAUNCHER}: the install made no `heapscope` command beside {sys.executable}"
    assert LAUNCHER.read_bytes()[:4] == b"\x7fELF"  # not a console script: Python starts after the block


def test_the_launcher_holds_what_sigmask_holds_and_sigint() -> None:
    source = (Path(sigmask.__file__).parent / "cli" / "launcher.c").read_text()
    m = re.search(r"static const int held\[\] = \{([^}]*)\}", source)
    assert m is not None
    in_c = [getattr(signal, name.strip()) for name in m.group(1).split(",")]
    assert in_c == [*sigmask.HELD, signal.SIGINT]


@pytest.mark.parametrize("sig, status", [(signal.SIGUSR1, 3), (signal.SIGTERM, 128 + signal.SIGTERM),
                                         (signal.SIGHUP, 128 + signal.SIGHUP)])
def test_a_signal_a_few_instructions_after_exec_reaches_records_handler(traced: Path, tmp_path: Path,
                                                                         sig: int, status: int) -> None:
    # GIVEN `heapscope record` stopped at its exec, then run for 16 instructions (the block is the
    # 7th; the Python interpreter, run as `python -m heapscope`, dies of the same signal there)
    db = tmp_path / "l.db"
    argv = [str(traced), "16", str(int(sig)), str(LAUNCHER), "record", "-q", "--no-symbolize", "-o", str(db),
            "--", "sh", "-c", "exit 3"]
    # WHEN the signal comes then
    r = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S)
    # THEN record lives to start the target: a dump asked for, or the signal passed on to it, and
    # record exits with the target's status, its profile written (a target that a passed-on
    # signal ends at once may die before its client says hello)
    assert r.returncode == status, r.stderr
    assert "Traceback" not in r.stderr
    with sqlite3.connect(db) as c:
        processes = c.execute("SELECT COUNT(*) FROM process").fetchone()[0]
    assert processes == 1 if sig == signal.SIGUSR1 else processes <= 1


def test_a_ctrl_c_while_the_interpreter_starts_is_status_130(traced: Path, tmp_path: Path) -> None:
    r = subprocess.run([str(traced), "16", str(int(signal.SIGINT)), str(LAUNCHER), "record", "-q", "-o",
                        str(tmp_path / "i.db"), "--", "true"], capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr


def _blocked(status: str) -> int:
    m = re.search(r"^SigBlk:\s*([0-9a-f]+)$", status, re.M)
    assert m is not None, status
    return int(m.group(1), 16)


def test_the_target_gets_the_mask_and_environment_record_was_given_and_record_its_name(tmp_path: Path) -> None:
    # WHEN record starts a target that shows its signal mask and looks for the launcher's variable
    r = subprocess.run([str(LAUNCHER), "record", "-q", "--no-symbolize", "-o", str(tmp_path / "t.db"), "--", "sh",
                        "-c", "cat /proc/self/status; echo launcher=${HEAPSCOPE_LAUNCHER_HELD-none};"
                        " echo parent=$(cat /proc/$PPID/comm)"],
                       capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0, r.stderr
    # THEN it has the mask record was given, nothing more: a test runner may block some, which
    # reach this test's children (and sh, dash, unblocks them: so the same sh shows it here);
    # no variable; and record, its parent, is `heapscope` in ps and pgrep (not the python3 it execs)
    given = subprocess.run(["sh", "-c", "cat /proc/self/status"], capture_output=True, text=True,
                           timeout=WAIT_S).stdout
    assert _blocked(r.stdout) == _blocked(given)
    assert "launcher=none" in r.stdout
    assert "parent=heapscope" in r.stdout


def test_a_command_other_than_record_keeps_the_mask_it_was_given(tmp_path: Path) -> None:
    # GIVEN a profile, and `heapscope sql` on it reading its queries from a pipe
    db = tmp_path / "s.db"
    subprocess.run([str(LAUNCHER), "record", "-q", "--no-symbolize", "-o", str(db), "--", "true"], check=True,
                   timeout=WAIT_S)
    p = subprocess.Popen([str(LAUNCHER), "sql", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        # WHEN it has answered a query (so it waits for the next one in its own code)
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("SELECT 'answered';\n")
        p.stdin.flush()
        while "answered" not in (line := p.stdout.readline()):
            assert line, "sql ended before it answered"
        # THEN nothing the launcher blocked is still blocked: SIGTERM ends it as it ends any program
        given = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, timeout=WAIT_S).stdout
        assert _blocked(Path(f"/proc/{p.pid}/status").read_text()) == _blocked(given)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=WAIT_S) == -signal.SIGTERM
    finally:
        p.kill()
        p.wait()


def test_a_launcher_whose_python_is_gone_runs_the_one_beside_it_or_says_so(tmp_path: Path) -> None:
    # GIVEN the launcher built for an interpreter that is not there (a wheel built in one
    # environment, installed in another)
    (tmp_path / "launcher_config.h").write_text('#define HEAPSCOPE_PYTHON "/nonexistent/bin/python3"\n')
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    alone, env = tmp_path / "alone", tmp_path / "env"
    beside = env / "bin"
    alone.mkdir()
    beside.mkdir(parents=True)
    if (Path(sys.prefix) / "pyvenv.cfg").exists():  # this Python's virtual environment, seen from env/
        shutil.copy(Path(sys.prefix) / "pyvenv.cfg", env / "pyvenv.cfg")
        (env / "lib").symlink_to(Path(sys.prefix) / "lib")
    source = Path(sigmask.__file__).parent / "cli" / "launcher.c"
    subprocess.run([cc, "-O1", "-Wall", "-I", str(tmp_path), "-o", str(alone / "heapscope"), str(source)], check=True,
                   timeout=120)
    shutil.copy(alone / "heapscope", beside / "heapscope")
    (beside / "python3").symlink_to(sys.executable)
    # WHEN each runs: one with a python3 beside it (a virtual environment's bin/), one alone
    found = subprocess.run([str(beside / "heapscope"), "--version"], capture_output=True, text=True, timeout=WAIT_S)
    lost = subprocess.run([str(alone / "heapscope"), "--version"], capture_output=True, text=True, timeout=WAIT_S)
    # THEN the first runs heapscope with it; the second says in one line what is missing and what to run
    assert found.returncode == 0 and found.stdout.startswith("heapscope "), found.stderr
    assert lost.returncode == 127
    assert lost.stderr.splitlines() == [
        "heapscope: cannot run the Python it was installed for, /nonexistent/bin/python3 (No such file or "
        "directory); `python3 -m heapscope` runs it with another"]
