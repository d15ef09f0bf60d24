"""Attach to a running process (`heapscope record -p PID`) and let it go again.

    check the pid (exists, ours, not profiled by another session: a lock file)
      -> gdb -p PID: dlopen(libheapscope.so), heapscope_attach(socket, token)
         (runs in the background: the client's handshake needs the producer
         loop running meanwhile)
      -> the client patches the GOT of every loaded object; from here the
         process is profiled like a preloaded one, with from_startup = false
    detach: the producer sets shutting_down and closes the socket; the hooks
    stay in place and pass straight through for the rest of the process's life.

Every failure becomes one TargetError line that says what to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from heapscope.errors import TargetError

LOCK_DIR = Path("/tmp")
GDB_TIMEOUT_S = 60.0
# heapscope_attach() results (enum hs_attach_result in client/client.h).
ATTACH_OK, ATTACH_BUSY, ATTACH_NO_SESSION, ATTACH_NO_HOOKS = 0, 1, 2, 3
_VALUE = re.compile(r"^\$(\d+) = (?:\([^)]*\) )?(-?\w+)", re.MULTILINE)


class AlreadyProfiled(TargetError):
    """Another heapscope session profiles this pid (rejected_concurrent)."""


def lock_path(pid: int) -> Path:
    return LOCK_DIR / f"heapscope-pid-{pid}.lock"


def check_target(pid: int) -> None:
    """Fail with a clear message when `pid` cannot be attached to."""
    try:
        st = os.stat(f"/proc/{pid}")
    except FileNotFoundError:
        raise TargetError(f"no process with pid {pid}") from None
    me = os.geteuid()
    if me != 0 and st.st_uid != me:
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        raise TargetError(f"pid {pid} belongs to user {owner}: attach only to your own processes "
                          "(or run heapscope as root)")
    try:
        os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise TargetError(f"pid {pid} is a kernel thread or a zombie: nothing to attach to") from None
    except PermissionError:
        raise TargetError(_ptrace_hint(pid)) from None


def find_gdb() -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        raise TargetError("attaching (-p) needs gdb: install it with `apt-get install gdb` "
                          "(Debian package gdb)")
    return gdb


class PidLock:
    """An exclusive lock per pid: two heapscope sessions never attach to the same process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.path = lock_path(pid)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except PermissionError:
            raise AlreadyProfiled(f"pid {pid} is being profiled by another user's heapscope "
                                  f"session ({self.path})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise AlreadyProfiled(f"pid {pid} is already being profiled by another heapscope session") from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self.fd)
            self.fd = -1


@dataclass
class Injection:
    """gdb running heapscope_attach() inside the target, in the background."""

    pid: int
    proc: subprocess.Popen[str]

    def done(self) -> bool:
        return self.proc.poll() is not None

    def result(self) -> None:
        """After done(): raise unless the client is profiling the process now."""
        out, err = self.proc.communicate()
        text = out + err
        if "ptrace: Operation not permitted" in text or "Could not attach to process" in text:
            raise TargetError(_ptrace_hint(self.pid))
        if "No such process" in text:
            raise TargetError(f"no process with pid {self.pid} (it exited)")
        values = {int(m.group(1)): m.group(2) for m in _VALUE.finditer(out)}
        handle, result = values.get(1), values.get(2)
        if handle is None or handle in ("0x0", "0"):
            raise TargetError(f"could not load the client into pid {self.pid} (dlopen failed; "
                              f"a static binary, or no dlopen in its libc):\n{_tail(text)}")
        if result is None:
            raise TargetError(f"gdb could not call heapscope_attach in pid {self.pid}:\n{_tail(text)}")
        code = int(result, 0)
        if code == ATTACH_BUSY:
            raise AlreadyProfiled(f"pid {self.pid} is already being profiled (its client has a session)")
        if code == ATTACH_NO_SESSION:
            raise TargetError(f"the client in pid {self.pid} could not connect to this session")
        if code == ATTACH_NO_HOOKS:
            raise TargetError(f"pid {self.pid} has no malloc call to intercept (statically linked?)")
        if code != ATTACH_OK:
            raise TargetError(f"heapscope_attach returned {code} in pid {self.pid}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def start_injection(pid: int, library: Path, socket_path: str, token_hex: str) -> Injection:
    """Start gdb, which loads the client into `pid` and calls heapscope_attach()."""
    gdb = find_gdb()
    lib = str(library)
    for s in (lib, socket_path, token_hex):
        if '"' in s or "\\" in s:
            raise TargetError(f"cannot pass {s!r} to gdb (quote or backslash in a path)")
    argv = [
        gdb, "-nx", "-batch", "-p", str(pid),
        "-ex", "set confirm off",
        "-ex", f'print (void *) dlopen("{lib}", 2)',
        "-ex", 'print ((int (*)(const char *, const char *)) dlsym($1, "heapscope_attach"))'
               f'("{socket_path}", "{token_hex}")',
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return Injection(pid, proc)


def _ptrace_hint(pid: int) -> str:
    scope = ""
    with contextlib.suppress(OSError):
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    hint = (f"not permitted to attach to pid {pid} with ptrace. With Yama, allow it with "
            "`sudo sysctl kernel.yama.ptrace_scope=0` (now "
            f"{scope or 'unknown'}), or run heapscope as root; in a container add the SYS_PTRACE capability")
    return hint


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
