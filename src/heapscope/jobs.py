"""Job control for a target that `record` starts in a process group of its own.

The target always gets a group of its own: a signal to `record`'s group (`kill -- -PGID`, a
program's `kill 0`, the terminal's keys) reaches `record` alone, which passes it on once
(heapscope/launch.py), and the target's own `kill 0` stays in its group. Stops and
continues need more than passing on: a shell sees its job stop only when the processes it
waits for stop, and a target outside the terminal's foreground group stops (SIGTTIN,
SIGTTOU) when it reads the terminal or sets its modes. So `record` relays job control
between the target and whatever is above it. Two cases:

- **A job of its own** in a terminal (`record` leads its process group, no other process
  shares it): as a shell does for a job and sudo for its command, the target's group gets
  the terminal (tcsetpgrp) while `record`'s group has it: the terminal's keys reach the
  target once, from the kernel, and reading the terminal works.
- **Shared**: `record` shares its group with other processes (a pipeline's other
  commands, `record -- prog | less`; a program that leads the group, make or
  /usr/bin/time), or has no terminal. The terminal's keys reach `record`'s group, and
  `record` passes them on. The terminal stays with `record`'s group (a `less` there reads
  its keys) until the target needs it: when it stops for SIGTTIN or SIGTTOU while
  `record`'s group has the terminal, its group gets the terminal and is continued (one
  SIGCONT it would not have had: nothing continues a stopped process without one).

(`live`, whose view holds the terminal, has none of this: its target gets a group of its
own and the signals passed on, nothing more.)

What is relayed, in both:

- the target stops: by a SIGTSTP that `record` got and passed on (Ctrl-Z on `record`'s
  group, `kill -TSTP` of it): `record` stops itself with the same signal, the others of its
  group having had theirs from the kernel (not where its parent shares its group, make or
  time: the shell waits on that one, stopped already); by itself (Ctrl-Z on its own group, SIGTTIN,
  SIGTTOU, SIGSTOP): `record` stops its whole group with that signal (only itself, a job of
  its own or without a terminal), so that the shell sees its job stopped, and why
  (`Stopped (tty input)`), and takes the terminal back. Where the kernel discards that stop
  (nothing doing job control above `record`: an orphaned group) the target goes on;
- `record` is continued (`fg`, `bg`: SIGCONT to its group): the terminal goes to the
  target's group again if the shell gave it to `record`'s (`fg`) and the target had it,
  then SIGCONT to the target's group, once;
- the target's end: the terminal's foreground group goes back to `record`'s group when the
  target's group still has it (also after a death by a signal; `record` calls restore() on
  its way out whatever happened).

May import: nothing of heapscope.
"""

from __future__ import annotations

import _thread
import os
import signal
import stat

_active: JobControl | None = None  # the one of this process, for restore() on any way out
TERMINAL_STOPS = (signal.SIGTTIN, signal.SIGTTOU)


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
    tty = controlling_terminal()
    if tty is not None and _others_in_group(pid):
        os.close(tty)
        return None
    return tty


