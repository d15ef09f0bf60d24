"""One recording, from the target's start (or the attach) to the written profile.

    with Recording(config, output, options) as rec:   # nothing started yet
        rec.start(argv)          # or rec.attach(pids)
        status = rec.run_until_exit()
    rec.summary                  # the figures `record` prints

The Recording owns what happens in between: the producer and its private
directory, signals (SIGUSR1: a dump now; others passed on to the target, or,
attached, a detach), dump times (-c), the producer's guardrails, the end
(the target's exit, --duration, stop()), and the teardown (final dumps,
stats, symbolization). Whatever fails inside heapscope, the Recording says so
in one line, lets the clients go (the target runs on unprofiled), keeps what
was written, and still waits for the target to end: the exit status is the
target's.

Hooks for a live view or an HTTP endpoint: `request_dump(reason)` and
`stop()` may be called from a signal handler or another thread (they only set
a flag and wake the loop); `fresh_dump()` / `fresh_snapshot()`, from another
thread, ask the loop for a dump and wait until it is committed (an HTTP
scrape); `dump_now(reason)` dumps at once from the loop's own thread;
`status` is called every STATUS_EVERY_S from the loop; `on_dump` functions
after each committed continuous dump (a pusher queues it and returns);
`every(seconds, fn)` calls fn(producer) on the loop's thread (a live view's
snapshot of per-callsite totals: producer state is read there and nowhere
else); `watch(fd, fn)` makes the loop wake when fd is readable and call fn
(the pytest plugin's per-test windows). Every hook runs on the loop's thread
and must return at once: the producer is not thread-safe.

The fleet options (--serve, --push, --label) are wired by `with_fleet()`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from heapscope import __version__, sigmask
from heapscope.bookkeeping.rows import WINDOW_ROW
from heapscope.closing import close_profile
from heapscope.errors import HeapscopeError, TargetError, UsageError
from heapscope.launch import Child, Launch, client_library_path, raise_nofile
from heapscope.model import CallsiteId, FrameId
from heapscope.producer.config import MAX_DURATION_S, RecordConfig, check_ms, check_positive
from heapscope.producer.producer import Producer
from heapscope.producer.session import Guardrails, remove_stale_dirs
from heapscope.slots import FrozenSlots, Slots
from heapscope.store.writer import ProfileWriter
from heapscope.wire.codec import PY_HEAP_ID
from heapscope.wire.handshake import MAX_FRAMES

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, issue 13)
if TYPE_CHECKING:
    from typing import Any

    from heapscope.fleet.live import Live
    from heapscope.fleet.serve import Snapshot
    from heapscope.producer import attach
    from heapscope.store.reader import Profile
    from heapscope.symbolize.missing import Unsymbolized

STATUS_EVERY_S = 0.5
FRESH_DUMP_TIMEOUT_S = 20.0  # a scrape waits this long for its dump, then gets an error
TOP_STACKS = 3  # the largest stacks at each process's peak, in the summary
STACK_FRAMES_SHOWN = 4  # innermost frames of each
UNSYMBOLIZED_SHOWN = 5  # modules named (with their fix) in the summary
IDLE_POLL_S = 0.005
# After a round that drained something, the next waits this long unless the
# round drained an eighth of a ring or more. Polling again at once drains a
# few dozen records per wake-up on a busy target and keeps the producer's core
# busy for them; a short nap lets a batch build up. An 8 MiB ring at ~1 M
# samples/s fills in ~70 ms, far longer than this nap.
BUSY_POLL_S = 0.001
GUARDRAIL_EVERY_S = 1.0
# Work the target's start does not wait for (issue 13): the loop does it while the target runs,
# a piece per round, once a process has connected (its handshake comes first) or after this long.
CHORES_AFTER_S = 0.05
# Modules the end of a recording imports (symbolization, the summary's peaks): imported by the
# loop while the target runs, so that its exit is not followed by their import.
END_MODULES = ("heapscope.store.reader", "heapscope.store.select", "heapscope.view.units")
SYMBOLIZE_MODULES = ("heapscope.symbolize.profile", "heapscope.symbolize.missing")
# Signals passed on to a started target: heapscope/launch.py's FORWARDED and TERMINAL.
# Attached (-p): these end the session (detach); the targets are not ours to signal.
DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _quiet(_msg: str) -> None:
    pass


class RecordingOptions(FrozenSlots):
    __slots__ = (
        "duration", "continuous_ms", "phase_ms", "max_memory_mb", "max_cpu_s", "symbolize", "command",
        "forward_signals", "force", "keep",
    )
    duration: float | None  # seconds; None = until the target ends (or stop())
    continuous_ms: int  # a dump every so many ms; 0 = only at the end
    phase_ms: int  # before the first continuous dump
    max_memory_mb: float | None  # guardrails on heapscope itself
    max_cpu_s: float | None
    symbolize: bool
    command: str  # for the profile's metadata
    # Pass SIGTERM, SIGHUP, ... on to a started target (the CLI); an in-process
    # host (a test runner with its own SIGALRM timeout, say) keeps its handlers.
    forward_signals: bool
    force: bool  # replace an existing heapscope profile at the output path
    # False: no profile at all (the pytest plugin without --heapscope-output reads only the
    # trackers' figures, window_snapshot): no file, no dump, no stack resolved (Producer's keep).
    keep: bool

    def __init__(self, duration: float | None = None, continuous_ms: int = 0, phase_ms: int = 0,
                 max_memory_mb: float | None = None, max_cpu_s: float | None = None, symbolize: bool = True,
                 command: str = "", forward_signals: bool = True, force: bool = False, keep: bool = True) -> None:
        set_field = object.__setattr__
        set_field(self, "duration", duration)
        set_field(self, "continuous_ms", continuous_ms)
        set_field(self, "phase_ms", phase_ms)
        set_field(self, "max_memory_mb", max_memory_mb)
        set_field(self, "max_cpu_s", max_cpu_s)
        set_field(self, "symbolize", symbolize)
        set_field(self, "command", command)
        set_field(self, "forward_signals", forward_signals)
        set_field(self, "force", force)
        set_field(self, "keep", keep)
        self.__post_init__()

    def __post_init__(self) -> None:
        check_positive(self.duration, "--duration (seconds)", MAX_DURATION_S)
        check_ms(self.continuous_ms, "--continuous-dump")
        check_ms(self.phase_ms, "--dump-phase")


class ProcessPeak(FrozenSlots):
    """A process's peak of sampled unreleased bytes and its largest stacks there."""

    __slots__ = ("pid", "name", "peak_bytes", "top", "heap", "other_heaps", "seen", "rss", "own_rss")
    pid: int
    name: str
    peak_bytes: int
    top: list[tuple[str, int]]  # (call path, innermost frames last; bytes), largest first
    heap: str  # the heap of peak_bytes and top (store.select.default_heap) when the profile has several
    other_heaps: list[tuple[str, int]]  # (name, bytes at its own peak), custom heaps
    seen: int  # its part of Summary.peak_heap, .peak_rss and .own_rss
    rss: int
    own_rss: int

    def __init__(self, pid: int, name: str, peak_bytes: int, top: list[tuple[str, int]], heap: str = "",
                 other_heaps: list[tuple[str, int]] | None = None, seen: int = 0, rss: int = 0,
                 own_rss: int = 0) -> None:
        set_field = object.__setattr__
        set_field(self, "pid", pid)
        set_field(self, "name", name)
        set_field(self, "peak_bytes", peak_bytes)
        set_field(self, "top", top)
        set_field(self, "heap", heap)
        set_field(self, "other_heaps", [] if other_heaps is None else other_heaps)
        set_field(self, "seen", seen)
        set_field(self, "rss", rss)
        set_field(self, "own_rss", own_rss)


