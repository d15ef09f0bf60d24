"""Python mirror of wire.h: struct layouts, record decoding, and a ring writer.

wire.h is the definition and documents the protocol; this module repeats its
layouts as `struct` formats. tests/unit/wire compares every size and offset
here with the C compiler's, so the two cannot drift apart silently.

The producer's hot loop (MALLOC and FREE records) runs in C
(producer/_ingest.c); Python decodes only the rare records (stacks, modules,
heaps) that the C loop hands back, plus the handshake.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from heapscope.records import Record
from heapscope.wire import handshake
from heapscope.wire.heapnames import BRK_HEAP_ID as BRK_HEAP_ID
from heapscope.wire.heapnames import MALLOC_HEAP_ID as MALLOC_HEAP_ID
from heapscope.wire.heapnames import MALLOC_HEAP_NAME as MALLOC_HEAP_NAME
from heapscope.wire.heapnames import MAP_HEAPS as MAP_HEAPS
from heapscope.wire.heapnames import MMAP_HEAP_ID as MMAP_HEAP_ID
from heapscope.wire.heapnames import PY_HEAP_NAME as PY_HEAP_NAME

# The handshake's part of the format is defined in wire/handshake.py (light imports: start-up cost).
WIRE_MAGIC = handshake.WIRE_MAGIC
WIRE_VERSION = handshake.WIRE_VERSION
TOKEN_SIZE = handshake.TOKEN_SIZE
META_SIZE = handshake.META_SIZE
RING_MIN_SIZE = handshake.RING_MIN_SIZE
RING_MAX_SIZE = handshake.RING_MAX_SIZE
MAX_FRAMES = handshake.MAX_FRAMES
ENV_SOCKET = handshake.ENV_SOCKET
ENV_TOKEN = handshake.ENV_TOKEN
STATUS_OK = handshake.STATUS_OK
STATUS_REJECTED = handshake.STATUS_REJECTED
STATUS_NOT_TARGETED = handshake.STATUS_NOT_TARGETED
UNWINDER_AUTO = handshake.UNWINDER_AUTO
UNWINDER_LIBUNWIND = handshake.UNWINDER_LIBUNWIND
UNWINDER_FP = handshake.UNWINDER_FP
UNWINDER_NONE = handshake.UNWINDER_NONE
UNWINDER_CFA = handshake.UNWINDER_CFA
CFG_BLOCK_CLIENT = handshake.CFG_BLOCK_CLIENT
CFG_MMAP_FILES = handshake.CFG_MMAP_FILES
CFG_TSC = handshake.CFG_TSC
HELLO = handshake.HELLO
CONFIG = handshake.CONFIG
META_FIELDS = handshake.META_FIELDS
config_reply = handshake.config_reply
BUILD_ID_MAX = 40
HEAP_NAME_SIZE = 32


class RecordType(IntEnum):
    PAD = 0
    MALLOC = 1
    FREE = 2
    STACK = 3
    MODULE = 4
    HEAP = 5
    HEAP_MALLOC = 6  # custom heaps (wire.h, "Custom heaps")
    HEAP_FREE = 7
    PYCODE = 8  # Python frames: a code object, once per key
    PYINFO = 9  # what the client's CPython detection found
    LABELSET = 10  # an allocation label set, once per id (wire.h, "Allocation labels")


class Status(IntEnum):
    OK = STATUS_OK
    REJECTED = STATUS_REJECTED
    NOT_TARGETED = STATUS_NOT_TARGETED  # a valid session that does not profile this process: stay dormant


class Unwinder(IntEnum):
    AUTO = UNWINDER_AUTO
    LIBUNWIND = UNWINDER_LIBUNWIND
    FP = UNWINDER_FP
    NONE = UNWINDER_NONE
    CFA = UNWINDER_CFA  # reported only: our CFA walk, frame pointers where it gives up


class ClientState(IntEnum):
    CONNECTING = 0
    ACTIVE = 1
    DISABLED = 2
    EXITING = 3


class ClientError(IntEnum):
    NONE = 0
    PRODUCER_GONE = 1
    SHUTTING_DOWN = 2
    RECORD_TOO_BIG = 3
    FORKED = 4
    OUT_OF_MEMORY = 5
    SOCKET_LOST = 6
    WAIT_TIMEOUT = 7


STACK_TRUNCATED = 1
STACK_PYTHON = 2
MAX_PYFRAMES = 128
PY_FRAME_ENTRY = 1  # client/pyframes.h: outermost frame of its eval activation
PY_WALK_NOSTATE, PY_WALK_TRUNCATED, PY_WALK_INVALID = 1, 2, 4
PY_STATE_ABSENT, PY_STATE_SUPPORTED, PY_STATE_UNSUPPORTED = 0, 1, 2

HEADER = struct.Struct("<Q")
MALLOC = struct.Struct("<QQQQQQII")
# struct hs_malloc's fields in order (tests/unit/wire checks each offset against the compiler's).
MALLOC_FIELDS = ("seq", "addr", "sample_size", "alloc_size", "stack_id", "ts", "tid", "label_set")
FREE = struct.Struct("<QQQ")  # seq, addr, ts
STACK = struct.Struct("<QII")
MODULE = struct.Struct(f"<QQQQQII{BUILD_ID_MAX}s")
HEAP = struct.Struct(f"<QII{HEAP_NAME_SIZE}s")
# Custom heaps (wire.h, "Custom heaps"): MALLOC / FREE with a heap id.
FIRST_CUSTOM_HEAP = 2
MAX_CUSTOM_HEAPS = 64
PY_HEAP_ID = 112  # wire.h HS_PY_HEAP_ID: Python's MEM and OBJ domains (client/pymem.c)
HEAP_MALLOC = struct.Struct("<QIIQQQQQ")
HEAP_FREE = struct.Struct("<QIIQQ")  # seq, heap_id, reserved, addr, ts
PYSTACK = struct.Struct("<II")
PYFRAME = struct.Struct("<QiI")
PYCODE = struct.Struct("<QiHHIIII")
PYINFO = struct.Struct("<QQQIIII")
# Allocation labels (wire.h, "Allocation labels").
LABELSET = struct.Struct("<IIII")
MAX_LABEL_SETS = 1024
LABEL_SET_OVERFLOW = 0xFFFFFFFF
LABEL_KEY_MAX = 63
LABEL_VALUE_MAX = 127
LABEL_TEXT_MAX = 512

META_STRUCT_SIZE = 352
CLIENT_COUNTERS = tuple(list(META_FIELDS)[9:])


def header(size: int, rtype: int) -> int:
    return (size & 0xFFFFFFFF) | (rtype << 32)


def align8(n: int) -> int:
    return (n + 7) & ~7


class Hello(Record, frozen=True):
    """The client's first message."""

    magic: int
    version: int
    pid: int
    ppid: int
    token: bytes
    start_ts: int = 0  # the client's clock as it connected, ns (0: not known)

    def pack(self) -> bytes:
        return HELLO.pack(self.magic, self.version, self.pid, self.ppid, 0, self.token, self.start_ts)

    @classmethod
    def unpack(cls, data: bytes) -> Hello:
        """Raises MalformedRecord unless `data` is exactly one hs_hello."""
        if len(data) != HELLO.size:
            raise MalformedRecord(f"hello of {len(data)} bytes (expected {HELLO.size})")
        magic, version, pid, ppid, _, token, start_ts = HELLO.unpack(data)
        return cls(magic, version, pid, ppid, token, start_ts)