def controlling_terminal() -> int | None:
    """A descriptor of this process's controlling terminal (O_RDWR), or None without one."""
    try:
        return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None


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
    """The stops of one target in a group of its own, and the terminal (module docstring).

    `tty`: the controlling terminal (O_RDWR; closed by restore), None without one. `shared`:
    record shares its group with other processes."""

    def __init__(self, tty: int | None, shared: bool) -> None:
        global _active
        self.tty = tty
        self.shared = shared
        self.pgrp = os.getpgrp()  # record's group: the shell's job, or the one it shares
        self.target: int | None = None  # the target's pid, the id of its group
        self.ended = False
        # The target's group is to have the terminal whenever record's group does: from the
        # start for a job of its own; once it asked for it (SIGTTIN, SIGTTOU) when shared.
        self.holds = tty is not None and not shared
        self.requested = False  # record got a SIGTSTP and passed it on: the target's stop is its
        self.stopped = False  # the target's last stop has not been followed by our SIGCONT
        self.stuck = False  # heal() saw the target stopped while its parent ran
        _active = self

    def spawned(self, pid: int) -> None:
        """The target runs in group `pid`: the terminal is its when it is to have it and record's
        group has it. A stop that came before (it read the terminal at once) is relayed now."""
        self.target = pid
        self.hand_over()
        self.check()

    def hand_over(self) -> None:
        """The terminal to the target's group when it is to have it and record's group holds
        it (in the foreground, or given back by the shell's `fg`)."""
        if (self.holds and self.tty is not None and self.target is not None and not self.ended
                and _foreground(self.tty) == self.pgrp):
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
            self.stopped = True
            self._stopped(info.si_status)

    def _stopped(self, sig: int) -> None:
        if sig in TERMINAL_STOPS and self.tty is not None and _foreground(self.tty) == self.pgrp:
            # It used the terminal, which record's group has: it is the target's, and on it goes
            # (a static target, or one just after a `fg` gave the terminal to record's group).
            self.holds = True
            self.hand_over()
            self._continue()
            return
        if sig in TERMINAL_STOPS and self.tty is not None:
            self.holds = True  # its group gets the terminal at the `fg` that continues it
        # The shell sees its job stop, and why (`Stopped (tty input)`: the same signal); record
        # goes on where it stopped when the shell continues it, and its SIGCONT handler
        # (continued) continues the target. A stop record passed on stopped the others of a
        # shared group already; one of the target's own is the group's to take. Nothing above
        # record doing job control (it leads a session, or its shell has gone: an orphaned
        # group), the kernel discards the stop, as it would have the target's own without
        # heapscope: the target goes on, rather than wait for a SIGCONT nobody would send.
        requested, self.requested = self.requested, False
        if requested and self.shared and _parent_in_group():
            # make, time: the shell waits on them, and they stopped with the same signal; the
            # group's SIGCONT (`fg`, `bg`) continues the target. record runs on meanwhile: were it
            # to stop too, a `fg` typed before its stop would leave it stopped for good.
            if _orphaned():
                self._continue()  # the kernel discarded their stop: nobody will send a SIGCONT
            return
        if not _suspend(sig, self.shared and self.tty is not None and not requested):
            self._continue()

    def stop_requested(self) -> None:
        """SIGTSTP to record: to the target's group while it runs (its stop then stops record);
        record stops at once when the target has stopped already, or has ended (the summary
        being written)."""
        parent_in_group = self.shared and _parent_in_group()
        if self.target is None or self.ended or self.stopped:
            if not parent_in_group:
                _suspend(signal.SIGTSTP, False)
            return
        if parent_in_group and not _parent_stopping():
            # The group's SIGCONT came before this handler ran (a `fg` typed at once, on a busy
            # machine; Python runs the SIGCONT handler first): this stop is over already.
            return
        self.requested = True
        try:
            os.killpg(self.target, signal.SIGTSTP)
        except OSError:
            self.requested = False  # its group is empty: the exit is on its way

    def heal(self) -> None:
        """Called every 0.1 s by the recording: in a group shared with its parent (make, time) a
        stop of the target always stops the parent too, so a target seen stopped twice in a row
        while the parent runs was left so by a SIGTSTP and a SIGCONT to the group that met
        record's handlers out of order: it runs on (the target comes first)."""
        stuck = (self.shared and self.target is not None and not self.ended and _parent_in_group()
                 and _stopped_state(self.target) and not _parent_stopping())
        if stuck and self.stuck:
            self.requested = False
            self._continue()
            stuck = False
        self.stuck = stuck

    def continued(self) -> None:
        """SIGCONT to record (`fg`, `bg`, or anyone's): to the target's group, which has the
        terminal if record's group was given it and the target is to have it."""
        self.requested = False
        self.hand_over()
        self._continue()

    def _continue(self) -> None:
        if self.target is not None and not self.ended:
            self.stopped = False
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
        if self.tty is None:
            return
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


def _suspend(sig: int, group: bool) -> bool:
    """Stop this process with `sig`, as its default action would, until a SIGCONT (`group`: its
    whole process group, kill(0)): True; False when the kernel discarded the stop (an orphaned
    process group)."""
    old = signal.signal(sig, signal.SIG_DFL) if sig != signal.SIGSTOP else None
    # SIGCONT held back meanwhile: pending after the stop, it says one happened (it continues
    # the process blocked or not), and its handler runs once it is let through.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})
    try:
        # To this thread (kill(0) picks the calling thread of this process too, as it leads
        # the process's threads and has the signal unblocked): the stop takes it before the
        # call returns (a signal to the process could be taken by another thread later).
        if group:
            os.kill(0, sig)
        else:
            signal.pthread_kill(_thread.get_ident(), sig)
        return signal.SIGCONT in signal.sigpending()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if old is not None:
            signal.signal(sig, old)


def _parent_in_group() -> bool:
    """This process's parent is of its process group (make, time, a script that started it):
    the shell waits on that one, not on us."""
    try:
        return os.getpgid(os.getppid()) == os.getpgrp()
    except OSError:
        return False


def _stopped_state(pid: int) -> bool:
    """`pid` is stopped by a signal (/proc/PID/stat's state T; not a debugger's t)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"T"
    except (OSError, IndexError):
        return False


def _parent_stopping() -> bool:
    """This process's parent is stopped, or has a stop signal pending (/proc/PID/status: it has
    not run since the stop was sent to it)."""
    stops = sum(1 << (sig - 1) for sig in (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGSTOP))
    try:
        with open(f"/proc/{os.getppid()}/status", "rb") as f:
            for line in f:
                if line.startswith(b"State:") and line.split()[1] in (b"T", b"t"):
                    return True
                if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & stops:
                    return True
    except (OSError, ValueError, IndexError):
        return True  # not known: as if it were, the stop passed on
    return False


def _orphaned() -> bool:
    """This process's group is orphaned, as far as its ancestors tell (the kernel discards a
    stop of such a group): the first of them outside the group is not in its session."""
    pgrp, sid = os.getpgrp(), os.getsid(0)
    pid = os.getppid()
    for _ in range(64):
        if pid <= 1:
            return True
        try:
            if os.getpgid(pid) != pgrp:
                return os.getsid(pid) != sid
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            pid = int(stat[stat.rfind(b")") + 2:].split()[1])  # its parent
        except (OSError, ValueError, IndexError):
            return True
    return True


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
