"""What /proc says about a process: its command line, executable, status fields.

Read with open(), not pathlib (~7 ms of imports): the handshake reads /proc while its
client waits (producer/listener.py, issue 13)."""

from __future__ import annotations

import os
import time

from heapscope.model import ProcessInfo, Upid


def process_info(upid: Upid, pid: int, ppid: int, uid: int) -> ProcessInfo:
    """What /proc says about a client; it is alive, waiting for our answer."""
    args = cmdline_args(pid)
    exe = exe_path(pid, args)
    name = os.path.basename(exe) or (os.path.basename(args[0]) if args else str(pid))
    return ProcessInfo(upid=upid, pid=pid, ppid=ppid, name=name, cmdline=" ".join(args), exe=exe,
                       uid=uid, start_ts=time.monotonic_ns())


def cmdline_args(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def exe_path(pid: int, args: list[str]) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return args[0] if args else ""


def status_field(pid: int | str, key: str) -> int:
    """A number from /proc/PID/status (`pid` may be "self"); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def ppid(pid: int) -> int:
    return status_field(pid, "PPid")


def uid(pid: int) -> int:
    return status_field(pid, "Uid")


def has_exited(pid: int) -> bool:
    """True when `pid` is gone or a zombie (it ran its exit; only its parent's wait is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    # The state follows the command name, which is in parentheses and may hold any byte.
    state = stat[stat.rfind(b")") + 2:][:1]
    return state in (b"Z", b"X", b"")


def mapped_path(pid: int, start: int, name: str) -> str | None:
    """The absolute path of the file `pid` maps at `start` (an object's text), from /proc/PID/maps,
    which names every mapping by its full path; `name` (as the loader has it, maybe relative,
    "./libfoo.so") must end that path's last component. Else `name` against the process's working
    directory, when a file is there; None when neither says (the process has gone)."""
    base = os.path.basename(name)
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) < 6:
                    continue
                lo, _, hi = fields[0].partition(b"-")
                if int(lo, 16) <= start < int(hi, 16):
                    path = os.fsdecode(fields[5].rstrip(b"\n"))
                    if path.startswith("/") and os.path.basename(path) == base:
                        return path
                    break
    except (OSError, ValueError):
        pass
    try:
        path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), name)
    except OSError:
        return None
    return os.path.normpath(path) if os.path.isfile(path) else None