class Summary(Slots):
    """The figures of a finished recording."""

    __slots__ = (
        "output", "processes", "samples", "sampled_bytes", "interval", "elapsed_s", "blocked_ms", "dropped_records",
        "unwinders", "client_errors", "exit_status", "output_bytes", "no_descriptors", "problems", "python",
        "peak_heap", "peak_rss", "own_rss", "peaks", "attached_heaps_note", "not_profiled", "shallow_stacks",
        "unsymbolized", "unsymbolized_frames", "symbol_notes",
    )
    output: Path
    processes: int
    samples: int
    sampled_bytes: int
    interval: int
    elapsed_s: float
    blocked_ms: float
    dropped_records: int
    unwinders: list[str]
    client_errors: list[str]
    exit_status: int | None  # the target's, shell style (128+N for signal N)
    output_bytes: int
    no_descriptors: int  # processes not profiled: heapscope was out of file descriptors
    problems: list[str]  # what went wrong inside heapscope, one line each
    python: list[str]  # the Python frames status lines, one per distinct one
    peak_heap: int  # sum over processes of each one's peak of sampled unreleased bytes
    peak_rss: int  # sum over processes of each one's peak RSS (VmHWM)
    own_rss: int  # sum over processes of heapscope's own resident bytes at their exits (0: none known)
    peaks: list[ProcessPeak]  # largest peak first
    attached_heaps_note: str  # -p: custom heaps registered before the attach are not seen
    not_profiled: list[str]  # targets the client never ran in, and why
    shallow_stacks: list[str]  # --unwinder fp without frame pointers
    unsymbolized: list[Unsymbolized]  # modules left `lib+0x...`, with the fix
    unsymbolized_frames: int  # frames without a function name, all modules
    symbol_notes: list[str]  # e.g. a debuginfod server that failed

    def __init__(self, output: Path, processes: int = 0, samples: int = 0, sampled_bytes: int = 0, interval: int = 0,
                 elapsed_s: float = 0.0, blocked_ms: float = 0.0, dropped_records: int = 0,
                 unwinders: list[str] | None = None, client_errors: list[str] | None = None,
                 exit_status: int | None = None, output_bytes: int = 0, no_descriptors: int = 0,
                 problems: list[str] | None = None, python: list[str] | None = None, peak_heap: int = 0,
                 peak_rss: int = 0, own_rss: int = 0, peaks: list[ProcessPeak] | None = None,
                 attached_heaps_note: str = "", not_profiled: list[str] | None = None,
                 shallow_stacks: list[str] | None = None, unsymbolized: list[Unsymbolized] | None = None,
                 unsymbolized_frames: int = 0, symbol_notes: list[str] | None = None) -> None:
        self.output = output
        self.processes = processes
        self.samples = samples
        self.sampled_bytes = sampled_bytes
        self.interval = interval
        self.elapsed_s = elapsed_s
        self.blocked_ms = blocked_ms
        self.dropped_records = dropped_records
        self.unwinders = [] if unwinders is None else unwinders
        self.client_errors = [] if client_errors is None else client_errors
        self.exit_status = exit_status
        self.output_bytes = output_bytes
        self.no_descriptors = no_descriptors
        self.problems = [] if problems is None else problems
        self.python = [] if python is None else python
        self.peak_heap = peak_heap
        self.peak_rss = peak_rss
        self.own_rss = own_rss
        self.peaks = [] if peaks is None else peaks
        self.attached_heaps_note = attached_heaps_note
        self.not_profiled = [] if not_profiled is None else not_profiled
        self.shallow_stacks = [] if shallow_stacks is None else shallow_stacks
        self.unsymbolized = [] if unsymbolized is None else unsymbolized
        self.unsymbolized_frames = unsymbolized_frames
        self.symbol_notes = [] if symbol_notes is None else symbol_notes


class WindowSnapshot(FrozenSlots):
    """One process's figures since its window began (Recording.window_snapshot), over its
    malloc heap and, for a Python program, python.pymalloc: disjoint heaps (client/pymem.c
    books a request once), so the figures add up; their trackers share one peak (the
    producer's share_peak), so the window's peak is the moment their sum was highest and
    each heap's rows are its state then (as the report's default, docs/profile.md)."""

    __slots__ = ("peak", "leak", "process")
    peak: int  # highest sampled unreleased bytes in the window, above its start
    leak: int  # sampled unreleased bytes at the snapshot, above the window's start
    process: Any  # the producer's ProcessState: for naming stacks (heap.stacks, heap.modules)

    def __init__(self, peak: int, leak: int, process: Any) -> None:
        set_field = object.__setattr__
        set_field(self, "peak", peak)
        set_field(self, "leak", leak)
        set_field(self, "process", process)

    def window_rows(self) -> list[tuple[int, ...]]:
        """The window's rows by callsite or stack (bookkeeping/rows.py, WINDOW_ROW), as of now;
        a bucket in both heaps is one row, their figures summed."""
        trackers = _window_trackers(self.process)
        if len(trackers) == 1:
            return list(WINDOW_ROW.iter_unpack(trackers[0].window()))
        merged: dict[tuple[int, int], list[int]] = {}
        for tracker in trackers:
            for row in WINDOW_ROW.iter_unpack(tracker.window()):
                have = merged.get((row[0], row[1]))
                if have is None:
                    merged[(row[0], row[1])] = list(row)
                else:
                    for i in range(2, len(row)):
                        have[i] += row[i]
        return [tuple(r) for r in merged.values()]


def _window_trackers(p: Any) -> list[Any]:
    """The trackers a test's window covers: malloc's and, when the process has it, Python's heap."""
    py = p.custom_heaps.get(PY_HEAP_ID)
    return [p.ingest.tracker] if py is None else [p.ingest.tracker, py.tracker]


