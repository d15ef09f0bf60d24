"""Typed records shared by the bookkeeping, the store and the views.

Ids are plain ints at run time; the NewTypes keep them apart for the type
checker (a FrameId is not a CallsiteId).

May import: heapscope.records, heapscope.wire.heapnames.
"""

from __future__ import annotations

from heapscope.records import Record
from heapscope.wire.heapnames import BRK_HEAP_NAME as BRK_HEAP_NAME
from heapscope.wire.heapnames import MALLOC_HEAP_NAME
from heapscope.wire.heapnames import MMAP_HEAP_NAME as MMAP_HEAP_NAME
from heapscope.wire.heapnames import PY_HEAP_NAME as PY_HEAP_NAME

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from typing import NewType

    MappingId = NewType("MappingId", int)
    FrameId = NewType("FrameId", int)
    CallsiteId = NewType("CallsiteId", int)
    Upid = NewType("Upid", int)
else:  # what a NewType is at run time: the identity (typing costs `record` ~2 ms to import)
    def MappingId(value):
        return value

    FrameId = CallsiteId = Upid = MappingId

HEAP_NAME = MALLOC_HEAP_NAME  # wire/heapnames.py: one definition with wire.h
VIEWS = ("space", "alloc_space", "objects", "alloc_objects")
# The lifetime buckets of the tracker (bookkeeping/tracker_lifetime.c) and the profile
# (heapscope_callsite_lifetime): bucket i < len ends below LIFETIME_BOUNDS[i] ns, the first
# starts at 0, the last has no end. 1-2-5 steps from 1 us to 1000 s: a threshold a person
# writes (50us, 1ms, 2s) is a bound.
LIFETIME_BOUNDS = tuple(m * 10 ** e for e in range(3, 12) for m in (1, 2, 5)) + (10 ** 12,)

# The pseudo-mapping of one process's code outside every loaded object (JIT code,
# mostly): one per process, so that a perf map (symbolize/perfmap.py) names the
# frames of its own process only. Not a path: the symbolizer reads no file for it.
_UNKNOWN_CODE = "[unknown pid "


def unknown_code_name(pid: int) -> str:
    """The mapping name of process `pid`'s code in no loaded object: `[unknown pid 1234]`."""
    return f"{_UNKNOWN_CODE}{pid}]"


def is_jitdump_path(path: str) -> bool:
    """`.../jit-1234.dump`: a jitdump file (perf's jitdump-specification.txt), which a runtime
    maps executable for profilers to find; the client sends its mapping as a MODULE."""
    base = path.rsplit("/", 1)[-1]
    digits = base[4:-5]
    return base.startswith("jit-") and base.endswith(".dump") and digits.isdigit() and digits.isascii()


def unknown_code_pid(name: str) -> int | None:
    """The pid of an unknown_code_name(), None for any other mapping name."""
    if not (name.startswith(_UNKNOWN_CODE) and name.endswith("]")):
        return None
    digits = name[len(_UNKNOWN_CODE):-1]
    return int(digits) if digits.isdigit() and digits.isascii() else None


class Mapping(Record, frozen=True):
    """An executable mapping of one process (one loaded ELF object)."""

    build_id: str  # hex, "" when unknown
    exact_offset: int  # file offset of the mapping
    start_offset: int  # offset of the ELF inside the file (0 for plain files)
    start: int  # first address
    end: int  # one past the last address
    load_bias: int  # p_vaddr - p_offset of the executable segment
    name: str  # path of the file


class Frame(Record, frozen=True):
    """A code location: a mapping and an address inside its ELF file."""

    mapping: MappingId
    rel_pc: int
    name: str = ""  # function name; "FILTERED" for skipped mappings


class ProcessInfo(Record):
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


class CallsiteTotals(Record):
    """Cumulative totals of one callsite since the process was attached."""

    alloc_bytes: int = 0
    free_bytes: int = 0
    alloc_count: int = 0
    free_count: int = 0


class ProcessFlags(Record):
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


def mapping_basename(mapping_name: str) -> str:
    """`libc.so.6` for `/usr/lib/x86_64-linux-gnu/libc.so.6`; pseudo names like `[vdso]` as they are."""
    if not mapping_name:
        return "[unknown]"
    return mapping_name.rsplit("/", 1)[-1] or mapping_name


def fallback_frame_name(mapping_name: str, rel_pc: int) -> str:
    """The name of a frame without a symbol: `libfoo.so+0x1a2b`.

    One spelling shared by the symbolizer (which stores it) and the views
    (which show it for frames nobody symbolized), so the two never disagree;
    here, not in the store's rows, so that the symbolizer names one without
    importing the profile's reader and its row classes.
    """
    return f"{mapping_basename(mapping_name)}+0x{rel_pc:x}"
