"""The typed rows a profile's queries return (reader.py)."""

from __future__ import annotations

# fallback_frame_name and mapping_basename: exported with the rows, which the views read them with
from heapscope.model import (
    CallsiteId,
    MappingId,
    ProcessFlags,
    ProcessInfo,
    Upid,
    fallback_frame_name,
    mapping_basename,
)
from heapscope.records import Record, TupleRecord

__all__ = [
    "AllocationDelta", "Dump", "DumpValues", "FrameInfo", "Mapping", "PathFrame", "Process", "Stat", "StreamEvent",
    "SymbolLine", "ViewValues", "fallback_frame_name", "mapping_basename",
]


class Process(Record, frozen=True):
    """A process of the profile with the producer's outcome for it."""

    info: ProcessInfo
    flags: ProcessFlags | None  # None when the profile has no heapscope_process row


class Dump(Record, frozen=True):
    """One `heap_profile` row: a snapshot of one process heap."""

    id: int
    ts: int  # window start (ns)
    ts_end: int  # the dump's timestamp = heap_profile_allocation.ts
    upid: Upid
    heap_name: str
    reason: str  # exit, end, periodic, signal, peak


class ViewValues(TupleRecord):
    """The four views of one callsite at one timestamp. A tuple, not a Record: a report reads
    one a callsite of each process's peak, a flamegraph one a callsite of each dump (a build's
    profile: hundreds of thousands), and a tuple is made in a fifth of a Record's time."""

    space: int  # unreleased bytes: SUM(size)
    objects: int  # unreleased allocations: SUM(count)
    alloc_space: int  # allocated bytes: SUM(size) of the positive rows
    alloc_objects: int  # allocations: SUM(count) of the positive rows
    # The real (asked-for) bytes of the samples behind objects / alloc_objects, for
    # heapscope/estimate.py; None in profiles written before the real_size column.
    real_space: int | None = None
    alloc_real_space: int | None = None

    def get(self, view: str) -> int:
        """The value of `view`, one of heapscope.model.VIEWS."""
        return int(getattr(self, view))


_NO_MAPPING = MappingId(0)


class FrameInfo(Record, frozen=True):
    """What a report needs to know about a frame."""

    name: str  # '' when not symbolized
    mapping_name: str  # path of the mapping's file, or a pseudo name like [vdso]
    rel_pc: int
    mapping_id: MappingId = _NO_MAPPING

    @property
    def display_name(self) -> str:
        """The function name, or `<library>+0x<rel_pc>` when there is none."""
        return self.name or fallback_frame_name(self.mapping_name, self.rel_pc)


class Mapping(Record, frozen=True):
    """One `stack_profile_mapping` row, with flags of its frames' symbolization."""

    id: MappingId
    build_id: str  # hex, '' when unknown
    exact_offset: int
    start_offset: int
    start: int
    end: int
    load_bias: int
    name: str
    all_named: bool  # every frame of the mapping has a function name (False without frames)
    any_symbolized: bool  # some frame has symbol rows (file, line, inlines)


class SymbolLine(TupleRecord):
    """One function of a symbolized frame (several when calls were inlined), innermost first."""

    name: str
    source_file: str  # '' when unknown
    line_number: int  # 0 when unknown


class PathFrame(TupleRecord):
    """One frame of a call path read by store/paths.py stack_paths."""

    info: FrameInfo | None  # None: a frame that is not in the profile
    python: bool  # stack_profile_frame.type = 'python': info.mapping_name is its file, info.rel_pc its line


class DumpValues(TupleRecord):
    """The delta rows of one dump timestamp and callsite, summed as ViewValues."""

    ts: int
    callsite: CallsiteId
    values: ViewValues


class AllocationDelta(TupleRecord):
    """One `heap_profile_allocation` row: +allocated or -freed since the previous dump."""

    callsite: CallsiteId
    allocations: int  # the row's count
    size: int


class StreamEvent(TupleRecord):
    """One `heapscope_allocation_stream` row (record --stream-allocations)."""

    kind: str  # malloc, free
    ts: int | None
    address: int
    size: int
    callsite: CallsiteId
    seq: int
    sample_size: int


class Stat(Record, frozen=True):
    """One `stats` row."""

    name: str
    idx: int | None  # upid for per-process stats
    severity: str  # info, data_loss, error
    source: str  # client, producer
    value: int
    description: str
