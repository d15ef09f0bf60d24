"""What a recording is: its options (RecordingOptions), the state every part of it shares, its
constants, how it fails, and the figures it ends with (Summary, ProcessPeak)."""

from __future__ import annotations

import _socket  # socket.py's enums and wrappers: ~3 ms of every recording's imports
import contextlib
import errno
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable

from heapscope.errors import HeapscopeError
from heapscope.launch import Child, Launch, client_library_path
from heapscope.producer.config import MAX_DURATION_S, check_ms, check_positive
from heapscope.producer.producer import OWNED_PREFIX, Producer, ProducerStats, take_ownership
from heapscope.producer.session import Guardrails
from heapscope.producer.tmpdir import make_private_dir
from heapscope.records import Record, field
from heapscope.store.writer import ProfileWriter

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from heapscope.producer import attach
    from heapscope.producer.config import RecordConfig
    from heapscope.symbolize.missing import Unsymbolized

STATUS_EVERY_S = 0.5
FRESH_DUMP_TIMEOUT_S = 20.0  # a scrape waits this long for its dump, then gets an error
TOP_STACKS = 3  # the largest stacks at each process's peak, in the summary
# Processes whose peak and stacks the summary shows, largest first (one more when that is all of
# them): only these get their stacks read at the end (ProcessPeak.top).
PEAKS_SHOWN = 5
STACK_FRAMES_SHOWN = 4  # innermost frames of each
UNSYMBOLIZED_SHOWN = 5  # modules named (with their fix) in the summary
IDLE_POLL_S = 0.005
# After a round that drained something, the next waits this long unless the
# round drained an eighth of a ring or more. Polling again at once drains a
# few dozen records per wake-up on a busy target and keeps the producer's core
# busy for them; a short nap lets a batch build up. An 8 MiB ring at ~1 M
# samples/s fills in ~70 ms, far longer than this nap.
BUSY_POLL_S = 0.001
# After this long of idle naps (rounds that drained little, no start-up chore left), the nap
# grows up to QUIET_POLL_S: as long as a quarter of a ring's batch takes to fill at the last
# round's rate, and no later than the next timer. An idle always-on recording then wakes 20
# times a second, not 200 (a fifth of the CPU); a busy round brings back the short naps, and
# what cannot wait wakes the loop at once: a full ring, the target's exit, a signal, a dump
# asked for.
QUIET_AFTER_S = 0.25
QUIET_POLL_S = 0.05
GUARDRAIL_EVERY_S = 1.0
# Work the target's start does not wait for: the loop does it while the target runs,
# a piece per round, once a process has connected (its handshake comes first) or after this long.
CHORES_AFTER_S = 0.05
# Modules the end of a recording imports (symbolization, the summary's peaks): imported by the
# loop while the target runs, so that its exit is not followed by their import.
END_MODULES = ("heapscope.store.reader", "heapscope.store.select", "heapscope.view.units", "heapscope.view.peaks",
               "heapscope.store.labels")
SYMBOLIZE_MODULES = ("heapscope.symbolize.profile", "heapscope.symbolize.missing")
# Signals passed on to a started target: heapscope/launch.py's FORWARDED and TERMINAL.
# Attached (-p): these end the session (detach); the targets are not ours to signal.
DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)



class RecordingOptions(Record, frozen=True):
    duration: float | None = None  # seconds; None = until the target ends (or stop())
    continuous_ms: int = 0  # a dump every so many ms; 0 = only at the end
    phase_ms: int = 0  # before the first continuous dump
    max_memory_mb: float | None = None  # guardrails on heapscope itself
    max_cpu_s: float | None = None
    symbolize: bool = True
    command: str = ""  # for the profile's metadata
    # Pass SIGTERM, SIGHUP, ... on to a started target (the CLI); an in-process
    # host (a test runner with its own SIGALRM timeout, say) keeps its handlers.
    forward_signals: bool = True
    # With forward_signals the target has a process group of its own; `job_control`: `record`
    # relays its stops and gives it the terminal as it needs it (heapscope/jobs.py); a host
    # that keeps the terminal itself (live's view) does not.
    job_control: bool = False
    force: bool = False  # replace an existing heapscope profile at the output path
    # False: no profile at all (the pytest plugin without --heapscope-output reads only the
    # trackers' figures, window_snapshot): no file, no dump, no stack resolved (Producer's keep).
    keep: bool = True
    # False: the summary's peaks are not read back from the profile (`record -q` prints no
    # summary; the read and its imports were ~5 ms of every recording with samples).
    peaks: bool = True

    def __post_init__(self) -> None:
        check_positive(self.duration, "--duration (seconds)", MAX_DURATION_S)
        check_ms(self.continuous_ms, "--continuous-dump")
        check_ms(self.phase_ms, "--dump-phase")


