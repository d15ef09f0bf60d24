"""Job control for a target started by `record` from a shell's job in a terminal.

A shell makes each job a process group and gives the terminal to the group in the
foreground: Ctrl-C, Ctrl-\\ and Ctrl-Z signal that whole group. Were the target in
`record`'s group, a signal to that group (`kill -- -PGID`, the target's own `kill 0`)
would reach it twice: once from the group, once passed on by `record`. So, as a shell
does for a job and sudo for its command, the target gets a group of its own and, while
`record`'s group is in the foreground, the terminal (tcsetpgrp): the terminal's keys
reach the target once, from the kernel, and reading the terminal works. `record` relays
job control between the target and the shell:

- the target stops (Ctrl-Z: SIGTSTP; SIGTTIN, SIGTTOU, SIGSTOP): `record` stops itself with
  the same signal, so the shell sees its job stopped and takes the terminal back (where the
  kernel discards that stop, nobody doing job control above `record`, the target goes on);
- `record` is continued (`fg`, `bg`: SIGCONT to its group): the terminal goes to the
  target's group again if the shell gave it to `record`'s (`fg`), then SIGCONT to the
  target's group;
- SIGTSTP sent to `record` alone is passed on to the target's group (which then stops, and
  `record` with it);
- the target's end: the terminal's foreground group goes back to `record`'s group when the
  target's group still has it (also after a death by a signal; `record` calls restore() on
  its way out whatever happened).

Only a job of its own qualifies (`record` has a controlling terminal, leads its process
group, and no other process of a pipeline shares it): in a pipeline (`record -- prog | less`)
handing the terminal to the target would stop `less` when it reads its keys, and where a
program (make, /usr/bin/time) leads the group the shell waits on that program, which a
stopped `record` would not stop. Those keep one group for `record` and its target
(heapscope/launch.py).

May import: nothing of heapscope.
"""

from __future__ import annotations

import _thread
import os
import signal
import stat

_active: JobControl | None = None  # the one of this process, for restore() on any way out


def own_job() -> int | None:
    """A descriptor of the controlling terminal when this process is a job of its own in it
    (module docstring), else None."""
    pid = os.getpid()
    if os.getpgrp() != pid:
        return None  # another process (a shell's pipeline's first, make, time) leads the group
    for fd in (0, 1):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                return None  # in a pipeline (its other processes may not be started yet)
        except OSError:
            pass
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None  # no controlling terminal
    if _others_in_group(pid):
        os.close(fd)
        return None
    return fd


