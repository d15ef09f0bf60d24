"""Imports the heap profiles of a Perfetto trace (heapprofd's output) into a heapscope profile.

Decoding is done by `protobuf` with Perfetto's own `Trace` message, as generated from
protos/perfetto/trace/perfetto_trace.proto and shipped by the `perfetto` PyPI package
(perfetto.protos.perfetto.trace.perfetto_trace_pb2). What this module adds is the meaning,
as trace_processor gives it (spec heapprofd.md §7 and §8.1):

  * Interned data is per writer sequence (trusted_packet_sequence_id) and is dropped when a
    packet clears the sequence's incremental state. Old (Android Q) traces carry the tables
    in the ProfilePacket itself; those are looked up first and dropped after each packet
    that is not `continued`.
  * A dump may span several ProfilePackets: samples wait until the packet that ends the
    dump (continued = false), so a callstack may be interned after the samples using it.
  * HeapSample values are cumulative since the process was attached. Per (sequence,
    process, heap, callsite) the previous values are remembered and only the growth is
    stored: a row (+alloc_count, +self_allocated) and a row (-free_count, -self_freed),
    each when non-zero, at the dump's timestamp. A value that goes down is dropped and
    counted (heapprofd_malformed_packet). When heapprofd dropped a callstack and later
    interned the same frames under a new id, the values of the new id start from those
    of the old one (trace_processor's "correction"), so the totals stay monotonic.
  * dump_at_max samples carry self_max/self_max_count: the peak is stored as allocated
    bytes; the count only when orig_sampling_interval_bytes is set (older producers left
    it wrong). Frees are never stored for the heap `com.android.art`.
  * Callstacks are root first; equal frame chains share callsites, frames are merged by
    (mapping, rel_pc, name), mappings by all their fields. Build ids are stored as hex of
    their raw bytes, mapping paths joined from their components.
  * ModuleSymbols packets (offline symbolization) become stack_profile_symbol rows.

Timestamps are stored as the trace has them (CLOCK_MONOTONIC_COARSE ns for dumps), with no
clock conversion: heapscope profiles use CLOCK_MONOTONIC. trace_processor converts them to
its trace clock and drops dumps it cannot convert; the values per callsite are the same.
Other packets are ignored; a trace without any ProcessHeapSamples is an error.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from heapscope.errors import OutputError, ProfileError
from heapscope.model import Frame, Mapping, ProcessFlags, ProcessInfo, Upid
from heapscope.records import Record, field
from heapscope.store.names import SIDECARS
from heapscope.store.writer import ProfileWriter
from heapscope.units import format_in

_GZIP_MAGIC = b"\x1f\x8b"
# Inflated bytes (a gzip file, compressed packets) may not pass this many times the file's own
# size, nor the floor for small files: a real trace compresses some 5-20 times, a decompression
# bomb a thousand times, and what is inflated is work and (for one packet) memory.
INFLATE_RATIO = 100
INFLATE_FLOOR = 64 << 20
_CHUNK = 1 << 20  # bytes read, or inflated, at a time
_ART_HEAP = "com.android.art"
_UNKNOWN_HEAP = "unknown"  # trace_processor's name for a dump without heap_name
_SEQ_INCREMENTAL_STATE_CLEARED = 1

StatRow = tuple[str, int | None, str, str, int, str]


def _trace_module() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2  # type: ignore[import-untyped]
    except ImportError as e:
        raise ProfileError(
            "reading Perfetto traces needs the `perfetto` and `protobuf` packages"
            f" (pip install perfetto): {e}") from e
    return perfetto_trace_pb2


# --- reading the file ---------------------------------------------------------------------


class _InflateBudget:
    """The inflated bytes one trace may give, shared by its gzip layer and its compressed packets."""

    def __init__(self, name: str, file_size: int) -> None:
        self.name, self.file_size = name, file_size
        self.limit = max(INFLATE_FLOOR, INFLATE_RATIO * file_size)
        self.used = 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            limit, size, floor = (format_in(n, "MiB", sep=",") for n in (self.limit, self.file_size, INFLATE_FLOOR))
            raise ProfileError(
                f"{self.name}: inflates to more than {limit} ({INFLATE_RATIO} times the file's"
                f" {size}, at least {floor}): refused as a decompression bomb")

    def inflate(self, data: bytes, wbits: int) -> bytes:
        """`data` inflated whole (one compressed packet), within the budget."""
        d = zlib.decompressobj(wbits)
        out = bytearray()
        while data:
            room = self.limit - self.used
            chunk = d.decompress(data, min(_CHUNK, max(1, room + 1)))
            self.take(len(chunk))
            out += chunk
            data = d.unconsumed_tail
        rest = d.flush()  # output still held back (at most a window's worth)
        self.take(len(rest))
        out += rest
        if not d.eof:
            raise EOFError("compressed data ends early")
        return bytes(out)




class _Input:
    """A trace file read a chunk at a time, gunzipped on the way when it starts as gzip does:
    memory holds one chunk and the packet being read, never the whole file."""

    def __init__(self, f: BinaryIO, name: str, budget: _InflateBudget, gzipped: bool) -> None:
        self.f, self.name, self.budget = f, name, budget
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
        self.buf = bytearray()
        self.pos = 0  # bytes of the (inflated) stream consumed so far
        self.eof = False
        self.flushed = False

    def _fill(self) -> bool:
        """Append more bytes to buf; False at the end of the stream."""
        if self.eof:
            return False
        if self.inflater is None:
            chunk = self.f.read(_CHUNK)
            if not chunk:
                self.eof = True
                return False
            self.buf += chunk
            return True
        while True:
            if self.inflater.unconsumed_tail:
                raw = self.inflater.unconsumed_tail
            else:
                raw = self.f.read(_CHUNK)
                if not raw:
                    held = b"" if self.flushed else self.inflater.flush()  # held back: a window at most
                    self.flushed = True
                    if held:
                        self.budget.take(len(held))
                        self.buf += held
                        return True
                    if not self.inflater.eof:
                        raise ProfileError(f"{self.name}: corrupt or truncated gzip file (compressed data ends early)")
                    self.eof = True
                    return False
            if self.inflater.eof:  # data after the gzip member: ignored, as gzip -d would warn and stop
                self.eof = True
                return False
            try:
                out = self.inflater.decompress(raw, _CHUNK)
            except zlib.error as e:
                raise ProfileError(f"{self.name}: corrupt or truncated gzip file ({e})") from e
            self.budget.take(len(out))
            if out:
                self.buf += out
                return True

    def read(self, n: int) -> bytes:
        """Exactly `n` bytes; ProfileError (truncated) when the stream ends first."""
        while len(self.buf) < n:
            if not self._fill():
                raise ProfileError(f"{self.name}: not a Perfetto trace, or a truncated one"
                                   f" (ends inside a packet at byte {self.pos + len(self.buf):,})")
        out = bytes(self.buf[:n])
        del self.buf[:n]
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            if not self.buf and not self._fill():
                raise ProfileError(f"{self.name}: not a Perfetto trace, or a truncated one (ends inside a field)")
            k = min(n, len(self.buf))
            del self.buf[:k]
            self.pos += k
            n -= k

    def at_end(self) -> bool:
        return not self.buf and not self._fill()

    def varint(self) -> int:
        n = shift = 0
        while True:
            if not self.buf and not self._fill():
                raise ProfileError(f"{self.name}: not a Perfetto trace, or a truncated one (ends inside a varint)")
            b = self.buf[0]
            del self.buf[:1]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7
            if shift >= 64:
                raise ProfileError(f"{self.name}: not a Perfetto trace (a varint of more than 10 bytes)")


def packet_bytes(stream: _Input) -> Iterator[bytes]:
    """The serialized TracePackets of a `Trace` (field 1, length-delimited), one at a time; other
    fields are skipped as protobuf would skip them."""
    while not stream.at_end():
        key = stream.varint()
        field_number, wire_type = key >> 3, key & 7
        if wire_type == 2:
            length = stream.varint()
            if field_number == 1:
                yield stream.read(length)
            else:
                stream.skip(length)
        elif wire_type == 0:
            stream.varint()
        elif wire_type in (1, 5):
            stream.skip(8 if wire_type == 1 else 4)
        else:
            raise ProfileError(f"{stream.name}: not a Perfetto trace (wire type {wire_type} at byte {stream.pos:,})")


@contextlib.contextmanager
def open_trace(path: str | os.PathLike[str]) -> Iterator[tuple[_Input, _InflateBudget]]:
    """The trace file as a stream of (gunzipped) bytes and its inflate budget. Raises ProfileError."""
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError as e:
        raise ProfileError(f"{p}: no such file") from e
    except IsADirectoryError as e:
        raise ProfileError(f"{p}: is a directory, not a Perfetto trace") from e
    except OSError as e:
        raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ProfileError(f"{p}: is a directory, not a Perfetto trace")
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{p}: not a regular file, not a Perfetto trace")
        f = os.fdopen(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    with f:
        try:
            head = f.read(2)
            if not head:
                raise ProfileError(f"{p}: empty file, not a Perfetto trace")
            f.seek(0)
            budget = _InflateBudget(str(p), st.st_size)
            yield _Input(f, str(p), budget, head == _GZIP_MAGIC), budget
        except OSError as e:
            raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e


def decode_packets(stream: _Input, name: str) -> Iterator[Any]:
    """Each TracePacket of the stream, decoded as it is read. Raises ProfileError."""
    pt = _trace_module()
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    # Every Perfetto trace begins with field 1 (TracePacket), length-delimited: byte 0x0a.
    if stream.at_end() or stream.buf[0] != 0x0A:
        raise ProfileError(f"{name}: not a Perfetto trace")
    for data in packet_bytes(stream):
        try:
            yield pt.TracePacket.FromString(data)
        except DecodeError as e:
            raise ProfileError(f"{name}: not a Perfetto trace, or a truncated one ({e})") from e
        except RecursionError as e:
            raise ProfileError(f"{name}: not a Perfetto trace (nested too deeply)") from e


# --- import -------------------------------------------------------------------------------


class ImportSummary(Record):
    processes: int = 0
    dumps: int = 0
    samples: int = 0
    callsites: int = 0
    frames: int = 0
    unnamed_frames: int = 0
    mappings: int = 0
    packets: int = 0
    ignored_packets: int = 0  # packets without heap profile data (other data sources)
    problems: dict[str, int] = field(default_factory=dict)  # data-loss stat -> value


class _Sequence(Record):
    """Interned data of one writer sequence, and the samples of the dump being read."""

    function_names: dict[int, bytes] = field(default_factory=dict)
    build_ids: dict[int, bytes] = field(default_factory=dict)
    mapping_paths: dict[int, bytes] = field(default_factory=dict)
    mappings: dict[int, Any] = field(default_factory=dict)
    frames: dict[int, Any] = field(default_factory=dict)
    callstacks: dict[int, Any] = field(default_factory=dict)
    # ProfilePacket's own tables (Android Q): one string table for every role.
    legacy_strings: dict[int, bytes] = field(default_factory=dict)
    legacy_mappings: dict[int, Any] = field(default_factory=dict)
    legacy_frames: dict[int, Any] = field(default_factory=dict)
    legacy_callstacks: dict[int, Any] = field(default_factory=dict)
    pending: list[Any] = field(default_factory=list)  # ProcessHeapSamples until the dump ends
    resolved: dict[int, int] = field(default_factory=dict)  # callstack iid -> callsite id
    resolved_frames: dict[int, int] = field(default_factory=dict)  # frame iid -> frame id
    resolved_mappings: dict[int, int] = field(default_factory=dict)  # mapping iid -> mapping id
    prev_index: int | None = None

    def clear_interned(self) -> None:
        for d in (self.function_names, self.build_ids, self.mapping_paths, self.mappings, self.frames,
                  self.callstacks):
            d.clear()
        self.forget_resolved()

    def forget_resolved(self) -> None:
        self.resolved.clear()
        self.resolved_frames.clear()
        self.resolved_mappings.clear()

    def clear_legacy(self) -> None:
        if self.legacy_strings or self.legacy_mappings or self.legacy_frames or self.legacy_callstacks:
            for d in (self.legacy_strings, self.legacy_mappings, self.legacy_frames, self.legacy_callstacks):
                d.clear()
            self.forget_resolved()


class _Dump(Record):
    upid: int
    heap: str
    ts: int
    start: int
    at_max: bool = False
    rows: list[tuple[int, int, int]] = field(default_factory=list)  # callsite, count, size


_ZERO = (0, 0, 0, 0)


class _HeapState(Record):
    """What the deltas of one (sequence, process, heap) are computed from."""

    # callsite -> its last cumulative (alloc count, alloc bytes, free count, free bytes)
    prev: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    # callstack id -> (the callsite(s) it named, the offset its values get: trace_processor's correction)
    sources: dict[int, tuple[int | frozenset[int], tuple[int, int, int, int]]] = field(default_factory=dict)


class _Proc(Record):
    upid: int
    pid: int
    flags: ProcessFlags = field(default_factory=lambda: ProcessFlags(from_startup=False))
    stats: Any = None  # the last ProcessStats seen
    first_ts: int | None = None
    last_ts: int = 0


class _Unresolved(Exception):
    """A callstack, frame or mapping id the sequence never interned."""


def _text(b: bytes | str) -> str:
    """A string of the trace: proto2 `string` fields holding invalid UTF-8 come back as bytes."""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


class HeapprofdImporter:
    """Feed it the packets of one trace in order, then write the profile."""

    def __init__(self, budget: _InflateBudget | None = None) -> None:
        self.pt = _trace_module()
        # Compressed packets inflate within the trace's budget (one of the floor's size alone).
        self.budget = budget if budget is not None else _InflateBudget("trace", 0)
        self.seqs: dict[int, _Sequence] = {}
        self.procs: dict[int, _Proc] = {}  # pid -> process
        self.tree: dict[int, Any] = {}  # pid -> ProcessTree.Process
        self.tree_order: dict[int, int] = {}  # pid -> its first place in a ProcessTree
        self.mapping_ids: dict[Mapping, int] = {}
        self.frame_ids: dict[Frame, int] = {}
        self.callsite_ids: dict[tuple[int, int], int] = {}  # (parent or 0, frame) -> callsite
        self.callsite_rows: list[tuple[int, int, int | None, int]] = []
        self.dumps: dict[tuple[int, str, int], _Dump] = {}
        self.last_dump_ts: dict[tuple[int, str], int] = {}
        self.heaps: dict[tuple[int, int, str], _HeapState] = {}  # (sequence, upid, heap) -> delta state
        self.module_symbols: list[Any] = []
        # package -> obfuscated class -> (class, obfuscated method -> method); uid -> package
        self.deobfuscation: dict[str, dict[str, tuple[str, dict[str, str]]]] = {}
        self.packages: dict[int, str] = {}
        self.used: set[tuple[int, int]] = set()  # (upid, callsite) pairs with rows
        self.heap_samples_seen = 0
        self.streaming_packets = 0
        self.summary = ImportSummary()
        self.problems: dict[tuple[str, int | None], int] = {}

    # -- packets

    def feed(self, packets: Iterable[Any]) -> None:
        for packet in packets:
            self._packet(packet)

    def _packet(self, packet: Any) -> None:
        self.summary.packets += 1
        if packet.HasField("compressed_packets"):
            self._compressed(packet.compressed_packets)
            return
        seq_id = int(packet.trusted_packet_sequence_id)
        seq = self.seqs.get(seq_id)
        if seq is None:
            seq = self.seqs[seq_id] = _Sequence()
        if packet.incremental_state_cleared or packet.sequence_flags & _SEQ_INCREMENTAL_STATE_CLEARED:
            seq.clear_interned()
        used = False
        if packet.HasField("interned_data"):
            self._interned(seq, packet.interned_data)
            used = True
        if packet.HasField("process_tree"):
            for p in packet.process_tree.processes:
                self.tree[int(p.pid)] = p
                self.tree_order.setdefault(int(p.pid), len(self.tree_order))
            used = True
        if packet.HasField("module_symbols"):
            self.module_symbols.append(packet.module_symbols)
            used = True
        if packet.HasField("deobfuscation_mapping"):
            self._deobfuscation(packet.deobfuscation_mapping)
            used = True
        if packet.HasField("packages_list"):
            for pkg in packet.packages_list.packages:
                self.packages[int(pkg.uid)] = _text(pkg.name)
            used = True
        if packet.HasField("profile_packet"):
            self._profile_packet(seq_id, seq, packet.profile_packet)
            used = True
        if packet.HasField("streaming_allocation") or packet.HasField("streaming_free"):
            # stream_allocations=true: raw mallocs and frees without pid or callstack; trace_processor
            # does not import them either.
            self.streaming_packets += 1
        if not used:
            self.summary.ignored_packets += 1

    def _compressed(self, blob: bytes) -> None:
        try:
            inner = self.pt.Trace.FromString(self.budget.inflate(blob, zlib.MAX_WBITS))
        except ProfileError:
            raise  # the trace's inflate budget is spent: the whole trace is refused
        except Exception:  # noqa: BLE001 - any failure is one damaged packet, counted
            self._problem("import_corrupt_compressed_packets", None)
            return
        self.feed(inner.packet)

    def _interned(self, seq: _Sequence, d: Any) -> None:
        for s in d.function_names:
            seq.function_names[int(s.iid)] = s.str
        for s in d.build_ids:
            seq.build_ids[int(s.iid)] = s.str
        for s in d.mapping_paths:
            seq.mapping_paths[int(s.iid)] = s.str
        for m in d.mappings:
            seq.mappings[int(m.iid)] = m
        for f in d.frames:
            seq.frames[int(f.iid)] = f
        for c in d.callstacks:
            seq.callstacks[int(c.iid)] = c

    def _profile_packet(self, seq_id: int, seq: _Sequence, pp: Any) -> None:
        if pp.HasField("index"):
            index = int(pp.index)
            expected = 0 if seq.prev_index is None else seq.prev_index + 1
            if index != expected:
                self._problem("heapprofd_missing_packet", None)
            seq.prev_index = index
        for s in pp.strings:
            seq.legacy_strings[int(s.iid)] = s.str
        for m in pp.mappings:
            seq.legacy_mappings[int(m.iid)] = m
        for f in pp.frames:
            seq.legacy_frames[int(f.iid)] = f
        for c in pp.callstacks:
            seq.legacy_callstacks[int(c.iid)] = c
        seq.pending.extend(pp.process_dumps)
        self.heap_samples_seen += len(pp.process_dumps)
        if not pp.continued:
            self._commit(seq_id, seq)
            seq.clear_legacy()

    # -- one dump

    def _commit(self, seq_id: int, seq: _Sequence) -> None:
        pending, seq.pending = seq.pending, []
        for h in pending:
            self._process_heap_samples(seq_id, seq, h)

    def _process_heap_samples(self, seq_id: int, seq: _Sequence, h: Any) -> None:
        pid = int(h.pid)
        proc = self.procs.get(pid)
        if proc is None:
            proc = self.procs[pid] = _Proc(upid=len(self.procs) + 1, pid=pid)
        upid = proc.upid
        heap = _text(h.heap_name) or _UNKNOWN_HEAP
        ts = int(h.timestamp)
        f = proc.flags
        f.from_startup |= bool(h.from_startup)
        f.rejected_concurrent |= bool(h.rejected_concurrent)
        f.disconnected |= bool(h.disconnected)
        f.buffer_overran |= bool(h.buffer_overran)
        f.buffer_corrupted |= bool(h.buffer_corrupted)
        f.hit_guardrail |= bool(h.hit_guardrail)
        if h.client_error:
            f.client_error = self.pt.ProfilePacket.ProcessHeapSamples.ClientError.Name(h.client_error) \
                .removeprefix("CLIENT_ERROR_").lower()
        if h.sampling_interval_bytes:
            f.sampling_interval_bytes = int(h.sampling_interval_bytes)
        if h.orig_sampling_interval_bytes:
            f.orig_sampling_interval_bytes = int(h.orig_sampling_interval_bytes)
        if h.HasField("stats"):
            proc.stats = h.stats
        key = (upid, heap, ts)
        dump = self.dumps.get(key)
        if dump is None:
            start = int(h.start_timestamp) if h.start_timestamp else self.last_dump_ts.get((upid, heap), ts)
            dump = self.dumps[key] = _Dump(upid, heap, ts, min(start, ts))
            self.last_dump_ts[(upid, heap)] = max(ts, self.last_dump_ts.get((upid, heap), ts))
        proc.first_ts = dump.start if proc.first_ts is None else min(proc.first_ts, dump.start)
        proc.last_ts = max(proc.last_ts, ts)
        with_count = bool(h.orig_sampling_interval_bytes)
        state = self.heaps.get((seq_id, upid, heap))
        if state is None:
            state = self.heaps[(seq_id, upid, heap)] = _HeapState()
        for s in h.samples:
            self.summary.samples += 1
            iid = int(s.callstack_id)
            callsite = seq.resolved.get(iid)
            if callsite is None:
                try:
                    callsite = self._callsite(seq, iid)
                except _Unresolved:
                    self._problem("import_unresolved_callstack", upid)
                    continue
                seq.resolved[iid] = callsite
            if s.self_max:
                dump.at_max = True
                alloc_n, alloc_b = (int(s.self_max_count) if with_count else 0), int(s.self_max)
                free_n = free_b = 0
            else:
                alloc_n, alloc_b = int(s.alloc_count), int(s.self_allocated)
                free_n, free_b = int(s.free_count), int(s.self_freed)
            prev = state.prev.get(callsite, _ZERO)
            source = state.sources.get(iid)
            if source is None:
                c = prev  # the first time this id is seen: it continues what its callsite had
                state.sources[iid] = (callsite, c)
            else:
                seen, c = source
                if not (seen == callsite if isinstance(seen, int) else callsite in seen):
                    c = prev  # the id names other frames now (interned again): continue those
                    state.sources[iid] = ((frozenset((seen,)) if isinstance(seen, int) else seen) | {callsite}, c)
            if c is not _ZERO:
                alloc_n, alloc_b, free_n, free_b = alloc_n + c[0], alloc_b + c[1], free_n + c[2], free_b + c[3]
            d_an, d_ab, d_fn, d_fb = alloc_n - prev[0], alloc_b - prev[1], free_n - prev[2], free_b - prev[3]
            if d_an < 0 or d_ab < 0 or d_fn < 0 or d_fb < 0:
                self._problem("heapprofd_malformed_packet", upid)
                continue
            self.used.add((upid, callsite))
            if d_an or d_ab:
                dump.rows.append((callsite, d_an, d_ab))
            if (d_fn or d_fb) and heap != _ART_HEAP:
                dump.rows.append((callsite, -d_fn, -d_fb))
            state.prev[callsite] = (alloc_n, alloc_b, free_n, free_b)

    # -- interned data -> our rows

    def _callsite(self, seq: _Sequence, iid: int) -> int:
        cs = seq.legacy_callstacks.get(iid)
        if cs is None:
            cs = seq.callstacks.get(iid)
        if cs is None or not cs.frame_ids:
            raise _Unresolved
        frames = [self._frame(seq, int(fid)) for fid in cs.frame_ids]
        parent = 0
        for depth, frame in enumerate(frames):
            node = self.callsite_ids.get((parent, frame))
            if node is None:
                node = self.callsite_ids[(parent, frame)] = len(self.callsite_rows) + 1
                self.callsite_rows.append((node, depth, parent or None, frame))
            parent = node
        return parent

    def _string(self, seq: _Sequence, table: dict[int, bytes], iid: int) -> bytes | None:
        s = seq.legacy_strings.get(iid)
        return s if s is not None else table.get(iid)

    def _frame(self, seq: _Sequence, iid: int) -> int:
        fid = seq.resolved_frames.get(iid)
        if fid is not None:
            return fid
        f = seq.legacy_frames.get(iid)
        if f is None:
            f = seq.frames.get(iid)
        if f is None:
            raise _Unresolved
        mapping = self._mapping(seq, int(f.mapping_id))
        name = self._string(seq, seq.function_names, int(f.function_name_id)) if f.function_name_id else b""
        frame = Frame(mapping=mapping, rel_pc=int(f.rel_pc), name=_text(name or b""))  # type: ignore[arg-type]
        fid = self.frame_ids.get(frame)
        if fid is None:
            fid = self.frame_ids[frame] = len(self.frame_ids) + 1
        seq.resolved_frames[iid] = fid
        return fid

    def _mapping(self, seq: _Sequence, iid: int) -> int:
        mid = seq.resolved_mappings.get(iid)
        if mid is not None:
            return mid
        m = seq.legacy_mappings.get(iid)
        if m is None:
            m = seq.mappings.get(iid)
        if m is None:
            raise _Unresolved
        build_id = self._string(seq, seq.build_ids, int(m.build_id)) if m.build_id else b""
        parts = [_text(self._string(seq, seq.mapping_paths, int(i)) or b"") for i in m.path_string_ids]
        name = "/" + "/".join(parts) if parts else ""
        if name.startswith("//"):
            name = name[1:]
        mapping = Mapping(build_id=(build_id or b"").hex(), exact_offset=int(m.exact_offset),
                          start_offset=int(m.start_offset), start=int(m.start), end=int(m.end),
                          load_bias=int(m.load_bias), name=name)
        mid = self.mapping_ids.get(mapping)
        if mid is None:
            mid = self.mapping_ids[mapping] = len(self.mapping_ids) + 1
        seq.resolved_mappings[iid] = mid
        return mid

    def _problem(self, name: str, upid: int | None) -> None:
        self.problems[(name, upid)] = self.problems.get((name, upid), 0) + 1

    # -- the end

    def finish(self, name: str) -> None:
        """Account for what the trace left open. Raises ProfileError without any heap profile."""
        for seq in self.seqs.values():
            if seq.pending:
                # trace_processor does not commit a dump whose last packet is missing either.
                self._problem("heapprofd_non_finalized_profile", None)
                seq.pending = []
        if not self.heap_samples_seen:
            if self.streaming_packets:
                raise ProfileError(
                    f"{name}: no heapprofd heap profile in this trace, only streamed allocations"
                    " (stream_allocations=true: no callstacks to import)")
            raise ProfileError(f"{name}: no heapprofd heap profile in this trace (no ProfilePacket with process dumps)")

    def _renumber(self) -> None:
        """Final upids: dense, in the order of the ProcessTree (as trace_processor numbers them), then
        in the order the heap dumps named them."""
        order = sorted(self.procs.values(), key=lambda p: (self.tree_order.get(p.pid, len(self.tree_order)), p.upid))
        new = {p.upid: i for i, p in enumerate(order, 1)}
        for p in self.procs.values():
            p.upid = new[p.upid]
        for d in self.dumps.values():
            d.upid = new[d.upid]
        self.used = {(new[u], cs) for u, cs in self.used}
        self.problems = {(name, None if u is None else new[u]): n for (name, u), n in self.problems.items()}

    def write(self, writer: ProfileWriter, source: str) -> ImportSummary:
        s = self.summary
        self._renumber()
        writer.set_metadata("imported_from", source)
        writer.set_metadata("command", f"heapprofd trace {Path(source).name}")
        intervals = [p.flags.sampling_interval_bytes for p in self.procs.values() if p.flags.sampling_interval_bytes]
        writer.set_metadata("interval", intervals[0] if intervals else 1)

        writer.add_mappings((i, m) for m, i in self.mapping_ids.items())
        deobfuscated = self._deobfuscated_names()
        writer.add_frames((i, Frame(f.mapping, f.rel_pc, deobfuscated.get(i, f.name)))
                          for f, i in self.frame_ids.items())
        writer.set_deobfuscated_names((n, i) for i, n in deobfuscated.items())
        writer.add_callsites(self.callsite_rows)
        self._write_symbols(writer)

        ordered = sorted(self.dumps.values(), key=lambda d: (d.upid, d.ts, d.heap))
        last: dict[tuple[int, str], int] = {}
        for d in ordered:
            last[(d.upid, d.heap)] = d.ts
        by_upid = {p.upid: p for p in self.procs.values()}
        for d in ordered:
            proc = by_upid[d.upid]
            if d.at_max:
                reason = "peak"
            elif last[(d.upid, d.heap)] != d.ts:
                reason = "periodic"
            else:
                reason = "exit" if proc.flags.disconnected else "end"
            writer.add_dump(d.upid, d.start, d.ts, reason, d.rows, d.heap)

        for p in sorted(self.procs.values(), key=lambda p: p.upid):
            t = self.tree.get(p.pid)
            args = [_text(a) for a in t.cmdline] if t is not None else []
            exe = args[0] if args else ""
            info = ProcessInfo(
                upid=Upid(p.upid), pid=p.pid, ppid=int(t.ppid) if t is not None else 0,
                name=exe.split("@", 1)[0].rsplit("/", 1)[-1] if exe else "", cmdline=" ".join(args), exe=exe,
                uid=int(t.uid) if t is not None else 0, start_ts=p.first_ts or 0,
                end_ts=p.last_ts if p.flags.disconnected else None)
            writer.add_process(info)
            writer.set_process_flags(info, p.flags)
            writer.add_stats(self._stats_rows(p))
        problems = [(name, idx, "data_loss", "import", n, _PROBLEMS.get(name, ""))
                    for (name, idx), n in sorted(self.problems.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
        writer.add_stats(problems)
        writer.commit()

        s.processes = len(self.procs)
        s.dumps = len(self.dumps)
        s.callsites = len(self.callsite_rows)
        s.frames = len(self.frame_ids)
        s.unnamed_frames = sum(1 for f in self.frame_ids if not f.name)
        s.mappings = len(self.mapping_ids)
        for (name, _idx), n in self.problems.items():
            s.problems[name] = s.problems.get(name, 0) + n
        return s

    # -- Java frames: ProGuard/R8 maps (DeobfuscationMapping)

    def _deobfuscation(self, dm: Any) -> None:
        classes = self.deobfuscation.setdefault(_text(dm.package_name), {})
        for c in dm.obfuscated_classes:
            members = {_text(m.obfuscated_name): _text(m.deobfuscated_name) for m in c.obfuscated_methods}
            members.update({_text(m.obfuscated_name): _text(m.deobfuscated_name) for m in c.obfuscated_members})
            classes[_text(c.obfuscated_name)] = (_text(c.deobfuscated_name), members)

    def _deobfuscated_names(self) -> dict[int, str]:
        """frame id -> `Class.method` for frames named `cls.m` that a map of their package knows.

        The package of a frame: from its mapping path (/data/app/<package>-<suffix>/base.apk), else
        those of the processes whose stacks hold it (by uid in packages_list, or their name), else
        any package whose map has the class (JIT code in memfd:jit-cache).
        """
        if not self.deobfuscation:
            return {}
        by_upid = {p.upid: p for p in self.procs.values()}
        callsites = {row[0]: (row[2], row[3]) for row in self.callsite_rows}  # id -> (parent, frame)
        frame_packages: dict[int, set[str]] = {}
        for upid, cs in self.used:
            proc = by_upid[upid]
            t = self.tree.get(proc.pid)
            of_process: set[str] = set()
            if t is not None:
                if int(t.uid) in self.packages:
                    of_process.add(self.packages[int(t.uid)])
                if t.cmdline and _text(t.cmdline[0]) in self.deobfuscation:
                    of_process.add(_text(t.cmdline[0]))
            node: int | None = cs
            while node is not None:
                parent, frame_id = callsites[node]
                frame_packages.setdefault(frame_id, set()).update(of_process)
                node = parent
        mappings = {i: m for m, i in self.mapping_ids.items()}
        out: dict[int, str] = {}
        for frame, fid in self.frame_ids.items():
            cls, dot, method = frame.name.rpartition(".")
            if not dot or not cls:
                continue
            apk = _apk_package(mappings[frame.mapping].name)
            pkgs = [apk] if apk else sorted(frame_packages.get(fid, ())) or sorted(self.deobfuscation)
            for pkg in pkgs:
                known = self.deobfuscation.get(pkg, {}).get(cls)
                if known is not None:
                    out[fid] = f"{known[0] or cls}.{known[1].get(method) or method}"
                    break
        return out

    def _stats_rows(self, p: _Proc) -> list[StatRow]:
        st = p.stats
        if st is None:
            return []
        rows = [
            ("heap_samples", "info", "client", int(st.heap_samples), "sampled mallocs unwound (heapprofd)"),
            ("unwinding_errors", "error", "client", int(st.unwinding_errors), "unwinds that failed (heapprofd)"),
            ("map_reparses", "info", "client", int(st.map_reparses), "rereads of /proc/PID/maps (heapprofd)"),
            ("total_unwinding_time_us", "info", "client", int(st.total_unwinding_time_us),
             "time heapprofd spent unwinding"),
            ("client_blocked_us", "info", "client", int(st.client_spinlock_blocked_us),
             "time the target waited on heapprofd's client spinlock"),
        ]
        return [(name, p.upid, sev, src, v, desc) for name, sev, src, v, desc in rows]

    def _write_symbols(self, writer: ProfileWriter) -> None:
        """ModuleSymbols -> symbol rows of the frames at those addresses (matched by build id, else path)."""
        if not self.module_symbols:
            return
        by_key: dict[tuple[str, str], dict[int, Any]] = {}
        for ms in self.module_symbols:
            keys = [("p", _text(ms.path))]
            if ms.build_id:
                # A string field that holds the raw build id bytes (trace_processor shows their hex),
                # or a build id already written in hex.
                raw = ms.build_id if isinstance(ms.build_id, bytes) else ms.build_id.encode()
                keys = [("b", raw.hex()), ("b", _text(ms.build_id).lower())]
            for key in keys:
                table = by_key.setdefault(key, {})
                for a in ms.address_symbols:
                    table[int(a.address)] = a.lines
        mappings = {i: m for m, i in self.mapping_ids.items()}
        symbol_rows: list[tuple[int, int, str, str | None, int | None, int]] = []
        frame_rows: list[tuple[str, int, int]] = []
        next_id = 1
        for frame, fid in self.frame_ids.items():
            m = mappings[frame.mapping]
            found = by_key.get(("b", m.build_id)) if m.build_id else None
            if found is None:
                found = by_key.get(("p", m.name))
            lines = found.get(frame.rel_pc) if found is not None else None
            if not lines:
                continue
            set_id = next_id
            for depth, ln in enumerate(lines):
                symbol_rows.append((next_id, set_id, _text(ln.function_name), _text(ln.source_file_name) or None,
                                    int(ln.line_number) or None, int(depth < len(lines) - 1)))
                next_id += 1
            frame_rows.append((_text(lines[-1].function_name) or frame.name, set_id, fid))
        writer.add_symbols(symbol_rows)
        writer.set_frame_symbols(frame_rows)


_PROBLEMS = {
    "heapprofd_missing_packet": "ProfilePackets missing from the trace (an index gap)",
    "heapprofd_malformed_packet": "samples dropped: their cumulative values went down",
    "heapprofd_non_finalized_profile": "dumps without their last packet (not imported)",
    "import_unresolved_callstack": "samples dropped: callstack, frame or mapping not interned",
    "import_corrupt_compressed_packets": "compressed packets that could not be read",
}


def import_trace(trace: str | os.PathLike[str], writer_factory: Any) -> tuple[ImportSummary, ProfileWriter]:
    """Read `trace` (streamed, a packet at a time), then write it through `writer_factory()` (a ProfileWriter).

    Nothing is written when the trace cannot be read. Returns the summary and the open writer
    (for symbolization; the caller closes it).
    """
    name = str(trace)
    with open_trace(trace) as (stream, budget):
        imp = HeapprofdImporter(budget)
        imp.feed(decode_packets(stream, name))
    if not imp.summary.packets:
        raise ProfileError(f"{name}: not a Perfetto trace (no packets)")
    imp.finish(name)
    writer: ProfileWriter = writer_factory()
    try:
        summary = imp.write(writer, name)
    except BaseException as e:
        # No half-written profile is left behind.
        writer.db.close()
        for suffix in ("", *SIDECARS):
            with contextlib.suppress(OSError):
                os.unlink(f"{writer.path}{suffix}")
        if isinstance(e, OverflowError):
            # SQLite integers are signed 64-bit; no heapprofd address, size or time comes near 2**63.
            raise ProfileError(f"{name}: corrupt trace (a value above 2**63 - 1)") from e
        if isinstance(e, sqlite3.Error):
            raise OutputError(f"{writer.path}: cannot write: {e}") from e
        raise
    return summary, writer


def _apk_package(path: str) -> str:
    """`com.example` for /data/app/com.example-XyZ==/base.apk (and /data/app/~~AbC==/com.example-XyZ==/...)."""
    parts = path.strip("/").split("/")
    if len(parts) < 3 or parts[:2] != ["data", "app"]:
        return ""
    for part in parts[2:-1]:
        if not part.startswith("~~"):
            return part.split("-", 1)[0]
    return ""


def problem_phrases(summary: ImportSummary) -> Iterator[str]:
    """The data-loss problems of an import, as `name = value` phrases."""
    for name, n in sorted(summary.problems.items()):
        yield f"{name} = {n:,}"