class ProcessPeak(Record, frozen=True):
    """A process's peak of sampled unreleased bytes and its largest stacks there."""

    pid: int
    name: str
    peak_bytes: int
    # (call path, innermost frames last; bytes), largest first; [] past the PEAKS_SHOWN + 1 largest
    top: list[tuple[str, int]]
    heap: str = ""  # the heap of peak_bytes and top (store.select.default_heap) when the profile has several
    other_heaps: list[tuple[str, int]] = field(default_factory=list)  # (name, bytes at its own peak), custom heaps
    seen: int = 0  # its part of Summary.peak_heap, .peak_rss and .own_rss
    rss: int = 0
    own_rss: int = 0


class Summary(Record):
    """The figures of a finished recording."""

    output: str  # the profile's path, as given
    processes: int = 0
    samples: int = 0
    sampled_bytes: int = 0
    interval: int = 0
    elapsed_s: float = 0.0
    blocked_ms: float = 0.0
    dropped_records: int = 0
    unwinders: list[str] = field(default_factory=list)
    client_errors: list[str] = field(default_factory=list)
    exit_status: int | None = None  # the target's, shell style (128+N for signal N)
    output_bytes: int = 0
    no_descriptors: int = 0  # processes not profiled: heapscope was out of file descriptors
    problems: list[str] = field(default_factory=list)  # what went wrong inside heapscope, one line each
    python: list[str] = field(default_factory=list)  # the Python frames status lines, one per distinct one
    peak_heap: int = 0  # each one's peak of sampled unreleased bytes, summed over those alive at the busiest moment
    peak_rss: int = 0  # each one's peak RSS (VmHWM), summed likewise (view.summary.busiest_moment)
    own_rss: int = 0  # heapscope's own resident bytes at their exits, summed likewise (0: none known)
    peaks: list[ProcessPeak] = field(default_factory=list)  # largest peak first
    attached_heaps_note: str = ""  # -p: custom heaps registered before the attach are not seen
    not_profiled: list[str] = field(default_factory=list)  # targets the client never ran in, and why
    unseen: list[str] = field(default_factory=list)  # memory no heap holds (mapped by direct system calls), and why
    shallow_stacks: list[str] = field(default_factory=list)  # --unwinder fp without frame pointers
    unsymbolized: list[Unsymbolized] = field(default_factory=list)  # modules left `lib+0x...`, with the fix
    unsymbolized_frames: int = 0  # frames without a function name, all modules
    symbol_notes: list[str] = field(default_factory=list)  # e.g. a debuginfod server that failed
    label_overflow: int = 0  # samples past the cap of allocation label sets (producer/labels.py)
    labels_unnamed: int = 0  # label sets whose record never came (producer/labels.py)


def _quiet(_msg: str) -> None:
    pass


class _Waiter:
    __slots__ = ("event", "dumped")
    event: threading.Event
    dumped: bool

    def __init__(self, event: threading.Event | None = None, dumped: bool = False) -> None:
        self.event = threading.Event() if event is None else event
        self.dumped = dumped


def client_library() -> Path:
    from pathlib import Path  # here: a recording keeps its paths as str (pathlib: ~3 ms of imports)

    return Path(client_library_path())


