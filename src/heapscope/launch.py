"""The target's start: its spawn, and what `record` does before the producer exists.

On the start path, with cli/start.py and cli/record.py: it and what it imports follow the
start path's rule (docs/README.md, "The start path": only what starting the target needs).

A started target waits in its client's constructor for the answer to its
handshake (client/connect.c): what `heapscope record` does
before that answer is added to the target's run. So `record` spawns the
target and answers its first handshakes with this module and
producer/listener.py only, then imports the recording (producer, writer, ...) while the target
runs, answering any further handshake between two imports (`serve`). The
recording adopts what is here: the listener and its answered clients, the
child, the signals it received meanwhile (heapscope.session.Recording,
`launch=`).

    create_output(path, force)            # the profile's files, as ProfileWriter makes them
    launch = Launch(config)
    launch.forward_signals()
    launch.spawn(argv, executable, library)
    launch.answer(FIRST_ANSWER_S)         # the target's first handshake
    ... imports, launch.serve() between them ...
    Recording(..., launch=launch).start(argv)

Recording.start uses `spawn` too when nothing was started before it (an
in-process host: the pytest plugin, heapscope.api, `live`).

May import: heapscope.producer.listener, heapscope.sigmask, heapscope.errors, heapscope.producer.procfs,
heapscope.store.names, heapscope.jobs.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from heapscope import jobs, sigmask
from heapscope.errors import OutputError, TargetError
from heapscope.producer.listener import Listener
from heapscope.producer.procfs import status_field
from heapscope.store.names import CREATE_FLAGS, PRIVATE_MODE, SIDECARS, WRITTEN_SIDECARS

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Callable

    from heapscope.producer.config import RecordConfig

# Signals sent to heapscope are passed on to the target, which has a process group of its own: a
# signal to heapscope's group (timeout(1), `kill -- -PGID`, `kill 0`, the terminal's keys when
# that group has the terminal) then reaches the target once, through heapscope, as it would have
# without it, and the target's own `kill 0` stays in its group. `record` relays job control and
# the terminal between its target and the shell (heapscope/jobs.py). A signal heapscope was
# started with ignored (nohup, a script's `&`) stays ignored until the target has inherited that.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2, signal.SIGALRM, signal.SIGWINCH)
TERMINAL = (signal.SIGINT, signal.SIGQUIT)
# Python ignores these at its start; the target gets them back at their default (as
# subprocess's restore_signals does).
PYTHON_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)
DEVNULL = -3  # subprocess.DEVNULL
# The longest `record` waits for its target's first handshake before it goes on with its own
# imports (a target that never connects: static, or LD_PRELOAD cleared by a wrapper).
FIRST_ANSWER_S = 0.2
# Each profiled process holds a socket and a ring's memfd in heapscope: a common soft
# limit of 1024 descriptors would stop a recording at ~500 live processes.
WANTED_NOFILE = 1 << 16
# Descriptors the launch leaves free when it answers clients (a target that starts hundreds of
# processes at once can take every one a hard limit allows): for the imports that follow, the
# recording's wake-up socket pair, the profile's SQLite files, a few to spare.
RESERVED_FDS = 16


def _quiet(_msg: str) -> None:
    pass


def in_main_thread() -> bool:
    """threading.current_thread() is threading.main_thread(), without importing threading
    (~3 ms): a program that has not imported it has started no thread through it."""
    threading = sys.modules.get("threading")
    return threading is None or threading.current_thread() is threading.main_thread()


class Child:
    """The started target: subprocess.Popen's pid, returncode, poll(), wait() and send_signal(),
    and its peak RSS once reaped (peak_rss)."""

    def __init__(self, pid: int, spawner_hwm_kib: int | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None  # as Popen's: -N for a death by signal N
        # wait4's ru_maxrss (KiB). Linux gives the largest of: the peaks of each image the process
        # exec'd, what it carried over exec from its spawner, and those of the children it reaped.
        self.maxrss_kib = 0
        # This process's VmHWM just after the spawn: posix_spawn's child execs from this process's
        # memory, so up to this much of ru_maxrss may be ours (None: not known).
        self.spawner_hwm_kib = spawner_hwm_kib
        # Minor faults of the children it reaped (cminflt of /proc/PID/stat, read while a zombie):
        # 0 when it reaped none that ran, whose peaks would be in ru_maxrss (None: not known).
        self.children_faults: int | None = None
        self.jobs: jobs.JobControl | None = None  # its group has the terminal (heapscope/jobs.py)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self._reap(0)
        assert self.returncode is not None
        return self.returncode

    def _reap(self, options: int) -> None:
        """waitpid(), with a look at the zombie first (children_faults) and wait4's rusage."""
        try:
            if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | options) is None:
                return  # runs on (WNOHANG)
            self.children_faults = _children_faults(self.pid)
            pid, status, usage = os.wait4(self.pid, 0)
        except ChildProcessError:
            self.returncode = 0  # reaped elsewhere: as Popen says
            if self.jobs is not None:
                self.jobs.restore()
            return
        if pid == self.pid:
            self.maxrss_kib = usage.ru_maxrss
            self.returncode = os.waitstatus_to_exitcode(status)
            if self.jobs is not None:
                self.jobs.restore()  # before record's own last lines: the terminal is its again

    def peak_rss(self) -> int:
        """Its peak resident set in bytes once reaped, whatever its end (_exit, a signal: no
        destructor of its client ran); 0 when not known: not reaped yet, it reaped children (their
        peaks are in ru_maxrss too), or ru_maxrss is not above what it may have carried over from
        this process (its own peak was no larger)."""
        if (self.returncode is None or self.children_faults != 0 or self.spawner_hwm_kib is None
                or self.maxrss_kib <= self.spawner_hwm_kib):
            return 0
        return self.maxrss_kib * 1024

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def exit_status(self) -> int:
        """Waits for the end (a Ctrl-C meanwhile is the target's to take); its status, shell style."""
        while True:
            try:
                code = self.wait()
                break
            except KeyboardInterrupt:
                continue
        return 128 - code if code < 0 else code


