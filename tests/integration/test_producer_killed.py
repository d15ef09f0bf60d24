"""SIGKILL the profiler mid-run: the target must carry on as if unprofiled.

Synchronisation is by pipes only: the target says "phase 1 done" on stdout, we kill
the `heapscope record` process (only that pid; it runs in its own session), then
release the target with a line on stdin and read its stdout to EOF. This test
process is made a child subreaper, so the orphaned target is re-parented to us and
we can collect its real exit status.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs, exit_status, run_process

DEADLINE_S = 60


def _read_until(fd: int, marker: bytes, deadline: float) -> bytes:
    data = b""
    while marker not in data:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if not ready:
            pytest.fail(f"no {marker!r} within the deadline; got {data!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            pytest.fail(f"EOF before {marker!r}; got {data!r}")
        data += chunk
    return data


def _read_to_eof(fd: int, deadline: float) -> bytes:
    data = b""
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if not ready:
            pytest.fail(f"target's stdout still open at the deadline; got {data!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            return data
        data += chunk


def _descendant_running(root: int, exe: Path) -> int | None:
    """pid of a process under `root` whose executable is `exe`."""
    todo, seen = [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            if pid != root and os.readlink(f"/proc/{pid}/exe") == str(exe):
                return pid
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(p) for p in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return None


def _wait_for_exit(pid: int, deadline: float) -> int:
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            pytest.fail(f"target pid {pid} still running at the deadline")
    finally:
        os.close(pidfd)
    reaped, status = os.waitpid(pid, 0)
    assert reaped == pid
    return exit_status(os.waitstatus_to_exitcode(status))


@pytest.mark.timeout(120)
def test_target_survives_producer_sigkill(programs: Programs, tmp_path: Path, subreaper: None) -> None:
    target = programs.path("phases")
    plain = run_process([target, tmp_path / "plain-done"], input=b"go\n")
    assert plain.returncode == 0 and (tmp_path / "plain-done").read_bytes() == b"ok\n"

    done = tmp_path / "done"
    stderr_path = tmp_path / "record.stderr"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            [*HEAPSCOPE, "record", "-i", "1", "-o", str(tmp_path / "p.db"), "--", str(target), str(done)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            bufsize=0,
            start_new_session=True,
        )
    assert proc.stdin is not None and proc.stdout is not None
    target_pid = None
    deadline = time.monotonic() + DEADLINE_S
    try:
        out = _read_until(proc.stdout.fileno(), b"phase 1 done\n", deadline)
        target_pid = _descendant_running(proc.pid, target)
        assert target_pid is not None, "could not find the target under heapscope record"

        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL

        proc.stdin.write(b"go\n")
        proc.stdin.close()
        out += _read_to_eof(proc.stdout.fileno(), deadline)
        status = _wait_for_exit(target_pid, deadline)
        target_pid = None
    finally:
        if target_pid is not None:
            try:
                os.kill(target_pid, signal.SIGKILL)
                os.waitpid(target_pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if proc.returncode is None:
            proc.kill()
            proc.wait(timeout=10)
        for f in (proc.stdin, proc.stdout):
            if f and not f.closed:
                f.close()

    assert out == plain.stdout, f"target output changed: {out!r} vs unprofiled {plain.stdout!r}"
    assert done.exists() and done.read_bytes() == b"ok\n", "the target did not finish phase 2"
    assert status == 0, f"target exit status {status}; record stderr:\n{stderr_path.read_text(errors='replace')}"