def owned_dir(name: str) -> tuple[str, int]:
    """A private directory like a recording's own (mode 0700 in the temporary directory, its name
    `heapscope-NAME` and a random part) and the descriptor of its owner lock: a later recording's
    start removes it once its owner is gone (killed before its cleanup: producer/session.py,
    remove_stale_dirs), never while the descriptor is open."""
    path = make_private_dir(OWNED_PREFIX + name)
    try:
        return path, take_ownership(path)
    except BaseException:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        raise


def _describe(e: BaseException, output: str | None = None) -> str:
    """One line for an internal error; a full disk says so plainly."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    full = (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(e, sqlite3.Error) and "full" in text.lower())
    if full:
        return f"disk full writing {output}" if output else "disk full"
    if isinstance(e, HeapscopeError):
        return text
    return f"internal error ({type(e).__name__}: {text})"


class SessionCore:
    """The state of one recording and the few things every part of it does (wake the loop, fail)."""

    def __init__(self, config: RecordConfig, output: str | os.PathLike[str], options: RecordingOptions | None = None,
                 *, library: str | os.PathLike[str] | None = None, say: Callable[[str], None] = _quiet,
                 warn: Callable[[str], None] = _quiet, log: Callable[[str], None] = _quiet,
                 launch: Launch | None = None) -> None:
        """`launch`: the target started before the recording existed (`record`, heapscope/launch.py):
        start() takes it over, with its listener, its answered clients and its signal handlers."""
        self.config = config
        self.output = os.fspath(output)  # str, as self.library: pathlib is ~3 ms of imports, `record` does without
        self.options = options or RecordingOptions()
        self.guard = Guardrails(self.options.max_memory_mb, self.options.max_cpu_s)
        self.library = os.fspath(library) if library else client_library_path()
        self.say = say  # progress, quiet with -q
        self.warn = warn  # always shown
        self.log = log  # -v
        self.status: Callable[[float], None] | None = None
        # The figures so far (samples over every heap, live bytes), published by the loop every
        # STATUS_EVERY_S and at the end: what a status line, a live view or the API reads.
        self.progress = ProducerStats()
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
        self._discard = False  # nothing was profiled (every attach refused): no profile is left
        self._ended = False  # the loop is over: requests are ignored
        self._launch = launch
        # The handlers before heapscope's own (a launch's were installed first).
        self._restore: dict[int, Any] = dict(launch.restore) if launch is not None else {}
        # The command exits right after close() (record, live): what had no handler of its own
        # is left ignored then, not restored (_uninstall_signals). Never in a host that goes on:
        # its later children would inherit the ignored signals (a Pool's workers outlive terminate()).
        self.exits_after_close = False
        self._old_wakeup: int | None = None
        self._wake_r, self._wake_w = _socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._locks: list[attach.PidLock] = []
        self._symbolizer: Any = None
        self._symbol_report: Any = None  # the SymbolizeReport of the end of the recording
        self._unsymbolized: list[Any] = []  # its modules with nameless frames (symbolize.missing.Unsymbolized)
        self._target: tuple[str, str | None] | None = None  # started: (its path, why it cannot be preloaded)
        self._nofile: tuple[int, int] | None = None  # the limit before we raised it
        self.on_dump: list[Callable[[str], None]] = []  # after each committed continuous dump
        # A host's end, called by close() after the final dumps are written and symbolized, with
        # whether the profile is complete (--serve stops, --push sends them: hosts/fleet.py).
        # Each returns its summary lines, kept in `host_lines`; it must not raise.
        self.on_close: list[Callable[[bool], list[str]]] = []
        self.host_lines: list[str] = []
        self._every: list[list[Any]] = []  # [period s, fn(producer), next time]
        self._waiters: list[_Waiter] = []  # fresh_dump() callers waiting for the next dump
        self._waiters_lock = threading.Lock()
        # (fn, required): done by the loop while the target runs (_chore); what is left when the
        # session ends is done then if required (close), else dropped (a module warmed up early).
        self._chores: list[tuple[Callable[[], None], bool]] = []
        self._metadata: tuple[tuple[str, object], ...] = ()  # written by _write_metadata

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

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