class Config(Record, frozen=True):
    """The producer's answer to a Hello."""

    status: int
    interval: int
    ring_size: int
    seed: int
    flags: int
    unwinder: int
    max_frames: int

    def pack(self) -> bytes:
        return config_reply(self.status, self.interval, self.ring_size, self.seed, self.flags, self.unwinder,
                            self.max_frames)

    @classmethod
    def unpack(cls, data: bytes) -> Config:
        """The client's side, for tests. Raises MalformedRecord unless `data` is one
        hs_config of this wire version."""
        if len(data) != CONFIG.size:
            raise MalformedRecord(f"config of {len(data)} bytes (expected {CONFIG.size})")
        magic, version, status, interval, ring_size, seed, flags, unwinder, max_frames, _ = CONFIG.unpack(data)
        if magic != WIRE_MAGIC or version != WIRE_VERSION:
            raise MalformedRecord(f"config of wire version {version} (expected {WIRE_VERSION})")
        return cls(status, interval, ring_size, seed, flags, unwinder, max_frames)


class StackRecord(Record, frozen=True):
    """A stack definition: return addresses, leaf first; Python frames innermost first."""

    stack_id: int
    pcs: tuple[int, ...]
    truncated: bool
    py: tuple[tuple[int, int, int], ...] = ()  # (code key, lasti, flags)
    py_flags: int = 0  # PY_WALK_* bits
    python: bool = False  # the stack has a Python part (py may still be empty)


