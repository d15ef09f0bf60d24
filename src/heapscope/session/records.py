"""What a recording is asked to do (RecordingOptions) and the figures it ends with (Summary)."""

from __future__ import annotations

from pathlib import Path

from heapscope.producer.config import MAX_DURATION_S, check_ms, check_positive
from heapscope.slots import FrozenSlots, Slots

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from heapscope.symbolize.missing import Unsymbolized


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

