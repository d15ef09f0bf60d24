"""Typed records shared by the bookkeeping, the store and the views.

Ids are plain ints at run time; the NewTypes keep them apart for the type
checker (a FrameId is not a CallsiteId).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

MappingId = NewType("MappingId", int)
FrameId = NewType("FrameId", int)
CallsiteId = NewType("CallsiteId", int)
Upid = NewType("Upid", int)

HEAP_NAME = "libc.malloc"
PY_HEAP_NAME = "python.pymalloc"  # Python's MEM and OBJ allocator domains (client/pymem.c, wire.h)
VIEWS = ("space", "alloc_space", "objects", "alloc_objects")


@dataclass(frozen=True, slots=True)
class Mapping:
    """An executable mapping of one process (one loaded ELF object)."""

    build_id: str  # hex, "" when unknown
    exact_offset: int  # file offset of the mapping
    start_offset: int  # offset of the ELF inside the file (0 for plain files)
    start: int  # first address
    end: int  # one past the last address
    load_bias: int  # p_vaddr - p_offset of the executable segment
    name: str  # path of the file


@dataclass(frozen=True, slots=True)
class Frame:
    """A code location: a mapping and an address inside its ELF file."""

    mapping: MappingId
    rel_pc: int
    name: str = ""  # function name; "FILTERED" for skipped mappings


@dataclass(slots=True)
class ProcessInfo:
    """A profiled process as the producer saw it."""

    upid: Upid
    pid: int
    ppid: int
    name: str
    cmdline: str
    exe: str
    uid: int
    start_ts: int
    end_ts: int | None = None
    parent_upid: Upid | None = None


@dataclass(slots=True)
class CallsiteTotals:
    """Cumulative totals of one callsite since the process was attached."""

    alloc_bytes: int = 0
    free_bytes: int = 0
    alloc_count: int = 0
    free_count: int = 0


@dataclass(slots=True)
class ProcessFlags:
    """Per-process outcome, as heapprofd's ProcessHeapSamples has it."""

    from_startup: bool = True
    disconnected: bool = False
    buffer_overran: bool = False
    buffer_corrupted: bool = False
    rejected_concurrent: bool = False
    hit_guardrail: bool = False
    client_error: str = ""
    unwinder: str = ""
    sampling_interval_bytes: int = 0
    orig_sampling_interval_bytes: int = 0