class PyCodeRecord(Record, frozen=True):
    """A Python code object: qualified name, file, first line and raw line table."""

    code_key: int
    first_line: int
    line_format: int
    flags: int  # truncated: name 1, file 2, table 4
    name: str
    file: str
    table: bytes


class PyInfoRecord(Record, frozen=True):
    """The client's CPython detection: state, version, eval function range, status line."""

    eval_lo: int
    eval_hi: int
    hexversion: int
    state: int
    status: str
    pymem: bool = False  # Python's MEM and OBJ allocator domains are sampled too


class ModuleRecord(Record, frozen=True):
    """One loaded ELF object of the target; rel_pc = pc - base."""

    base: int
    start: int
    end: int
    file_offset: int
    vaddr: int
    build_id: bytes
    path: str


class HeapRecord(Record, frozen=True):
    """A heap the client samples, with its interval."""

    heap_id: int
    interval: int
    name: str


class HeapMallocRecord(Record, frozen=True):
    """A sampled allocation on a custom heap; seq is that heap's own."""

    heap_id: int
    seq: int
    addr: int
    sample_size: int
    alloc_size: int
    stack_id: int
    ts: int
    label_set: int = 0  # its thread's label set (0: none)


class HeapFreeRecord(Record, frozen=True):
    """A free of a sampled address on a custom heap."""

    heap_id: int
    seq: int
    addr: int
    ts: int = 0  # the records' clock as the free was sent: the allocation's lifetime ends


class LabelSetRecord(Record, frozen=True):
    """An allocation label set and its id in this process: (key, value) pairs sorted by key."""

    label_set: int
    pairs: tuple[tuple[str, str], ...]


class MalformedRecord(ValueError):
    """A record or handshake message whose bytes do not fit its type."""


RareRecord = (StackRecord | ModuleRecord | HeapRecord | HeapMallocRecord | HeapFreeRecord | PyCodeRecord | PyInfoRecord
              | LabelSetRecord)