def _others_in_group(pid: int) -> bool:
    """Another child of our parent in our process group (a pipeline's other commands); True
    when that cannot be read (a kernel without /proc/PID/task/TID/children)."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/task/{ppid}/children", "rb") as f:
            siblings = [int(s) for s in f.read().split()]
    except (OSError, ValueError):
        return True
    for sibling in siblings:
        if sibling == pid:
            continue
        try:
            if os.getpgid(sibling) == pid:
                return True
        except OSError:
            continue  # gone
    return False


class JobControl:
    """The terminal and the stops of one target in a group of its own (module docstring)."""

    def __init__(self, tty: int) -> None:
        global _active
        self.tty = tty  # the controlling terminal, O_RDWR
        self.pgrp = os.getpgrp()  # record's group: the shell's job
        self.target: int | None = None  # the target's pid, the id of its group
        self.ended = False
        _active = self

    def spawned(self, pid: int) -> None:
        """The target runs in group `pid`: the terminal is its when record's group has it. A
        stop that came before (it read the terminal at once) is relayed now."""
        self.target = pid
        self.hand_over()
        self.check()

    def hand_over(self) -> None:
        """The terminal to the target's group when record's group holds it (in the foreground,
        or given back by the shell's `fg`)."""
        if self.target is not None and not self.ended and _foreground(self.tty) == self.pgrp:
            _set_foreground(self.tty, self.target)

    def check(self) -> None:
        """SIGCHLD: a stop of the target is relayed (a SIGCHLD of another child, or of the
        target's exit, is not a stop: nothing to do)."""
        if self.target is None or self.ended:
            return
        try:
            info = os.waitid(os.P_PID, self.target, os.WSTOPPED | os.WNOHANG)
        except ChildProcessError:
            return
        if info is not None and info.si_code == os.CLD_STOPPED:
            self._stopped(info.si_status)

    def _stopped(self, sig: int) -> None:
        if sig in (signal.SIGTTIN, signal.SIGTTOU) and _foreground(self.tty) == self.pgrp:
            # It used the terminal before it was handed over (a static target, or just after a
            # `fg` gave the terminal to record's group): it is the target's, and on it goes.
            self.hand_over()
            self._continue()
            return
        # The shell sees its job stop, and why (`Stopped (tty input)`: the same signal); record
        # goes on where it stopped when the shell continues it, and its SIGCONT handler
        # (continued) continues the target. Nothing above record doing job control (it leads a
        # session, or its shell has gone: an orphaned group), the kernel discards the stop, as
        # it would have the target's own without heapscope: the target goes on, rather than
        # wait for a SIGCONT nobody would send.
        if not _suspend(sig):
            self._continue()

    def stop_requested(self) -> None:
        """SIGTSTP to record alone: to the target's group while it runs (its stop then stops
        record); after its end (the summary being written) record stops, as by default."""
        if self.target is None or self.ended:
            _suspend(signal.SIGTSTP)
            return
        try:  # noqa: SIM105 (contextlib: imports on the target's path)
            os.killpg(self.target, signal.SIGTSTP)
        except OSError:
            pass  # its group is empty: the exit is on its way

    def continued(self) -> None:
        """SIGCONT to record (`fg`, `bg`, or anyone's): to the target's group, which has the
        terminal if record's group was given it."""
        self.hand_over()
        self._continue()

    def _continue(self) -> None:
        if self.target is not None and not self.ended:
            try:  # noqa: SIM105 (contextlib: imports on the target's path)
                os.killpg(self.target, signal.SIGCONT)
            except OSError:
                pass  # its group is empty

    def restore(self) -> None:
        """The target has ended (or record is on its way out): the terminal back to record's
        group when the target's group still holds it. Once."""
        global _active
        if self.ended:
            return
        self.ended = True
        if _active is self:
            _active = None
        try:
            if self.target is not None and _foreground(self.tty) == self.target:
                _set_foreground(self.tty, self.pgrp)
        finally:
            try:  # noqa: SIM105 (contextlib: imports on the target's path)
                os.close(self.tty)
            except OSError:
                pass


def restore() -> None:
    """The terminal's foreground back to record's group, if a JobControl of this process gave
    it away and has not given it back (record's last step, whatever happened before)."""
    if _active is not None:
        _active.restore()


def _suspend(sig: int) -> bool:
    """Stop this process with `sig`, as its default action would, until a SIGCONT: True; False
    when the kernel discarded the stop (an orphaned process group)."""
    old = signal.signal(sig, signal.SIG_DFL) if sig != signal.SIGSTOP else None
    # SIGCONT held back meanwhile: pending after the stop, it says one happened (it continues
    # the process blocked or not), and its handler runs once it is let through.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})
    try:
        # To this thread: the stop takes it before the call returns (a signal to the process
        # could be taken by another thread later).
        signal.pthread_kill(_thread.get_ident(), sig)
        return signal.SIGCONT in signal.sigpending()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if old is not None:
            signal.signal(sig, old)


def _foreground(tty: int) -> int | None:
    try:
        return os.tcgetpgrp(tty)
    except OSError:
        return None  # hung up


def _set_foreground(tty: int, pgrp: int) -> None:
    """tcsetpgrp, also from a background group: SIGTTOU is blocked for the call (as a shell
    does), which the kernel would otherwise send to record's group."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(tty, pgrp)
    except OSError:
        pass  # hung up, or the group has gone: nothing left to give the terminal to
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