class _Waiter:
    __slots__ = ("event", "dumped")
    event: threading.Event
    dumped: bool

    def __init__(self, event: threading.Event | None = None, dumped: bool = False) -> None:
        self.event = threading.Event() if event is None else event
        self.dumped = dumped


class Recording:
    """Start or attach, loop, dump, guard, tear down; see the module's docstring."""

    def __init__(self, config: RecordConfig, output: Path, options: RecordingOptions | None = None, *,
                 library: Path | None = None, say: Callable[[str], None] = _quiet,
                 warn: Callable[[str], None] = _quiet, log: Callable[[str], None] = _quiet,
                 launch: Launch | None = None) -> None:
        """`launch`: the target started before the recording existed (`record`, heapscope/launch.py):
        start() takes it over, with its listener, its answered clients and its signal handlers."""
        self.config = config
        self.output = Path(output)
        self.options = options or RecordingOptions()
        self.guard = Guardrails(self.options.max_memory_mb, self.options.max_cpu_s)
        self.library = library or client_library()
        self.say = say  # progress, quiet with -q
        self.warn = warn  # always shown
        self.log = log  # -v
        self.status: Callable[[float], None] | None = None
        self.summary = Summary(self.output, interval=config.interval)
        self.writer: ProfileWriter | None = None
        self.producer: Producer | None = None
        self.child: Child | None = None
        self._child_fd: int | None = None  # a pidfd of the child: the loop wakes at its exit, not at a timeout
        self.attached: list[int] = []
        self.errors: list[str] = []  # attach failures
        self.started = time.monotonic()
        self._spawned: float | None = None  # the target's spawn and its exit as seen (target_wall_ns)
        self._exited: float | None = None
        self._dumps_requested: list[str] = []
        self._watched: dict[int, Callable[[], None]] = {}
        self._stopping = False
        self._failed = False  # an internal error: profiling abandoned
        self._ended = False  # the loop is over: requests are ignored
        self._launch = launch
        # The handlers before heapscope's own (a launch's were installed first).
        self._restore: dict[int, Any] = dict(launch.restore) if launch is not None else {}
        # The command exits right after close() (record, live): what had no handler of its own
        # is left ignored then, not restored (_uninstall_signals). Never in a host that goes on:
        # its later children would inherit the ignored signals (a Pool's workers outlive terminate()).
        self.exits_after_close = False
        self._old_wakeup: int | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._locks: list[attach.PidLock] = []
        self._symbolizer: Any = None
        self._symbol_report: Any = None  # the SymbolizeReport of the end of the recording
        self._target: tuple[str, str | None] | None = None  # started: (its path, why it cannot be preloaded)
        self._nofile: tuple[int, int] | None = None  # the limit before we raised it
        self.on_dump: list[Callable[[Path], None]] = []  # after each committed continuous dump
        self.fleet: Live | None = None  # --serve/--push: closed (final dumps pushed) by close()
        self.fleet_lines: list[str] = []  # its summary lines, once closed
        self._every: list[list[Any]] = []  # [period s, fn(producer), next time]
        self._waiters: list[_Waiter] = []  # fresh_dump() callers waiting for the next dump
        self._waiters_lock = threading.Lock()
        # (fn, required): done by the loop while the target runs (_chore); what is left when the
        # session ends is done then if required (close), else dropped (a module warmed up early).
        self._chores: list[tuple[Callable[[], None], bool]] = []
        self._metadata: tuple[tuple[str, object], ...] = ()  # written by _write_metadata

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self) -> Recording:
        # Other runs' leftovers: not a reason for the target to wait (~2 ms on a busy /tmp).
        self._chores.append((self._remove_stale_dirs, True))
        self._install_signal(signal.SIGUSR1, self._on_usr1)
        if threading.current_thread() is threading.main_thread():
            self._old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _remove_stale_dirs(self) -> None:
        with contextlib.suppress(OSError):
            removed = remove_stale_dirs()
            if removed:
                self.log(f"removed {removed} session director{'ies' if removed > 1 else 'y'} of dead runs")

    def _write_metadata(self) -> None:
        """The profile's metadata, once: a chore, or before a dump (a scrape reads the profile)."""
        metadata, self._metadata = self._metadata, ()
        if not metadata or self.writer is None or self._failed:
            return
        try:
            for key, value in metadata:
                self.writer.set_metadata(key, value)
            self.writer.commit()
        except Exception as e:  # the profile cannot be written: as a failure of the loop's
            self._fail(e)

    def _warm_up(self) -> None:
        """Queue the imports the end of the recording will need, for the loop's idle time."""
        if not self.options.keep:
            return  # no profile: the end reads nothing back
        modules = END_MODULES + (SYMBOLIZE_MODULES if self.options.symbolize else ())
        self._chores += [(self._importer(m), False) for m in modules]

    def _importer(self, module: str) -> Callable[[], None]:
        def import_module() -> None:
            # Only what the end will use: a recording without a sample neither symbolizes nor
            # reads its peaks back; until the first one, the import waits its turn again.
            if self.producer is not None and self.producer.live_summary()[0] == 0:
                self._chores.append((import_module, False))
                return
            __import__(module)  # importlib.import_module, without importing importlib

        import_module.__name__ = f"import {module}"
        return import_module

    def _chore(self, required_only: bool = False) -> None:
        """Do the next chore (every required one left, with `required_only`); a failure is only logged."""
        while self._chores:
            fn, required = self._chores.pop(0)
            if required_only and not required:
                continue
            try:
                fn()
            except Exception as e:  # a chore is housekeeping or a head start: never a reason to stop
                self.log(f"{getattr(fn, '__name__', 'chore')} failed: {_describe(e)}")
            if not required_only:
                return

    def _open(self, command: str, launch: Launch | None = None) -> Producer:
        """The profile and the producer: fails here, before any target is touched (or, with a
        `launch` that started it, takes over what the launch did)."""
        if self.producer is not None:
            raise UsageError("a Recording records one target (or one set of pids) only")
        if not self.options.keep:  # nothing written: no writer (self.writer stays None)
            self.producer = Producer(None, self.config, log=self.log,
                                     listener=launch.listener if launch is not None else None)
            self.started = launch.started if launch is not None else time.monotonic()
            return self.producer
        # The output is checked and its files created now (by `record`'s launch, before its target
        # started); the database and its schema (~4 ms) when first written to: when the producer's
        # poll adopts the first client, after the client has its answer, or by the chore below
        # (issue 13). Should that fail, the failure is the loop's like any other (_fail): one line,
        # the clients let go, the target supervised.
        writer = ProfileWriter(self.output, force=self.options.force, connect=False,
                               created=launch is not None and launch.created)
        self.writer = writer
        metadata = (("heapscope_version", __version__), ("command", self.options.command or command),
                    ("interval", self.config.interval),
                    # one moment on both clocks (fleet/pprof_source.py maps the profile's times with them)
                    ("started_unix_ns", launch.started_unix_ns if launch is not None else time.time_ns()),
                    ("started_monotonic_ns", launch.started_monotonic_ns if launch is not None
                     else time.monotonic_ns()))
        self._metadata = metadata
        self._chores.insert(0, (self._write_metadata, True))
        self.producer = Producer(writer, self.config, log=self.log,
                                 listener=launch.listener if launch is not None else None)
        self.started = launch.started if launch is not None else time.monotonic()
        return self.producer

    def start(self, argv: list[str], executable: str | None = None,
              stdin: int | None = None, stdout: int | None = None, stderr: int | None = None) -> int:
        """Start `argv` under the client; its pid. `stdin`/`stdout`/`stderr`: None, a descriptor
        or subprocess.DEVNULL. With the Recording's `launch`, the target it started is taken over."""
        if not argv:
            raise UsageError("no command to profile")
        launch = self._launch
        if launch is not None and launch.child is not None:
            producer = self._open(" ".join(argv), launch)
            self._dumps_requested += ["signal"] * launch.dumps_requested
            launch.dumps_requested = 0
        else:
            producer = self._open(" ".join(argv))
            launch = Launch(self.config, self.log, listener=producer.listener)
            if self.options.forward_signals:
                launch.forward_signals(install=self._install_signal, usr1=False)
            launch.spawn(argv, executable, str(self.library), stdin, stdout, stderr)
        assert launch.child is not None
        self.child = launch.child
        self._spawned = launch.spawned
        self._child_fd = launch.take_pidfd()
        producer.target_pids.add(self.child.pid)
        producer.exit_peak = self._child_peak_rss
        # heapscope's own limit, raised after the spawn: the target has the one it would have had.
        self._nofile = launch.nofile
        launch.nofile = None
        self._raise_nofile()
        self._start_symbolizer()
        # Only the summary uses what this finds (why the target cannot be preloaded): after the spawn.
        self._chores.append((lambda: self._check_preload(argv[0], executable), True))
        self._warm_up()
        return self.child.pid

    def _child_peak_rss(self, pid: int) -> int:
        """The started target's exact peak RSS, reaped now if it is gone (the producer asks when its
        process ends); 0 when not known (launch.Child.peak_rss)."""
        child = self.child
        if child is None or child.pid != pid:
            return 0
        child.poll()
        return child.peak_rss()

    def attach(self, pids: list[int]) -> list[int]:
        """Attach to running processes; the pids attached. Refusals before any
        attach raise TargetError; later failures are collected in `errors`."""
        from heapscope.producer import attach  # gdb injection: only -p needs it

        for pid in pids:
            attach.check_target(pid)
        attach.find_gdb()
        producer = self._open("-p " + ",".join(map(str, pids)))
        self._raise_nofile()
        for sig in DETACH_SIGNALS:
            self._install_signal(sig, self._on_stop)
        sigmask.release()  # held back since the entry point: these handlers take them now
        for pid in pids:
            if self._stopping:
                break
            self._attach_one(producer, pid)
        if not self.attached and self.errors:
            raise TargetError("; ".join(self.errors))
        self._start_symbolizer()
        self._warm_up()
        return list(self.attached)

    def _attach_one(self, producer: Producer, pid: int) -> None:
        from heapscope.producer import attach

        try:
            lock = attach.PidLock(pid)
        except attach.AlreadyProfiled as e:
            producer.reject_concurrent(pid)
            self.errors.append(str(e))
            return
        except TargetError as e:  # gone since its check, or not ours to open
            self.errors.append(str(e))
            return
        producer.attach_pids.add(pid)
        producer.target_pids.add(pid)
        t0 = time.monotonic()
        env = producer.client_env()
        try:
            injection = attach.start_injection(pid, self.library, env["HEAPSCOPE_SOCKET"], env["HEAPSCOPE_TOKEN"])
            while not injection.done():
                if time.monotonic() - t0 > attach.GDB_TIMEOUT_S:
                    injection.kill()
                    raise TargetError(f"attaching to pid {pid} timed out after {attach.GDB_TIMEOUT_S:.0f} s "
                                      "(is it stopped?)")
                self._poll(IDLE_POLL_S)
            injection.result()
        except attach.AlreadyProfiled as e:
            producer.attach_pids.discard(pid)
            producer.reject_concurrent(pid)
            lock.release()
            self.errors.append(str(e))
            return
        except TargetError as e:
            producer.attach_pids.discard(pid)
            lock.release()
            self.errors.append(str(e))
            return
        self._locks.append(lock)
        self.attached.append(pid)
        self.say(f"attached to pid {pid} in {(time.monotonic() - t0) * 1000:.1f} ms")

    def _raise_nofile(self) -> None:
        if self._nofile is None:
            self._nofile = raise_nofile()

    def _restore_nofile(self) -> None:
        """heapscope's limit back as it was (the target, spawned before the raise, kept it)."""
        if self._nofile is not None:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, self._nofile)

    def _start_symbolizer(self) -> None:
        if not self.options.symbolize or self.producer is None or self.writer is None:
            return
        try:
            # Cheap: it only notes modules; warming starts from the loop if the target runs a while.
            from heapscope.symbolize.live import LiveSymbolizer
            self._symbolizer = LiveSymbolizer(writer=self.writer)
            self.producer.on_module = self._symbolizer.module
        except Exception as e:  # symbolization is a bonus: never a reason to stop
            self.warn(f"symbolization unavailable: {_describe(e)}")
            self._symbolizer = None

    # -- requests (signal handlers, other threads) ---------------------------

    def request_dump(self, reason: str = "signal") -> None:
        """A dump of every process, by the loop, as soon as it wakes."""
        if not self._ended:
            self._dumps_requested.append(reason)
            self._wake()

    def watch(self, fd: int, fn: Callable[[], None] | None) -> None:
        """The loop also wakes when `fd` is readable, and then calls fn (None: no more).

        fn runs on the loop's thread after each wake-up (it reads fd without
        blocking, and may use `producer` through caught_up()); an exception
        in it is its own affair, recording goes on.
        """
        if fn is None:
            self._watched.pop(fd, None)
        else:
            self._watched[fd] = fn

    def caught_up(self, pid: int, resolve: bool = True) -> Any:
        """The producer's ProcessState of `pid` with every record its ring holds
        handled (and its stacks resolved to callsites); None if it is not
        profiled (or profiling failed). Only from the loop's thread (a watch() function).
        """
        producer = self.producer
        if producer is None or self._failed:
            return None
        p = next((q for q in producer.processes.values() if q.info.pid == pid), None)
        if p is None:
            return None
        while producer._drain(p, limit=0):
            pass
        if resolve:
            p.heap.resolve(producer.frames, producer.trie, p.ingest.tracker)
        return p

    def window_snapshot(self, pid: int, *, restart: bool = False, keep_peak: bool = False) -> WindowSnapshot | None:
        """From the loop's thread: pid's figures since its window began, every record of its
        ring handled (stacks not resolved: cheap). `restart`: a new window begins after the
        snapshot; with `keep_peak`, a closing window that holds the process's peak is resolved
        first, so that the profile keeps its rows.
        None when pid is not profiled."""
        p = self.caught_up(pid, resolve=False)
        producer = self.producer
        if p is None or producer is None:
            return None
        trackers = _window_trackers(p)
        # One window per peak: trackers sharing a peak (Tracker.share_peak) have one window.
        groups = {t.peak_group: t for t in trackers}
        stats = [t.stats() for t in groups.values()]
        peak = sum(st["window_peak"] - st["window_base"] for st in stats)
        leak = sum(st["joint_unfreed"] - st["window_base"] for st in stats)
        if restart:
            if keep_peak and any(0 < st["window_peak"] >= st["peak_unfreed"] for st in stats):
                p.heap.resolve(producer.frames, producer.trie, p.ingest.tracker)
                for tracker in trackers[1:]:
                    producer.bind_callsites(p, tracker)
            for tracker in groups.values():
                tracker.new_window()
        return WindowSnapshot(peak, leak, p)

    def callsite_paths(self, first: int) -> list[tuple[int, int]]:
        """(parent callsite or 0, frame id) of every callsite from id `first` on, in id order."""
        return self.producer.trie.paths_from(first) if self.producer is not None else []

    def stop(self) -> None:
        """End the session: final dumps; attached targets are let go, a started one runs on."""
        self._stopping = True
        self._wake()

    def fresh_dump(self, timeout: float = FRESH_DUMP_TIMEOUT_S) -> None:
        """From another thread: a dump of every process by the loop, returned from once committed.

        Concurrent callers share the next dump. HeapscopeError when the
        recording is over or failed, or the dump did not come within `timeout`.
        """
        if not self.options.keep:
            raise HeapscopeError("this recording keeps no profile")
        waiter = _Waiter()
        with self._waiters_lock:
            if self._ended or self._failed or self.producer is None:
                raise HeapscopeError("the recording is over" if self._ended else "the recording is not running")
            self._waiters.append(waiter)
        self._wake()
        if not waiter.event.wait(timeout):
            with self._waiters_lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            raise HeapscopeError(f"no dump within {timeout:.0f} s (the recording is busy)")
        if self._failed:
            raise HeapscopeError("the recording failed; see its error line")
        if not waiter.dumped:
            raise HeapscopeError("the recording is over")

    def fresh_snapshot(self) -> Snapshot:
        """What PprofServer serves: the profile after a fresh dump (its latest dumps)."""
        from heapscope.fleet.serve import Snapshot

        self.fresh_dump()
        return Snapshot(self.output, None)

    def every(self, seconds: float, fn: Callable[[Producer], None]) -> None:
        """Call fn(producer) on the loop's thread every `seconds` (first at once); it must return at once."""
        self._every.append([seconds, fn, 0.0])

    def with_fleet(self, args: Any) -> Live:
        """--serve/--push/--label of `args` (fleet.live.add_arguments): the server listens at once
        (a bad address fails here, before any target starts); pushes follow each continuous dump
        and the final ones; close() stops both and keeps their summary lines in `fleet_lines`."""
        from heapscope.fleet.live import Live

        fleet = Live.from_args(args, snapshot=self.fresh_snapshot)
        self.fleet = fleet
        self.on_dump.append(fleet.dumped)
        if fleet.server is not None:
            self.say(f"serving {fleet.server.url}heap and /allocs")
        return fleet

    def _answer_waiters(self) -> None:
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        if not waiters:
            return
        self.dump_now("signal")
        for w in waiters:
            w.dumped = True
            w.event.set()

    def _release_waiters(self) -> None:
        """The loop is over: nobody waits for a dump that will not come."""
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.event.set()

    def dump_now(self, reason: str) -> None:
        """A dump of every process now; only from the loop's thread (or between start and run)."""
        if self.producer is None or self._failed or self._ended:
            return
        self._write_metadata()
        try:
            self.producer.dump_all(reason)
        except Exception as e:
            self._fail(e)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _on_usr1(self, _sig: int, _frame: object) -> None:
        self.request_dump("signal")

    def _on_stop(self, _sig: int, _frame: object) -> None:
        self._stopping = True

    def _install_signal(self, sig: int, handler: Callable[[int, Any], None] | int) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # in-process recording from another thread: the host owns the signals
        old = signal.signal(sig, handler)
        self._restore.setdefault(sig, old)

    # -- the loop --------------------------------------------------------------

    def _poll(self, timeout: float) -> int:
        assert self.producer is not None
        drained = 0
        if not self._failed:
            try:
                watch = tuple(self._watched)
                if self._child_fd is not None:
                    watch += (self._child_fd,)
                drained = self.producer.poll(timeout, wake=self._wake_r, watch=watch)
            except Exception as e:
                self._fail(e)
        for fn in list(self._watched.values()):
            with contextlib.suppress(Exception):
                fn()
        with contextlib.suppress(BlockingIOError, InterruptedError, OSError):
            while self._wake_r.recv(512):
                pass
        return drained

    def run_until_exit(self) -> int:
        """Record until the session ends, then wait for a started target to end.

        The target's exit status, shell style; attached: 0, or 1 when an attach
        failed or an attached process died during the session.
        """
        producer = self.producer
        if producer is None:
            raise UsageError("nothing to record: call start() or attach() first")
        code: int | None = None
        try:
            code = self._loop(producer)
        except Exception as e:  # the loop's own bookkeeping: same as a producer failure
            self._fail(e)
        self._ended = True
        self._release_waiters()
        if self.child is not None:
            if code is None:
                # --duration, a guardrail, stop() or a failure ended the session:
                # the target runs on unprofiled, and we wait for it.
                if not self._failed:
                    self._end_profiling()
                code = self.child.exit_status()
            self.summary.exit_status = code
            return code
        self._end_profiling()
        dead: list[int] = []
        if self.attached:
            from heapscope.producer.attach import alive

            # The client shuts its socket in the process's last destructor, before the
            # kernel makes it a zombie: the producer saw that exit even when /proc has not yet.
            dead = [pid for pid in self.attached if pid in producer.exited_pids or not alive(pid)]
        for pid in dead:
            self._problem(f"pid {pid} exited during the session")
        return 1 if dead or self.errors or self._failed else 0

    def _loop(self, producer: Producer) -> int | None:
        opts = self.options
        started = self.started
        interval = opts.continuous_ms / 1000
        next_status = started + STATUS_EVERY_S
        next_dump = started + opts.phase_ms / 1000 if interval > 0 else None
        next_guard = started + GUARDRAIL_EVERY_S if self.guard.enabled else None
        end_at = started + opts.duration if opts.duration is not None else None
        batch = max(1, self.config.shmem_size // 8)  # drained per round above which the loop does not nap
        timeout = IDLE_POLL_S
        chores_from = started + CHORES_AFTER_S
        polled = time.monotonic()
        while True:
            drained = self._poll(timeout)
            # The idle nap too when, at the rate this round drained, it fills under a quarter
            # of `batch`: a busy compiler's records then cost ~5x fewer wake-ups (issue 13).
            was, polled = polled, time.monotonic()
            slow = drained * IDLE_POLL_S * 4 <= batch * (polled - was)
            timeout = 0.0 if drained >= batch else BUSY_POLL_S if drained and not slow else IDLE_POLL_S
            if self._chores and drained < batch and (
                    producer.processes or producer.ended or polled >= chores_from):
                self._chore()
            if self._dumps_requested:
                # Every request so far in one dump, then on: a flood of SIGUSR1 that came faster
                # than dumps kept this loop dumping, and record never saw its target's exit
                # (tests/fault: test_a_flood_of_dump_requests_never_stops_the_recording).
                reasons, self._dumps_requested = self._dumps_requested, []
                self.dump_now(reasons[0])
            if self._waiters:
                self._answer_waiters()
            now = time.monotonic()
            if next_dump is not None and now >= next_dump:
                self.dump_now("periodic")
                while next_dump <= now:
                    next_dump += interval
                self._dumped()
            for job in self._every:
                if now >= job[2] and not self._failed:
                    job[2] = now + job[0]
                    try:
                        job[1](producer)
                    except Exception as e:  # a watcher's bug must not end the recording
                        self._every.remove(job)
                        self.warn(f"live view stopped: {_describe(e)}")
                        break
            if next_guard is not None and now >= next_guard and not self._failed:
                hit = self.guard.check()
                if hit:
                    try:
                        producer.hit_guardrail(hit)
                    except Exception as e:
                        self._fail(e)
                    self.warn(f"guardrail hit: {hit}; final dumps written, the targets run on unprofiled")
                    next_guard = next_dump = None
                else:
                    next_guard = now + GUARDRAIL_EVERY_S
            if self.child is not None:
                code = self.child.poll()
                if code is not None:
                    self._exited = time.monotonic()
                    return self._target_exited(producer, code)
                if self._failed:
                    return None  # supervised by run_until_exit from here
            elif self._stopping or self._failed or not any(
                    p.info.pid in producer.attach_pids for p in producer.processes.values()):
                return None
            if self._stopping or (end_at is not None and now >= end_at):
                return None
            if producer.guardrail and self.child is None:
                return None
            if self.status is not None and now >= next_status:
                with contextlib.suppress(Exception):
                    self.status(now)
                next_status = now + STATUS_EVERY_S
            if self._symbolizer is not None:
                try:
                    self._symbolizer.tick(now)
                except Exception as e:  # symbolization is a bonus: the frames get names at the end
                    self.log(f"early symbolization stopped: {_describe(e)}")

    def _dumped(self) -> None:
        if self._failed:
            return
        for fn in self.on_dump:
            with contextlib.suppress(Exception):  # a pusher only queues; nothing of it may stop us
                fn(self.output)

    def _target_exited(self, producer: Producer, code: int) -> int:
        # A dump asked for now has nothing left to show, and record and live exit after the
        # close: SIGUSR1 ignored from here, so that a flood of it (each one a Python handler
        # between two bytecodes) no longer slows the final dump, symbolization and summary.
        if self.exits_after_close and signal.SIGUSR1 in self._restore:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        # The target is gone; its socket (and those of children that exited with
        # it) has reached EOF: end them as exited before ending the rest.
        if not self._failed:
            try:
                producer.stop_accepting()
                while producer.poll(0):
                    pass
            except Exception as e:
                self._fail(e)
        return 128 - code if code < 0 else code

    def _end_profiling(self) -> None:
        """Final dumps of every process still connected; they run on unprofiled."""
        producer = self.producer
        if producer is None or self._failed:
            return
        t0 = time.monotonic()
        live = [p.info.pid for p in producer.processes.values() if p.info.pid in producer.attach_pids]
        try:
            producer.finish()
        except Exception as e:
            self._fail(e)
            return
        for pid in live:
            self.say(f"detached from pid {pid} in {(time.monotonic() - t0) * 1000:.1f} ms")

    # -- failures ----------------------------------------------------------------

    def _fail(self, e: BaseException) -> None:
        """An internal error: one line, the clients let go, what was written kept."""
        if self._failed:
            return
        self._failed = True
        what = _describe(e, self.output)
        running = "the target runs on unprofiled" if self.child is not None else "the targets run on unprofiled"
        self._problem(f"{what}; profiling stopped, {running}; the profile keeps what was written before")
        if self.producer is not None:
            self.producer.abandon()
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.rollback()

    def _problem(self, line: str) -> None:
        self.summary.problems.append(line)
        self.warn(f"error: {line}")

    # -- teardown ----------------------------------------------------------------

    def close(self) -> None:
        """Write what is left, symbolize, and let everything go; always safe to call."""
        self._ended = True
        self._release_waiters()
        try:
            self._chore(required_only=True)
            if self.child is not None and self.child.returncode is None:
                # An exception left the session early: the target still ends under us.
                self._end_profiling()
                self.summary.exit_status = self.child.exit_status()
            else:
                self._end_profiling()
            self._write_end()
        finally:
            if self.producer is not None:
                self.producer.abandon()
            for lock in self._locks:
                lock.release()
            self._locks.clear()
            self._figures()
            if self.writer is not None:
                unfolded = close_profile(self.writer, self.output)
                if unfolded is not None:
                    self._problem(unfolded)
                self.summary.output_bytes = self.output.stat().st_size if self.output.exists() else 0
                self._missing_figures()
            self.summary.elapsed_s = time.monotonic() - self.started
            self._close_fleet()
            self._restore_nofile()
            self._nofile = None
            if self._child_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._child_fd)
                self._child_fd = None
            # Last: a signal after the target's end (say SIGUSR1) must find our handler.
            self._uninstall_signals()

    def _close_fleet(self) -> None:
        """Stop serving; push the final dumps (now symbolized) and give the pushers a bounded drain."""
        fleet, self.fleet = self.fleet, None
        if fleet is None:
            return
        if fleet.server is not None:
            fleet.server.close()  # before the last push: no scrape may wait on a loop that is gone
        if self.writer is not None and self.output.exists() and not self._failed:
            self._dumped_final(fleet)
        try:
            self.fleet_lines = fleet.close()
        except Exception as e:
            self.fleet_lines = [f"serving/pushing ended badly: {_describe(e)}"]

    def _dumped_final(self, fleet: Live) -> None:
        with contextlib.suppress(Exception):
            fleet.dumped(self.output)

    def _write_end(self) -> None:
        producer, writer = self.producer, self.writer
        if producer is None or writer is None:
            return
        if not self._failed:
            try:
                # A started target: spawn to the exit seen (the loop wakes on its pidfd);
                # else the session, as before.
                end = self._exited if self._exited is not None else time.monotonic()
                begin = self._spawned if self._spawned is not None else self.started
                writer.set_metadata("target_wall_ns", int((end - begin) * 1e9))
                writer.add_stats(producer.global_stats())
                writer.add_stats(self._not_profiled_stats(producer))
                writer.add_stats(_own_usage())
                writer.set_metadata("duration_ns", int((time.monotonic() - self.started) * 1e9))
                writer.commit()
            except Exception as e:
                self._fail(e)
        symbolizer, self._symbolizer = self._symbolizer, None
        if symbolizer is not None:
            if self._failed:
                with contextlib.suppress(Exception):
                    symbolizer.close()
                return
            try:
                self._symbol_report = symbolizer.finish(writer)
            except Exception as e:
                self._fail(e)
        if not self._failed:
            try:  # after the symbols: a stack that ends in glibc's start is complete (ENTRY_FRAMES)
                writer.add_stats(self._shallow_stats(producer))
                writer.commit()
            except Exception as e:
                self._fail(e)

    def _figures(self) -> None:
        producer = self.producer
        if producer is None:
            return
        procs = producer.ended
        s = self.summary
        s.processes = len(procs)
        s.no_descriptors = producer.no_descriptors
        with contextlib.suppress(Exception):
            s.samples = sum(p.final_stats.get("mallocs", 0) + sum(h.samples for h in p.custom_heaps.values())
                            for p in procs)  # custom heaps (issue 16) included
            # What the dumps summed: all sampled bytes, or with --dump-at-max those at the peak.
            key = "peak_unfreed" if self.config.dump_at_max else "sampled_bytes"
            s.sampled_bytes = sum(p.final_stats.get(key, 0) for p in procs)
            s.blocked_ms = sum(p.final_meta.get("blocked_ns", 0) for p in procs) / 1e6
            s.dropped_records = sum(p.final_meta.get("dropped_records", 0) for p in procs)
            s.unwinders = sorted({p.flags.unwinder for p in procs if p.flags.unwinder})
            s.client_errors = sorted({f"{p.info.name}: {p.flags.client_error}"
                                      for p in procs if p.flags.client_error})
            s.python = sorted({p.python_status for p in procs if p.python_status})
            s.peak_heap = sum(p.final_stats.get("peak_unfreed", 0) for p in procs)
            s.peak_rss = sum(p.peak_rss for p in procs)
            s.own_rss = sum(p.own_rss for p in procs)
            if any(not p.flags.from_startup for p in procs):
                from heapscope.producer.producer import ATTACH_HEAPS_NOTE
                s.attached_heaps_note = ATTACH_HEAPS_NOTE
            invalid = sum(p.final_meta.get("python_walks_invalid", 0) for p in procs)
            unplaced = sum(p.heap.python.unplaced for p in procs)
            if invalid:
                s.python.append(f"python frames: {invalid:,} walks cut short by a failed check")
            if unplaced:
                # Mostly stacks cut at --max-frames: an import's native frames nest ~10 deep per level.
                cut = sum(p.final_meta.get("truncated_stacks", 0) for p in procs)
                why = "their eval activation was not in the native stack"
                if cut and self.config.max_frames < MAX_FRAMES:
                    why += (f"; {cut:,} stacks were cut at --max-frames {self.config.max_frames},"
                            f" {MAX_FRAMES} keeps more whole")
                s.python.append(f"python frames: {unplaced:,} frames put at the root ({why})")

    # -- what is missing (summary) ----------------------------------------------

    def _check_preload(self, program: str, executable: str | None) -> None:
        """Note why the started target cannot get the client (static, setuid), for the summary."""
        path = executable or (program if "/" in program else None)
        if not path:  # `record` passes the executable it found (cli/record.py)
            from heapscope.which import which

            path = which(program) or program
        why: str | None = None
        with contextlib.suppress(Exception):
            from heapscope.symbolize.preload import preload_blocker
            why = preload_blocker(path)
        self._target = (path, why)
        if why:
            self.log(f"{path}: {why}")

    def _not_profiled_stats(self, producer: Producer) -> list[tuple[str, int | None, str, str, int, str]]:
        """The started target when its pid never connected: a line for the summary, a row for `stats`."""
        child, target = self.child, self._target
        if child is None or target is None or (self.config.names and not target[1]):
            return []  # with -n the target may rightly stay dormant
        connected = {p.info.pid for p in producer.ended} | {p.info.pid for p in producer.processes.values()}
        if child.pid in connected:
            return []
        path, why = target
        why = why or ("it never connected to heapscope: it (or a wrapper) cleared LD_PRELOAD before exec,"
                      " or the client could not start in it")
        line = f"{path} (pid {child.pid}) was not profiled: {why}"
        self.summary.not_profiled.append(line)
        return [("target_not_profiled", None, "data_loss", "producer", 1, line)]

    def _missing_figures(self) -> None:
        """Peaks, shallow fp stacks and unsymbolized modules, read back from the written profile."""
        s = self.summary
        report, self._symbol_report = self._symbol_report, None
        try:
            if report is not None:
                from heapscope.symbolize.missing import unsymbolized_modules
                mods = unsymbolized_modules(report)
                s.symbol_notes = list(report.debuginfod_errors) + list(report.cache_notes)
                s.unsymbolized_frames = sum(m.frames for m in mods)
                s.unsymbolized = mods if len(mods) <= UNSYMBOLIZED_SHOWN + 1 else mods[:UNSYMBOLIZED_SHOWN]
            if self.producer is None or not self.output.is_file() or not self.producer.ended or not s.samples:
                return  # no sample, no peak: the profile need not be read back
            from heapscope.store.reader import open_profile
            with open_profile(self.output) as profile:
                self._peaks(profile)
        except Exception as e:  # the profile is written; these figures are a bonus
            self.log(f"summary figures unavailable: {_describe(e)}")

    def _shallow_stats(self, producer: Producer) -> list[tuple[str, int | None, str, str, int, str]]:
        """--unwinder fp on code without frame pointers: the processes whose stacks are mostly
        one or two frames deep (read from what the producer committed), for `stats` and the summary."""
        fp = {int(p.info.upid): p for p in producer.ended if p.flags.unwinder == "frame pointers"}
        if not fp:
            return []
        rows: list[tuple[str, int | None, str, str, int, str]] = []
        try:
            from heapscope.store.reader import open_profile
            from heapscope.symbolize.missing import SHALLOW_DEPTH, is_mostly_shallow, mostly_shallow
            with open_profile(self.output) as profile:
                callsites = profile.callsites()
                depth: dict[CallsiteId, int] = {}
                for upid, p in sorted(fp.items()):
                    used = profile.used_callsites([upid])
                    shallow, n = mostly_shallow([_depth(callsites, depth, cs) for cs in used],
                                                [_root_name(profile, cs) for cs in used])
                    if not is_mostly_shallow(shallow, n):
                        continue
                    line = (f"{p.info.name or '?'} (pid {p.info.pid}): {shallow:,} of {n:,} stacks are at most"
                            f" {SHALLOW_DEPTH} frames deep with --unwinder fp: its code has no frame pointers;"
                            " record with --unwinder libunwind (or build with -fno-omit-frame-pointer)")
                    self.summary.shallow_stacks.append(line)
                    rows.append(("shallow_fp_stacks", upid, "data_loss", "producer", shallow, line))
        except Exception as e:  # a check of the data, never a reason to lose it
            self.log(f"frame-pointer depth check unavailable: {_describe(e)}")
        return rows

    def _peaks(self, profile: Profile) -> None:
        """Each process's peak and its largest stacks, read with a few indexed queries (the
        callsite and frame tables, ~100k rows for a compiler, are never loaded whole)."""
        s = self.summary
        # One heap (store.select: a pool's memory is in its malloc block too); the others by their peaks.
        from heapscope.store.select import heap_label, heap_members, heap_names, heap_peaks, select_heap
        from heapscope.view.peaks import peak_stacks  # a Python process's lines: its Python frames (issue 12)
        python = profile.python_upids()
        heap = select_heap(profile, None)
        members = heap_members(heap) or []
        others: dict[int, list[tuple[str, int]]] = {}
        # Only when the profile has another heap (a heap's peak rows come with its dumps): the
        # sums group every peak row (~3 ms on a compiler's, after the target's exit; issue 13).
        if set(heap_names(profile)) - set(members):
            for upid_, name, size, _count in heap_peaks(profile):
                if name not in members:
                    others.setdefault(upid_, []).append((name, size))
        ended = {int(p.info.upid): p for p in self.producer.ended} if self.producer is not None else {}
        for stored in profile.processes():
            upid = int(stored.info.upid)
            peak = peak_stacks(profile, upid, TOP_STACKS, STACK_FRAMES_SHOWN, upid in python)
            if peak is not None:
                total, rows = peak
                if total > 0 or upid in others:
                    st = ended.get(upid)
                    s.peaks.append(ProcessPeak(stored.info.pid, stored.info.name or "?", total, rows,
                                               heap_label(heap) if upid in others and heap else "",
                                               others.get(upid, []),
                                               st.final_stats.get("peak_unfreed", 0) if st else 0,
                                               st.peak_rss if st else 0, st.own_rss if st else 0))
        s.peaks.sort(key=lambda pk: -pk.peak_bytes)

    def _uninstall_signals(self) -> None:
        # A command that only prints and exits from here (exits_after_close: record, live): a
        # signal that would kill it now must not put its own death in place of the target's
        # status (SIGTERM just after the target's exit ended record with -15 instead of 3;
        # SIGINT raised KeyboardInterrupt: 130), so what had no handler of its own before (the
        # default, Python's for SIGINT) is ignored.
        ending = self.exits_after_close
        defaults = (signal.SIG_DFL, signal.default_int_handler)
        for sig, handler in self._restore.items():
            with contextlib.suppress(ValueError, TypeError, OSError):
                signal.signal(sig, signal.SIG_IGN if ending and handler in defaults else handler)
        self._restore.clear()
        if self._old_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        self._wake_r.close()
        self._wake_w.close()