def spawn(argv: list[str], executable: str | None, env: dict[str, str], stdin: int | None = None,
          stdout: int | None = None, stderr: int | None = None, sigdef: tuple[int, ...] = (),
          own_group: bool = False) -> Child:
    """Start `argv` (`executable`, else argv[0] looked up in PATH) with posix_spawn: no fork
    of this interpreter, no Python code in the child. stdin/stdout/stderr: None (inherited),
    DEVNULL or a descriptor. As subprocess.Popen's defaults: descriptors above 2 are not
    inherited, and the signals Python ignores are at their default; `sigdef`: more of them.
    `own_group`: in a process group of its own (its pid). Its signal mask is the one heapscope
    was started with (heapscope.sigmask).

    glibc's posix_spawn leaves its own two internal signals (SIGCANCEL, SIGSETXID) ignored in the
    child, where a forked child would have them at their default: glibc installs its handlers
    when a program first needs them (checked: pthread_cancel, and setuid with threads running)."""
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    sources = set()
    for target, spec, mode in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
        if spec is None:
            continue
        if spec == DEVNULL:
            actions.append((os.POSIX_SPAWN_OPEN, target, os.devnull, mode, 0))
        elif spec >= 0:
            actions.append((os.POSIX_SPAWN_DUP2, spec, target))
            sources.add(spec)
        else:
            raise ValueError(f"spawn: unsupported descriptor {spec}")
    # glibc refuses a close action for a descriptor at or above the soft limit (EBADF), which a
    # parent that lowered the limit may have given us: those are closed at the exec instead, and
    # made inheritable again after it (the API host's are its program's own).
    inherited = [fd for fd in _inherited_fds() if fd > 2]
    soft = os.sysconf("SC_OPEN_MAX") if inherited else 0  # glibc's check: the soft RLIMIT_NOFILE
    high = [fd for fd in inherited if 0 < soft <= fd]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited if fd not in high]
    reset = tuple(dict.fromkeys(PYTHON_IGNORED + sigdef))
    mask = sigmask.spawn_mask()
    extra: dict[str, object] = {} if mask is None else {"setsigmask": mask}
    if own_group:
        extra["setpgroup"] = 0
    for fd in high:
        os.set_inheritable(fd, False)
    try:
        if executable is None:
            pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsigdef=reset,
                                  **extra)  # type: ignore[arg-type]  # each keyword's own type
        else:
            pid = os.posix_spawn(executable, argv, env, file_actions=actions, setsigdef=reset,
                                 **extra)  # type: ignore[arg-type]
    except OSError as e:
        raise TargetError(f"cannot run {argv[0]}: {e.strerror}") from e
    finally:
        for fd in high:
            os.set_inheritable(fd, True)
    return Child(pid, status_field("self", "VmHWM") or None)


