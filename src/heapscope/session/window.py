"""A process's figures since its window began, and names for its stacks (the pytest plugin)."""

from __future__ import annotations

from heapscope.session.requests import Requests
from heapscope.slots import FrozenSlots

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from heapscope.model import Frame, Mapping
    from heapscope.producer.process import ProcessState
    from heapscope.producer.producer import Producer


class WindowSnapshot(FrozenSlots):
    """One process's figures since its window began (Recording.window_snapshot; the
    producer's window(): malloc's heap and python.pymalloc, summed at their joint peak).
    Its methods read the producer: only on the loop's thread (a watch() function)."""

    __slots__ = ("peak", "leak", "pid", "_producer", "_process")
    peak: int  # highest sampled unreleased bytes in the window, above its start
    leak: int  # sampled unreleased bytes at the snapshot, above the window's start
    pid: int
    _producer: Producer
    _process: ProcessState

    def __init__(self, peak: int, leak: int, producer: Producer, process: ProcessState) -> None:
        set_field = object.__setattr__
        set_field(self, "peak", peak)
        set_field(self, "leak", leak)
        set_field(self, "pid", process.info.pid)
        set_field(self, "_producer", producer)
        set_field(self, "_process", process)

    def window_rows(self) -> list[tuple[int, ...]]:
        """The window's rows by callsite or stack (bookkeeping/rows.py, WINDOW_ROW), as of now."""
        return self._producer.window_rows(self._process)

    def stack_frame_ids(self, stack_id: int) -> list[int] | None:
        """The frame ids of a row's stack not resolved to a callsite, innermost first; None
        when the stack has not been received yet."""
        return self._producer.stack_frame_ids(self._process, stack_id)


class Windows(Requests):
    """Per-process windows and the frame tables, for a host on the loop's thread (the pytest plugin)."""

    def caught_up(self, pid: int, resolve: bool = True) -> bool:
        """Every record `pid`'s ring holds handled (and its stacks resolved to callsites);
        False if it is not profiled (or profiling failed). Only from the loop's thread."""
        producer = self.producer
        if producer is None or self._failed:
            return False
        p = producer.process_of(pid)
        if p is None:
            return False
        producer.catch_up(p, resolve)
        return True

    def window_snapshot(self, pid: int, *, restart: bool = False, keep_peak: bool = False) -> WindowSnapshot | None:
        """From the loop's thread: pid's figures since its window began, every record of its
        ring handled (stacks not resolved: cheap). `restart`: a new window begins after the
        snapshot; with `keep_peak`, a closing window that holds the process's peak is resolved
        first, so that the profile keeps its rows.
        None when pid is not profiled."""
        producer = self.producer
        if producer is None or self._failed:
            return None
        p = producer.process_of(pid)
        if p is None:
            return None
        producer.catch_up(p, resolve=False)
        peak, leak = producer.window(p, restart, keep_peak)
        return WindowSnapshot(peak, leak, producer, p)

    def callsite_paths(self, first: int) -> list[tuple[int, int]]:
        """(parent callsite or 0, frame id) of every callsite from id `first` on, in id order."""
        return self.producer.callsite_paths(first) if self.producer is not None else []

    def frames_since(self, n: int) -> list[Frame]:
        """The frames interned after the first `n` (ids dense from 1)."""
        return self.producer.frames_since(n) if self.producer is not None else []

    def mappings_since(self, n: int) -> list[Mapping]:
        """The mappings interned after the first `n` (ids dense from 1)."""
        return self.producer.mappings_since(n) if self.producer is not None else []
