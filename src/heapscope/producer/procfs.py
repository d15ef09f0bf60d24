"""What /proc says about a process: its command line, executable, status fields.

Read with open(), not pathlib (~7 ms of imports): the handshake reads /proc while its
client waits (producer/listener.py)."""

from __future__ import annotations

import os
import time

from heapscope.model import ProcessInfo, Upid


def process_info(upid: Upid, pid: int, ppid: int, uid: int, told_start: int = 0) -> ProcessInfo:
    """What /proc says about a client; it is alive, waiting for our answer. Its start is
    `told_start`, the client's clock as it connected, when it said one: this answer comes later."""
    now = time.monotonic_ns()
    args = cmdline_args(pid)
    exe = exe_path(pid, args)
    name = process_name(pid, args, exe)
    return ProcessInfo(upid=upid, pid=pid, ppid=ppid, name=name, cmdline=join_args(args), exe=exe,
                       uid=uid, start_ts=told_start if 0 < told_start <= now else now)


def join_args(args: list[str]) -> str:
    """The command line as a shell would read it back (`--save ''`, `'a b'`): the process
    table's cmdline, which shlex.split turns into the arguments again."""
    import shlex

    return shlex.join(args)


def process_name(pid: int, args: list[str], exe: str) -> str:
    """The name the user ran: argv[0]'s basename when argv[0] is a link to the executable
    (redis-server, a link to redis-check-rdb; busybox's applets), else the executable's (a
    script's interpreter, a program that rewrites its argv[0], a login shell's `-bash`)."""
    own = os.path.basename(exe)
    argv0 = args[0] if args else ""
    called = os.path.basename(argv0)
    if not called or called == own or not own:
        return own or called or str(pid)
    if "/" in argv0:
        candidates = [argv0 if argv0.startswith("/") else f"/proc/{pid}/cwd/{argv0}"]
    else:  # found through PATH: the usual folders, not the target's own PATH (no read of its environ)
        candidates = [f"{d}/{argv0}" for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                                               "/sbin", "/bin")]
    try:
        real = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return own
    for path in candidates:
        try:
            if os.path.islink(path):
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == (real.st_dev, real.st_ino):
                    return called
        except OSError:
            continue
    return own


def cmdline_args(pid: int) -> list[str]:
    """The arguments, empty ones kept (`redis-server --save ''`): each ends with a NUL."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()  # the last argument's terminator
    return [a.decode("utf-8", "replace") for a in parts]


def exe_path(pid: int, args: list[str]) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return args[0] if args else ""


def status_field(pid: int | str, key: str) -> int:
    """A number from /proc/PID/status (`pid` may be "self"); 0 when unreadable."""
    head = key + ":"
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
        # Found, not split into its ~55 lines: read for every process of a tree as it starts.
        at = 0 if text.startswith(head) else text.find("\n" + head) + 1
        if at == 0 and not text.startswith(head):
            return 0
        end = text.find("\n", at)
        return int(text[at + len(head):end if end >= 0 else len(text)].split()[0])
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