def _children_faults(pid: int) -> int | None:
    """cminflt of /proc/PID/stat (proc(5)): minor faults of the children `pid` waited for."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # The command name, in parentheses, may hold any byte; cminflt is the 9th field after it.
        return int(stat[stat.rfind(b")") + 2:].split()[8])
    except (OSError, ValueError, IndexError):
        return None


def _inherited_fds() -> list[int]:
    """This process's descriptors that an exec would keep (subprocess's close_fds closes them)."""
    fds = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    for name in names:
        fd = int(name)
        try:
            if os.get_inheritable(fd):
                fds.append(fd)
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return fds


def client_library_path() -> str:
    """The client library beside this package (an editable install: found by importlib.resources)."""
    lib = os.path.join(os.path.dirname(os.path.realpath(__file__)), "client", "libheapscope.so")
    if not os.path.isfile(lib):
        try:
            import importlib.resources  # an editable install keeps built files in its build tree

            found = str(importlib.resources.files("heapscope.client") / "libheapscope.so")
            if os.path.isfile(found):
                lib = found
        except Exception:  # noqa: S110 (the error below says what is missing)
            pass
    if not os.path.isfile(lib):
        raise TargetError(f"the client library is missing ({lib}); reinstall heapscope with `pip install .`")
    return lib


def raise_nofile() -> tuple[int, int] | None:
    """Raise this process's soft descriptor limit to WANTED_NOFILE (or the hard limit); the limit
    before, when it was raised. After the target's spawn: the target keeps the limit it was given."""
    import resource  # here: a C extension to load, after the spawn

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = WANTED_NOFILE if hard == resource.RLIM_INFINITY else min(hard, WANTED_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (OSError, ValueError):
            return None
        return (soft, hard)
    return None


def create_output(path: str, force: bool) -> bool:
    """The profile's files as store.writer.ProfileWriter creates them (0600, O_EXCL, never through
    a link), without its imports (sqlite3, pathlib), when nothing is in the way: True. False when
    the profile or one of its SQLite files exists: ProfileWriter checks and replaces those."""
    for name in (path, *(path + s for s in SIDECARS)):
        try:
            os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError:
            return False  # ProfileWriter's checks say why
        return False
    made: list[str] = []
    try:
        for name in (path, *(path + s for s in WRITTEN_SIDECARS)):
            try:
                os.close(os.open(name, CREATE_FLAGS, PRIVATE_MODE))
            except FileExistsError as e:
                raise OutputError(f"{name}: appeared while heapscope was creating it; refusing to use it") from e
            except OSError as e:
                raise OutputError(f"{name}: cannot create: {e.strerror or e}") from e
            made.append(name)
    except OutputError:
        for name in made:
            try:  # noqa: SIM105 (contextlib is ~3 ms of imports on the target's path)
                os.unlink(name)
            except OSError:
                pass
        raise
    return True


class Launch:
    """The session's listener, the target's spawn and the signals until the recording takes over."""

    def __init__(self, config: RecordConfig, log: Callable[[str], None] = _quiet,
                 listener: Listener | None = None) -> None:
        """`listener`: a producer's (Recording.start in a host that has it all imported)."""
        self.started_unix_ns = time.time_ns()  # the profile's metadata, with the next
        self.started_monotonic_ns = time.monotonic_ns()
        self.started = self.started_monotonic_ns / 1e9  # time.monotonic()'s clock
        self.listener = Listener(config, log) if listener is None else listener
        self.child: Child | None = None
        self.spawned: float | None = None  # monotonic time of the spawn
        self.pidfd: int | None = None  # the child's: readable at its exit
        self.created = False  # create_output made the profile's files (the caller says so)
        self.restore: dict[int, object] = {}  # signal -> the handler before ours
        self.pending: list[int] = []  # signals for a target not started yet
        self.dumps_requested = 0  # SIGUSR1 before the recording took over
        self.nofile: tuple[int, int] | None = None  # the descriptor limit before spawn() raised it
        self._sigdef: list[int] = []  # signals we ignore that the target must not inherit ignored
        # Handlers installed once the target is spawned: of signals heapscope was started with
        # ignored, which the target inherits ignored only if they still are at its spawn.
        self._after_spawn: list[tuple[Callable[[int, Callable[[int, object], None] | int], None], int,
                                      Callable[[int, object], None]]] = []
        self.own_group = False  # the target in a process group of its own (forward_signals decides)
        self.jobs: jobs.JobControl | None = None  # the terminal handed to the target (forward_signals)

    # -- signals ---------------------------------------------------------------

    def install(self, sig: int, handler: Callable[[int, object], None] | int) -> None:
        old = signal.signal(sig, handler)
        self.restore.setdefault(sig, old)

    def forward_signals(self, install: Callable[[int, Callable[[int, object], None] | int], None] | None = None,
                        usr1: bool = True, job_control: bool = False) -> None:
        """Pass signals sent to heapscope on to the target (kept until it is spawned); SIGUSR1 is
        noted for the recording (a dump). `install(sig, handler)`: the recording's own, else ours.
        The target gets a process group of its own. `job_control`: its stops are relayed and it
        is given the terminal as it needs it (heapscope/jobs.py); without (`live`, whose view
        keeps the terminal), only signals are passed on."""
        install = install or self.install
        self.own_group = True
        if job_control:
            tty = jobs.own_job()
            self.jobs = (jobs.JobControl(tty, shared=False) if tty is not None
                         else jobs.JobControl(jobs.controlling_terminal(), shared=True))

        passing: list[int] = []  # signals being passed on; more than one: a handler runs inside another

        def forward(sig: int, _frame: object) -> None:
            child = self.child
            if child is None:
                self.pending.append(sig)
                return
            passing.append(sig)
            if len(passing) > 1:
                return  # a flood ran this handler inside itself past the recursion limit: the outer one sends
            while passing:
                self._pass_on(child, passing[0])
                del passing[0]

        handlers: list[tuple[int, Callable[[int, object], None]]] = [(sig, forward) for sig in FORWARDED + TERMINAL]
        if self.jobs is not None:
            handlers.append((signal.SIGTSTP, self._on_tstp))
        for sig, handler in handlers:
            # Ignored (nohup, a script's `&`): the target inherits that, and gets what is sent to
            # the group all the same should it handle the signal itself.
            if signal.getsignal(sig) == signal.SIG_IGN:
                self._after_spawn.append((install, sig, handler))
            else:
                install(sig, handler)
        if self.jobs is not None:
            install(signal.SIGCONT, self._on_cont)
            install(signal.SIGCHLD, self._on_chld)
            # Our status line and messages reach the terminal while the target's group has it,
            # also under `stty tostop`; the target gets SIGTTOU at its default.
            if signal.getsignal(signal.SIGTTOU) != signal.SIG_IGN:
                self._sigdef.append(signal.SIGTTOU)
            install(signal.SIGTTOU, signal.SIG_IGN)
        if usr1:
            install(signal.SIGUSR1, self._on_usr1)
        sigmask.release()  # what came while `record` started reaches these handlers now

    def _on_chld(self, _sig: int, _frame: object) -> None:
        if self.jobs is not None:
            self.jobs.check()

    def _on_tstp(self, _sig: int, _frame: object) -> None:
        if self.jobs is not None:
            self.jobs.stop_requested()

    def _on_cont(self, _sig: int, _frame: object) -> None:
        if self.jobs is not None:
            self.jobs.continued()

    def _pass_on(self, child: Child, sig: int) -> None:
        """`sig` to the target; to its whole group when it has one of its own (what a signal to
        heapscope's group would have given it and its children without heapscope)."""
        if child.returncode is not None:
            return
        try:
            if self.own_group:
                os.killpg(child.pid, sig)
            else:
                child.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass  # gone (or a zombie's group emptied of it)

    def restore_signals(self) -> None:
        """The handlers before ours (nothing took them over)."""
        for sig, handler in self.restore.items():
            sigmask.swap(sig, handler)
        self.restore.clear()

    def _on_usr1(self, _sig: int, _frame: object) -> None:
        self.dumps_requested += 1

    # -- the target --------------------------------------------------------------

    def spawn(self, argv: list[str], executable: str | None, library: str, stdin: int | None = None,
              stdout: int | None = None, stderr: int | None = None) -> Child:
        """Start the target under the client; the signals that came meanwhile are passed on."""
        env = dict(os.environ)
        env.update(self.listener.env())
        preload = env.get("LD_PRELOAD", "")
        env["LD_PRELOAD"] = f"{library}:{preload}" if preload else library
        self.spawned = time.monotonic()
        child = spawn(argv, executable, env, stdin, stdout, stderr, tuple(self._sigdef), self.own_group)
        self.child = child
        for install, sig, handler in self._after_spawn:
            install(sig, handler)
        self._after_spawn.clear()
        if self.jobs is not None:
            child.jobs = self.jobs  # the terminal back to record's group once it is reaped
            self.jobs.spawned(child.pid)
        self.listener.warm()  # the handshake's imports, while the target execs
        if self.nofile is None:  # heapscope's own, for the clients of a fork-heavy target
            self.nofile = raise_nofile()
        try:
            self.pidfd = os.pidfd_open(child.pid)
        except OSError:
            self.pidfd = None  # without one, the recording's loop sees the exit at its next timeout
        for sig in self.pending:
            self._pass_on(child, sig)
        self.pending.clear()
        return child

    def answer(self, timeout: float) -> None:
        """Wait for the target's first handshake and answer it (and any other waiting); return
        early when the target exits. At most `timeout` s."""
        listener = self.listener
        end = time.monotonic() + timeout
        seen = self._handled()
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if listener.wait(left, -1 if self.pidfd is None else self.pidfd):
                self.serve()
                if self._handled() != seen:
                    return
            elif self.child is not None and self.child.poll() is not None:
                return  # it exited without a handshake (its status is kept for the recording)

    def serve(self) -> None:
        """Answer the clients waiting now, without waiting (between two imports), leaving
        RESERVED_FDS descriptors free: those out of descriptors are refused and counted
        (Listener.no_descriptors), as the producer does."""
        if not self.listener.wait(0):
            return  # nobody waiting (most calls): no need to set descriptors aside
        held = []
        try:
            for _ in range(RESERVED_FDS):
                held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            pass  # fewer: as many as there were
        try:
            self.listener.accept()
        finally:
            for fd in held:
                os.close(fd)

    def _handled(self) -> int:
        lst = self.listener
        return len(lst.accepted) + lst.rejected_clients + lst.untargeted_clients + lst.no_descriptors

    def take_pidfd(self) -> int | None:
        fd, self.pidfd = self.pidfd, None
        return fd

    def abandon(self) -> None:
        """Nothing took over (an error before the recording): the answered clients go, the
        directory too. The child, if any, is the caller's."""
        for accepted in self.listener.take():
            try:  # noqa: SIM105
                accepted.close()
            except OSError:
                pass
        self.listener.remove()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