def _root_name(profile: Profile, cs: CallsiteId) -> str:
    """The function of the outermost frame of callsite `cs`'s stack ('' when not symbolized)."""
    callsites = profile.callsites()
    node, seen = cs, 0
    while True:
        entry = callsites.get(node)
        if entry is None:
            return ""
        parent, frame = entry
        if parent is None or seen > len(callsites):
            info = profile.frames().get(frame)
            return info.name if info is not None else ""
        node, seen = parent, seen + 1


def _depth(callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]], memo: dict[CallsiteId, int],
           cs: CallsiteId) -> int:
    """Frames in the stack of callsite `cs` (memoized; the reader has refused parent cycles)."""
    chain: list[CallsiteId] = []
    node: CallsiteId | None = cs
    base = 0
    while node is not None:
        if node in memo:
            base = memo[node]
            break
        entry = callsites.get(node)
        if entry is None:
            break
        chain.append(node)
        node = entry[0]
    for i, n in enumerate(reversed(chain)):
        memo[n] = base + i + 1
    return memo.get(cs, 0)


def client_library() -> Path:
    return Path(client_library_path())


def _own_usage() -> list[tuple[str, int | None, str, str, int, str]]:
    """heapscope's own CPU time and peak RSS so far (this process: the producer, not the targets)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so it would report
    # the peak of whatever process started heapscope when that was bigger.
    from heapscope.producer.procfs import status_field

    return [
        ("producer_cpu_ns", None, "info", "producer", int((ru.ru_utime + ru.ru_stime) * 1e9),
         "CPU time of the heapscope process (producer, bookkeeping, writing), user + system, up to the final dumps"),
        ("producer_peak_rss_bytes", None, "info", "producer", status_field("self", "VmHWM") * 1024,
         "peak resident set of the heapscope process up to the final dumps"),
    ]


def _describe(e: BaseException, output: Path | None = None) -> str:
    """One line for an internal error; a full disk says so plainly."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    full = (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(e, sqlite3.Error) and "full" in text.lower())
    if full:
        return f"disk full writing {output}" if output else "disk full"
    if isinstance(e, HeapscopeError):
        return text
    return f"internal error ({type(e).__name__}: {text})"
