"""Typed records shared by the bookkeeping, the store and the views.

Ids are plain ints at run time; the NewTypes keep them apart for the type
checker (a FrameId is not a CallsiteId).

May import: heapscope.slots, heapscope.wire.heapnames.
"""

from __future__ import annotations

from heapscope.slots import FrozenSlots, Slots
from heapscope.wire.heapnames import MALLOC_HEAP_NAME
from heapscope.wire.heapnames import PY_HEAP_NAME as PY_HEAP_NAME

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, issue 13)
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


class Mapping(FrozenSlots):
    """An executable mapping of one process (one loaded ELF object)."""

    __slots__ = ("build_id", "exact_offset", "start_offset", "start", "end", "load_bias", "name")
    build_id: str  # hex, "" when unknown
    exact_offset: int  # file offset of the mapping
    start_offset: int  # offset of the ELF inside the file (0 for plain files)
    start: int  # first address
    end: int  # one past the last address
    load_bias: int  # p_vaddr - p_offset of the executable segment
    name: str  # path of the file

    def __init__(self, build_id: str, exact_offset: int, start_offset: int, start: int, end: int, load_bias: int,
                 name: str) -> None:
        set_field = object.__setattr__
        set_field(self, "build_id", build_id)
        set_field(self, "exact_offset", exact_offset)
        set_field(self, "start_offset", start_offset)
        set_field(self, "start", start)
        set_field(self, "end", end)
        set_field(self, "load_bias", load_bias)
        set_field(self, "name", name)

    # == and hash written out (FrozenSlots' generic ones take ~30% longer): frames.Interner keys.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self.build_id, self.exact_offset, self.start_offset, self.start, self.end, self.load_bias,
                self.name) == (other.build_id, other.exact_offset, other.start_offset, other.start, other.end,
                               other.load_bias, other.name)

    def __hash__(self) -> int:
        return hash((self.build_id, self.exact_offset, self.start_offset, self.start, self.end, self.load_bias,
                     self.name))


class Frame(FrozenSlots):
    """A code location: a mapping and an address inside its ELF file."""

    __slots__ = ("mapping", "rel_pc", "name")
    mapping: MappingId
    rel_pc: int
    name: str  # function name; "FILTERED" for skipped mappings

    def __init__(self, mapping: MappingId, rel_pc: int, name: str = "") -> None:
        set_field = object.__setattr__
        set_field(self, "mapping", mapping)
        set_field(self, "rel_pc", rel_pc)
        set_field(self, "name", name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self.mapping, self.rel_pc, self.name) == (other.mapping, other.rel_pc, other.name)

    def __hash__(self) -> int:
        return hash((self.mapping, self.rel_pc, self.name))


class ProcessInfo(Slots):
    """A profiled process as the producer saw it."""

    __slots__ = ("upid", "pid", "ppid", "name", "cmdline", "exe", "uid", "start_ts", "end_ts", "parent_upid")
    upid: Upid
    pid: int
    ppid: int
    name: str
    cmdline: str
    exe: str
    uid: int
    start_ts: int
    end_ts: int | None
    parent_upid: Upid | None

    def __init__(self, upid: Upid, pid: int, ppid: int, name: str, cmdline: str, exe: str, uid: int, start_ts: int,
                 end_ts: int | None = None, parent_upid: Upid | None = None) -> None:
        self.upid = upid
        self.pid = pid
        self.ppid = ppid
        self.name = name
        self.cmdline = cmdline
        self.exe = exe
        self.uid = uid
        self.start_ts = start_ts
        self.end_ts = end_ts
        self.parent_upid = parent_upid


class CallsiteTotals(Slots):
    """Cumulative totals of one callsite since the process was attached."""

    __slots__ = ("alloc_bytes", "free_bytes", "alloc_count", "free_count")
    alloc_bytes: int
    free_bytes: int
    alloc_count: int
    free_count: int

    def __init__(self, alloc_bytes: int = 0, free_bytes: int = 0, alloc_count: int = 0, free_count: int = 0) -> None:
        self.alloc_bytes = alloc_bytes
        self.free_bytes = free_bytes
        self.alloc_count = alloc_count
        self.free_count = free_count


class ProcessFlags(Slots):
    """Per-process outcome, as heapprofd's ProcessHeapSamples has it."""

    __slots__ = (
        "from_startup", "disconnected", "buffer_overran", "buffer_corrupted", "rejected_concurrent", "hit_guardrail",
        "client_error", "unwinder", "sampling_interval_bytes", "orig_sampling_interval_bytes",
    )
    from_startup: bool
    disconnected: bool
    buffer_overran: bool
    buffer_corrupted: bool
    rejected_concurrent: bool
    hit_guardrail: bool
    client_error: str
    unwinder: str
    sampling_interval_bytes: int
    orig_sampling_interval_bytes: int

    def __init__(self, from_startup: bool = True, disconnected: bool = False, buffer_overran: bool = False,
                 buffer_corrupted: bool = False, rejected_concurrent: bool = False, hit_guardrail: bool = False,
                 client_error: str = "", unwinder: str = "", sampling_interval_bytes: int = 0,
                 orig_sampling_interval_bytes: int = 0) -> None:
        self.from_startup = from_startup
        self.disconnected = disconnected
        self.buffer_overran = buffer_overran
        self.buffer_corrupted = buffer_corrupted
        self.rejected_concurrent = rejected_concurrent
        self.hit_guardrail = hit_guardrail
        self.client_error = client_error
        self.unwinder = unwinder
        self.sampling_interval_bytes = sampling_interval_bytes
        self.orig_sampling_interval_bytes = orig_sampling_interval_bytes