def decode_record(rec: bytes) -> RareRecord:
    """Decode one whole non-hot record (header included), as _ingest hands it over."""
    if len(rec) < HEADER.size:
        raise MalformedRecord("record shorter than its header")
    (hdr,) = HEADER.unpack_from(rec)
    rtype = hdr >> 32
    body = memoryview(rec)[HEADER.size:]
    if rtype == RecordType.STACK:
        if len(body) < STACK.size:
            raise MalformedRecord("truncated stack record")
        stack_id, depth, flags = STACK.unpack_from(body)
        if depth > MAX_FRAMES or len(body) < STACK.size + 8 * depth:
            raise MalformedRecord(f"stack record with bad depth {depth}")
        pcs = struct.unpack_from(f"<{depth}Q", body, STACK.size)
        if not flags & STACK_PYTHON:
            return StackRecord(stack_id, pcs, bool(flags & STACK_TRUNCATED))
        at = STACK.size + 8 * depth
        if len(body) < at + PYSTACK.size:
            raise MalformedRecord("truncated python stack")
        py_depth, py_flags = PYSTACK.unpack_from(body, at)
        at += PYSTACK.size
        if py_depth > MAX_PYFRAMES or len(body) < at + PYFRAME.size * py_depth:
            raise MalformedRecord(f"stack record with bad python depth {py_depth}")
        py = tuple(PYFRAME.iter_unpack(body[at:at + PYFRAME.size * py_depth]))
        return StackRecord(stack_id, pcs, bool(flags & STACK_TRUNCATED), py, py_flags, True)
    if rtype == RecordType.PYCODE:
        if len(body) < PYCODE.size:
            raise MalformedRecord("truncated code record")
        key, first, fmt, cflags, nlen, flen, tlen, _ = PYCODE.unpack_from(body)
        if len(body) < PYCODE.size + nlen + flen + tlen:
            raise MalformedRecord("code record with bad lengths")
        at = PYCODE.size
        name = bytes(body[at:at + nlen]).decode("utf-8", "replace")
        file = bytes(body[at + nlen:at + nlen + flen]).decode("utf-8", "surrogateescape")
        table = bytes(body[at + nlen + flen:at + nlen + flen + tlen])
        return PyCodeRecord(key, first, fmt, cflags, name, file, table)
    if rtype == RecordType.PYINFO:
        if len(body) < PYINFO.size:
            raise MalformedRecord("truncated python info record")
        lo, hi, hexversion, state, slen, pymem, _ = PYINFO.unpack_from(body)
        if len(body) < PYINFO.size + slen:
            raise MalformedRecord("python info record with bad length")
        status = bytes(body[PYINFO.size:PYINFO.size + slen]).decode("utf-8", "replace")
        return PyInfoRecord(lo, hi, hexversion, state, status, bool(pymem))
    if rtype == RecordType.MODULE:
        if len(body) < MODULE.size:
            raise MalformedRecord("truncated module record")
        base, start, end, off, vaddr, bid_len, path_len, bid = MODULE.unpack_from(body)
        if bid_len > BUILD_ID_MAX or len(body) < MODULE.size + path_len:
            raise MalformedRecord("module record with bad lengths")
        path = bytes(body[MODULE.size:MODULE.size + path_len]).decode("utf-8", "replace")
        return ModuleRecord(base, start, end, off, vaddr, bid[:bid_len], path)
    if rtype == RecordType.HEAP:
        if len(body) < HEAP.size:
            raise MalformedRecord("truncated heap record")
        interval, heap_id, _, name = HEAP.unpack_from(body)
        return HeapRecord(heap_id, interval, name.split(b"\0", 1)[0].decode("utf-8", "replace"))
    if rtype == RecordType.HEAP_MALLOC:
        if len(body) < HEAP_MALLOC.size:
            raise MalformedRecord("truncated heap malloc record")
        seq, heap_id, label_set, addr, sample_size, alloc_size, stack_id, ts = HEAP_MALLOC.unpack_from(body)
        return HeapMallocRecord(heap_id, seq, addr, sample_size, alloc_size, stack_id, ts, label_set)
    if rtype == RecordType.HEAP_FREE:
        if len(body) < HEAP_FREE.size:
            raise MalformedRecord("truncated heap free record")
        seq, heap_id, _, addr, ts = HEAP_FREE.unpack_from(body)
        return HeapFreeRecord(heap_id, seq, addr, ts)
    if rtype == RecordType.LABELSET:
        return _decode_labelset(body)
    raise MalformedRecord(f"unexpected record type {rtype}")


def _decode_labelset(body: memoryview) -> LabelSetRecord:
    if len(body) < LABELSET.size:
        raise MalformedRecord("truncated label set record")
    label_set, count, text_len, _ = LABELSET.unpack_from(body)
    if not 1 <= label_set <= MAX_LABEL_SETS or text_len > LABEL_TEXT_MAX or len(body) < LABELSET.size + text_len:
        raise MalformedRecord("label set record with bad id or length")
    parts = bytes(body[LABELSET.size:LABELSET.size + text_len]).split(b"\0")
    if len(parts) != 2 * count + 1 or parts[-1]:
        raise MalformedRecord("label set record whose pairs do not match its count")
    words = [p.decode("utf-8", "replace") for p in parts[:-1]]
    return LabelSetRecord(label_set, tuple(zip(words[0::2], words[1::2], strict=True)))


read_meta = handshake.read_meta
write_meta = handshake.write_meta
