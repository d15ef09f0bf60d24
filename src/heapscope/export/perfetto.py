"""Perfetto export: a trace of heapprofd ProfilePackets that trace_processor and ui.perfetto.dev load.

Packet order (docs/exports.md, "Perfetto trace"), all on one writer sequence:
  ClockSnapshot    BOOTTIME, MONOTONIC_COARSE, MONOTONIC and REALTIME all at the same
                   value, so trace_processor's clock conversion is the identity and its
                   `ts` columns equal the profile's (CLOCK_MONOTONIC ns)
  ProcessTree      pid, ppid, cmdline of every exported process
  InternedData     build ids, mapping path, mappings, function names, frames, callstacks
                   (the first packet clears incremental state; chunks of at most
                   _CHUNK entries so no packet grows with the profile)
  ProfilePacket    one per heapscope dump, in time order, index 0, 1, 2, ...;
                   HeapSample values are cumulative since the process was attached, as
                   heapprofd writes them; trace_processor turns them back into the
                   +alloc / -free delta rows of heap_profile_allocation. A dump with more
                   than _CHUNK callsites continues in the next packet (`continued`).
  ModuleSymbols    last, once the frames exist in trace_processor: per mapping (path +
                   build id), per symbolized rel_pc, the inline chain as `Line`s,
                   innermost function first as in stack_profile_symbol; trace_processor
                   fills its stack_profile_symbol from them and sets the frames'
                   symbol_set_id, so the UI shows file:line and inlined frames
                   (the same packets `traceconv symbolize` appends to a trace).
Interned ids are the profile's own frame, mapping and callsite ids (all >= 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from heapscope.export import _proto as pb
from heapscope.export._common import Frames, check_view, pick_dumps, process_label, select_processes
from heapscope.export._sink import Sink
from heapscope.model import CallsiteId, FrameId
from heapscope.store.labels import arguments
from heapscope.store.reader import Dump, Profile, SymbolLine
from heapscope.store.reader import Process as StoredProcess
from heapscope.store.select import ALL_HEAPS, HEAP_JOIN, default_dump, heap_names, process_state, select_heap

_SEQ = 1  # trusted_packet_sequence_id of our one writer sequence
_CHUNK = 4096
_CLOCKS = (6, 4, 3, 1)  # BOOTTIME, MONOTONIC_COARSE, MONOTONIC, REALTIME
# TracePacket fields
_P_TIMESTAMP, _P_SEQ_ID, _P_INTERNED, _P_FLAGS, _P_CLEARED = 8, 10, 12, 13, 41
_P_CLOCK_SNAPSHOT, _P_PROCESS_TREE, _P_PROFILE, _P_MODULE_SYMBOLS = 6, 2, 37, 61
_SEQ_INCREMENTAL_STATE_CLEARED, _SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
# InternedData fields
_I_FUNCTION_NAMES, _I_FRAMES, _I_CALLSTACKS, _I_BUILD_IDS, _I_MAPPING_PATHS, _I_MAPPINGS = 5, 6, 7, 16, 17, 19


# Long on purpose: one streamed pass that writes the packets in the order trace_processor needs them
# (clock, process tree, interned data, then each dump), with the state the packets share.
def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: str | int | None = None) -> None:
    """`dump`: peak (the default for space and objects, as every view: one ProfilePacket per
    process heap, at its peak), end, N (that dump of each process), or all (every dump)."""
    check_view(view)
    processes = select_processes(profile, pid)
    sink = Sink(out)
    choice = default_dump(view) if dump is None else dump

    def packet(body: bytes) -> None:
        sink.write(pb.blob(1, body))

    dumps: list[tuple[Dump, StoredProcess]] = []
    peaks: list[tuple[Dump, StoredProcess, dict[CallsiteId, list[int]]]] = []
    if choice == "peak":
        peaks, rest = _peaks(profile, processes)
        for p in rest:  # no peak recorded (an imported profile): its end, as every view says
            dumps.extend((d, p) for d in pick_dumps(profile.dumps(p.info.upid), -1, process_label(p)))
    else:
        n = None if choice == ALL_DUMPS else -1 if choice == "end" else int(choice)
        for p in processes:
            dumps.extend((d, p) for d in pick_dumps(profile.dumps(p.info.upid), n, process_label(p)))
    dumps.sort(key=lambda dp: (dp[0].ts_end, dp[0].id))
    starts = ([p.info.start_ts for p in processes if p.info.start_ts > 0] + [d.ts for d, _ in dumps]
              + [d.ts for d, _p, _t in peaks])
    t0 = max(0, min(starts)) if starts else 0

    clocks = b"".join(pb.blob(1, pb.uint(1, c) + pb.uint(2, t0)) for c in _CLOCKS)
    packet(pb.uint(_P_TIMESTAMP, t0) + pb.blob(_P_CLOCK_SNAPSHOT, clocks + pb.uint(2, 6)))
    tree = b""
    for p in processes:
        # The stored line is shell-quoted (view/labels.py): its arguments, an empty one kept.
        args = arguments(p.info.cmdline) if p.info.cmdline else [p.info.exe or p.info.name]
        tree += pb.blob(1, pb.uint(1, p.info.pid) + pb.uint(2, p.info.ppid)
                        + b"".join(pb.string(3, a) for a in args))
    packet(pb.uint(_P_TIMESTAMP, t0) + pb.blob(_P_PROCESS_TREE, tree))

    used_frames = _write_interned(profile, packet, [p.info.upid for p in processes], t0)

    index = 0
    state: dict[tuple[int, str], dict[int, list[int]]] = {}  # (upid, heap) -> callsite -> totals
    applied: dict[tuple[int, str], int] = {}  # (upid, heap) -> ts of the last rows applied
    written: set[int] = set()  # callsites of the samples written: their frames get symbols
    snapshots = [(d, p, None) for d, p in dumps] + [(d, p, t) for d, p, t in peaks]
    snapshots.sort(key=lambda s: (s[0].ts_end, s[0].id))
    for d, p, at_peak in snapshots:
        k = (int(p.info.upid), d.heap_name)
        totals = state.setdefault(k, {}) if at_peak is None else at_peak
        after = applied.get(k, -1 << 62)
        if at_peak is None and d.ts_end > after:
            for cs, count, size in profile.allocation_deltas(k[0], k[1], after, d.ts_end):
                t = totals.get(cs)
                if t is None:
                    t = totals[cs] = [0, 0, 0, 0]
                if size > 0 or count > 0:
                    t[0] += size
                    t[2] += count
                else:
                    t[1] -= size
                    t[3] -= count
            applied[k] = d.ts_end
        f = p.flags
        interval = f.sampling_interval_bytes if f is not None else 0
        header = (pb.uint(1, p.info.pid) + pb.string(11, d.heap_name) + pb.uint(9, d.ts_end)
                  + pb.opt_uint(12, interval)
                  + pb.opt_uint(13, f.orig_sampling_interval_bytes if f is not None else 0))
        if f is not None:
            header += (pb.uint(3, int(f.from_startup)) + pb.opt_uint(4, int(f.rejected_concurrent))
                       + pb.opt_uint(6, int(f.disconnected)) + pb.opt_uint(7, int(f.buffer_overran))
                       + pb.opt_uint(8, int(f.buffer_corrupted)) + pb.opt_uint(10, int(f.hit_guardrail)))
        items = list(totals.items())
        written.update(cs for cs, _t in items)
        for lo in range(0, max(1, len(items)), _CHUNK):
            chunk = items[lo:lo + _CHUNK]
            samples = b"".join(
                pb.blob(2, pb.uint(1, cs) + pb.uint(2, t[0]) + pb.uint(3, t[1]) + pb.uint(5, t[2])
                        + pb.uint(6, t[3]))
                for cs, t in chunk)
            continued = lo + _CHUNK < len(items)
            body = pb.blob(5, header + samples) + pb.opt_uint(6, int(continued)) + pb.uint(7, index)
            packet(pb.uint(_P_TIMESTAMP, d.ts_end) + pb.uint(_P_SEQ_ID, _SEQ)
                   + pb.uint(_P_FLAGS, _SEQ_NEEDS_INCREMENTAL_STATE) + pb.blob(_P_PROFILE, body))
            index += 1
    last = max([t0] + [d.ts_end for d, _p, _t in snapshots])
    # After every ProfilePacket: trace_processor sorts by ts, and symbols of frames no packet
    # has made known yet are errors (stackprofile_invalid_frame_id), as with one peak packet.
    _write_symbols(profile, packet, last + 1, used_frames & _frames_of(profile, written))
    sink.flush()


def _frames_of(profile: Profile, callsites: set[int]) -> set[FrameId]:
    """The frames on the paths of `callsites`: those trace_processor makes known (a frame that
    only an unsampled callstack uses stays unknown to it, and its symbols would be errors)."""
    tree = profile.callsites()
    seen: set[int] = set()
    frames: set[FrameId] = set()
    for cs in callsites:
        node: int | None = cs
        while node is not None and node not in seen:
            seen.add(node)
            entry = tree.get(CallsiteId(node))
            if entry is None:
                break
            frames.add(entry[1])
            node = entry[0]
    return frames


#: --dump all: every dump of each process (the trace's timeline), not one state.
ALL_DUMPS = "all"


def _peaks(profile: Profile, processes: list[StoredProcess]
           ) -> tuple[list[tuple[Dump, StoredProcess, dict[CallsiteId, list[int]]]], list[StoredProcess]]:
    """Each process heap at its peak, as a dump at the peak's ts with heapprofd's cumulative
    totals there per callsite (allocated, freed, their counts: freed = allocated - unreleased),
    and the processes without a peak. Each heap is read alone (store.select.select_heap: a
    custom heap's peak is its own), then the heaps shown before are shown again."""
    visible: dict[int, list[str]] = {}
    for p in processes:
        visible[int(p.info.upid)] = sorted({d.heap_name for d in profile.dumps(p.info.upid)})
    every = heap_names(profile)
    shown = sorted({h for hs in visible.values() for h in hs})
    # Heap by heap, each shown once for every process (a switch of heap drops what was read, and
    # a build's 113 processes read the peak table 226 times: 1.2 s of a 3.5 s export).
    found: dict[tuple[int, str], tuple[Dump, dict[CallsiteId, list[int]]]] = {}
    try:
        for heap in shown:
            if len(every) > 1:
                select_heap(profile, heap)
            for p in processes:
                if heap not in visible[int(p.info.upid)]:
                    continue
                st = process_state(profile, p, "peak")
                if st is None or st.kind != "peak":
                    continue
                totals = {cs: [v.alloc_space, v.alloc_space - v.space, v.alloc_objects, v.alloc_objects - v.objects]
                          for cs, v in st.values.items()}
                found[(int(p.info.upid), heap)] = Dump(-1, st.ts, st.ts, p.info.upid, heap, "peak"), totals
    finally:
        if len(every) > 1:
            select_heap(profile, ALL_HEAPS if shown == every else HEAP_JOIN.join(h for h in every if h in shown))
    out: list[tuple[Dump, StoredProcess, dict[CallsiteId, list[int]]]] = []
    rest: list[StoredProcess] = []
    for p in processes:
        mine = [found[key] for key in ((int(p.info.upid), h) for h in visible[int(p.info.upid)]) if key in found]
        out += [(dump, p, totals) for dump, totals in mine]
        if not mine:
            rest.append(p)
    return out, rest


def _write_symbols(profile: Profile, packet: Callable[[bytes], None], ts: int, used: set[FrameId]) -> None:
    """ModuleSymbols packets: one per mapping with symbolized frames, at most _CHUNK addresses each.

    Only frames of the exported callstacks: trace_processor knows no others, and counts
    symbols for a frame it does not know as an error (stackprofile_invalid_frame_id)."""
    frames = profile.frames()
    by_mapping: dict[int, dict[int, list[SymbolLine]]] = {}
    for fid, lines in profile.frame_symbols().items():
        info = frames.get(fid)
        if info is None or not lines or fid not in used:
            continue
        by_mapping.setdefault(int(info.mapping_id), {}).setdefault(info.rel_pc, lines)
    if not by_mapping:
        return
    for m in profile.mappings():
        addresses = by_mapping.get(int(m.id))
        if not addresses:
            continue
        head = pb.string(1, m.name) + (pb.blob(2, _hex_bytes(m.build_id)) if m.build_id else b"")
        items = sorted(addresses.items())
        for lo in range(0, len(items), _CHUNK):
            body = head + b"".join(
                pb.blob(3, pb.uint(1, pc) + b"".join(
                    pb.blob(2, pb.string(1, s.name) + (pb.string(2, s.source_file) if s.source_file else b"")
                            + pb.opt_uint(3, s.line_number))
                    for s in lines))
                for pc, lines in items[lo:lo + _CHUNK])
            packet(pb.uint(_P_TIMESTAMP, ts) + pb.blob(_P_MODULE_SYMBOLS, body))


def _write_interned(profile: Profile, packet, upids: list[int], t0: int) -> set[FrameId]:  # type: ignore[no-untyped-def]
    """The interned packets; the frames the exported callstacks use."""
    first = True

    def emit(field: int, entries: list[bytes]) -> None:
        nonlocal first
        if not entries and not first:
            return
        flags = _SEQ_INCREMENTAL_STATE_CLEARED if first else _SEQ_NEEDS_INCREMENTAL_STATE
        body = (pb.uint(_P_TIMESTAMP, t0) + pb.uint(_P_SEQ_ID, _SEQ) + pb.uint(_P_FLAGS, flags)
                + (pb.uint(_P_CLEARED, 1) if first else b"")
                + pb.blob(_P_INTERNED, b"".join(pb.blob(field, e) for e in entries)))
        first = False
        packet(body)

    def chunked(field: int, it) -> None:  # type: ignore[no-untyped-def]
        batch: list[bytes] = []
        for e in it:
            batch.append(e)
            if len(batch) >= _CHUNK:
                emit(field, batch)
                batch = []
        if batch:
            emit(field, batch)

    mappings = profile.mappings()
    build_ids: dict[str, int] = {}
    paths: dict[str, int] = {}
    for m in mappings:
        if m.build_id and m.build_id not in build_ids:
            build_ids[m.build_id] = len(build_ids) + 1
        if m.name not in paths:
            paths[m.name] = len(paths) + 1
    chunked(_I_BUILD_IDS, (pb.uint(1, i) + pb.blob(2, _hex_bytes(b)) for b, i in build_ids.items()))
    chunked(_I_MAPPING_PATHS, (pb.uint(1, i) + pb.string(2, n) for n, i in paths.items()))
    chunked(_I_MAPPINGS, (
        pb.uint(1, m.id) + pb.opt_uint(2, build_ids.get(m.build_id, 0))
        + pb.uint(3, m.start_offset) + pb.uint(4, m.start) + pb.uint(5, m.end)
        + pb.uint(6, m.load_bias) + pb.uint(7, paths[m.name]) + pb.uint(8, m.exact_offset)
        for m in mappings))

    frames = Frames(profile)
    names: dict[str, int] = {}
    for info in frames.info.values():
        if info.name not in names:
            names[info.name] = len(names) + 1
    chunked(_I_FUNCTION_NAMES, (pb.uint(1, i) + pb.string(2, n) for n, i in names.items()))
    chunked(_I_FRAMES, (
        pb.uint(1, fid) + pb.uint(2, names[info.name]) + pb.uint(3, info.mapping_id) + pb.uint(4, info.rel_pc)
        for fid, info in frames.info.items()))
    used: set[FrameId] = set()
    chunked(_I_CALLSTACKS, _callstacks(frames, profile.used_callsites(upids), used))
    if first:
        emit(_I_FUNCTION_NAMES, [])
    return used


def _callstacks(frames: Frames, callsites: Iterable[CallsiteId], used: set[FrameId]) -> Iterator[bytes]:
    """Each callsite's Callstack (its id, then its frame ids root first, unpacked), the frames met
    added to `used`. A callstack's frame ids are its parent's followed by its own frame's, so
    each callsite's encoding is its parent's bytes and one more piece, made once (a build's
    ~200k callstacks of ~30 frames took 0.8 s a varint at a time)."""
    piece_of: dict[FrameId, bytes] = {}
    encoded: dict[CallsiteId, bytes] = {}
    frame_key = pb.key(2, 0)
    for cs in callsites:
        todo, known = frames.walk_to(cs, encoded)
        body = known if known is not None else b""
        for node_id, frame in reversed(todo):
            piece = piece_of.get(frame)
            if piece is None:
                piece = piece_of[frame] = frame_key + pb.varint(frame)
                used.add(frame)
            body += piece
            encoded[node_id] = body
        yield pb.uint(1, cs) + body


def _hex_bytes(h: str) -> bytes:
    try:
        return bytes.fromhex(h)
    except ValueError:
        return h.encode()
