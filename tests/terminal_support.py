"""A real terminal for the tests of `heapscope record` and `live` in one: an interactive bash
in a tmux pane of its own server, typed into, its output read line by line through `tmux
pipe-pane` (tests/fault/test_record_terminal*.py). Every wait has a timeout.
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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

WAIT_S = 30.0

# What a terminal adds to the lines a program writes: colours, cursor moves, carriage returns,
# its echo of Ctrl-C, Ctrl-Z and Ctrl-\\.
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r|\^[CZ\\]")


class Pane:
    """An interactive bash in a tmux pane of its own server; what the pane shows, as lines."""

    def __init__(self, tmp_path: Path, command: str | None = None) -> None:
        """`command`: the pane's own (sh -c), instead of the shell; the pane stays once it exits."""
        self.socket = str(tmp_path / "tmux.sock")
        self.conf = tmp_path / "tmux.conf"
        self.conf.write_text("set -g remain-on-exit on\n")
        rc = tmp_path / "bashrc"
        rc.write_text("PS1='$ '\nPROMPT_COMMAND=\nulimit -c 0\nbind 'set enable-bracketed-paste off'\n"
                      f"cd {tmp_path}\n")
        fifo = tmp_path / "pane.out"
        os.mkfifo(fifo)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.groups: list[int] = []  # process groups to kill if a test leaves them running
        shell = f"bash --noprofile --rcfile {rc} -i" if command is None else command
        self.tmux("new-session", "-d", "-x", "200", "-y", "50", shell)
        self.tmux("pipe-pane", "-t", "0", f"cat > {fifo}")
        threading.Thread(target=self._read, args=(fifo,), daemon=True).start()

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, "-f", str(self.conf), *args], capture_output=True,
                              text=True, timeout=20, check=True)
        return done.stdout

    def _read(self, fifo: Path) -> None:
        with contextlib.suppress(OSError), open(fifo, "rb") as f:
            for raw in f:
                self.lines.put(ESCAPES.sub("", raw.decode(errors="replace")).rstrip("\n"))
        self.lines.put(None)

    def type(self, text: str) -> None:
        """`text` typed, then Enter."""
        self.tmux("send-keys", "-t", "0", "-l", text)
        self.tmux("send-keys", "-t", "0", "Enter")

    def key(self, key: str) -> None:
        self.tmux("send-keys", "-t", "0", key)

    def wait_for(self, pattern: str, timeout: float = WAIT_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"timed out waiting for {pattern!r}; the pane showed:\n" + "\n".join(self.seen[-40:]))
            if line is None:
                pytest.fail(f"the pane closed while waiting for {pattern!r}:\n" + "\n".join(self.seen[-40:]))
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.tmux("kill-server")


def state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


def exit_status(pane: Pane, pid: int, timeout: float = WAIT_S) -> int:
    """The exit status of the pane's own process `pid`: tmux's once it has reaped it, else the
    zombie's (exit_code of /proc/PID/stat: tmux was seen to leave it unreaped for 30 s)."""
    deadline = time.monotonic() + timeout
    while True:
        dead = pane.tmux("display", "-p", "-t", "0", "#{pane_dead_status}").strip()
        if dead:
            return int(dead)
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] == "Z":
                return os.waitstatus_to_exitcode(int(fields[49]))
        assert time.monotonic() < deadline, f"pid {pid} did not exit: {states(pid)}"
        select.select([], [], [], 0.01)


def states(pid: int) -> str:
    """The state of each thread of `pid` (a failure's message)."""
    try:
        return "".join(state(int(tid)) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return "gone"


def foreground(pid: int) -> int:
    """The foreground process group of the terminal of `pid` (tpgid, /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[5])


def wait_foreground(pid: int, group: int, timeout: float = WAIT_S) -> None:
    """Until the terminal of `pid` has `group` in the foreground (a bounded poll: nothing tells
    another process when a shell calls tcsetpgrp)."""
    deadline = time.monotonic() + timeout
    while foreground(pid) != group:
        assert time.monotonic() < deadline, f"group {group} never got the terminal"
        select.select([], [], [], 0.01)


def compiled(out_dir: Path, source: Path) -> Path:
    """`source` (a C program of tests/fault) built into out_dir, named after it."""
    out = out_dir / source.stem
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    subprocess.run([cc, "-O0", "-g", "-Wall", "-o", str(out), str(source)], check=True, timeout=120)
    return out


def pane_for(tmp_path: Path) -> Iterator[Pane]:
    """A test's pane (the body of its `pane` fixture): closed at the end, and record's and the
    target's groups killed if the test left them running."""
    p = Pane(tmp_path)
    try:
        yield p
    finally:
        for group in p.groups:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        p.close()
