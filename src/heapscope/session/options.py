"""What a recording is asked to do (the CLI flags, or an in-process host's arguments)."""

from __future__ import annotations

from heapscope.producer.config import MAX_DURATION_S, check_ms, check_positive
from heapscope.slots import FrozenSlots

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:

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
