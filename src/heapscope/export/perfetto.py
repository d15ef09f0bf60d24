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
Interned ids are the profile's own frame, mapping and callsite ids (all >= 1).
"""

from __future__ import annotations

from typing import BinaryIO

from heapscope.export import _proto as pb
from heapscope.export._common import Frames, check_view, pick_dumps, process_label, select_processes
from heapscope.export._sink import Sink
from heapscope.model import CallsiteId
from heapscope.store.reader import Profile

_SEQ = 1  # trusted_packet_sequence_id of our one writer sequence
_CHUNK = 4096
_CLOCKS = (6, 4, 3, 1)  # BOOTTIME, MONOTONIC_COARSE, MONOTONIC, REALTIME
# TracePacket fields
_P_TIMESTAMP, _P_SEQ_ID, _P_INTERNED, _P_FLAGS, _P_CLEARED = 8, 10, 12, 13, 41
_P_CLOCK_SNAPSHOT, _P_PROCESS_TREE, _P_PROFILE = 6, 2, 37
_SEQ_INCREMENTAL_STATE_CLEARED, _SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
# InternedData fields
_I_FUNCTION_NAMES, _I_FRAMES, _I_CALLSTACKS, _I_BUILD_IDS, _I_MAPPING_PATHS, _I_MAPPINGS = 5, 6, 7, 16, 17, 19


def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: int | None = None) -> None:
    check_view(view)  # a trace holds every view; the argument is accepted for symmetry
    processes = select_processes(profile, pid)
    sink = Sink(out)

    def packet(body: bytes) -> None:
        sink.write(pb.blob(1, body))

    dumps = []
    for p in processes:
        dumps.extend((d, p) for d in pick_dumps(profile.dumps(p.info.upid), dump, process_label(p)))
    dumps.sort(key=lambda dp: (dp[0].ts_end, dp[0].id))
    starts = [p.info.start_ts for p in processes if p.info.start_ts > 0] + [d.ts for d, _ in dumps]
    t0 = max(0, min(starts)) if starts else 0

    clocks = b"".join(pb.blob(1, pb.uint(1, c) + pb.uint(2, t0)) for c in _CLOCKS)
    packet(pb.uint(_P_TIMESTAMP, t0) + pb.blob(_P_CLOCK_SNAPSHOT, clocks + pb.uint(2, 6)))
    tree = b""
    for p in processes:
        args = p.info.cmdline.split(" ") if p.info.cmdline else [p.info.exe or p.info.name]
        tree += pb.blob(1, pb.uint(1, p.info.pid) + pb.uint(2, p.info.ppid)
                        + b"".join(pb.string(3, a) for a in args))
    packet(pb.uint(_P_TIMESTAMP, t0) + pb.blob(_P_PROCESS_TREE, tree))

    _write_interned(profile, packet, [p.info.upid for p in processes], t0)

    index = 0
    state: dict[tuple[int, str], dict[int, list[int]]] = {}  # (upid, heap) -> callsite -> totals
    applied: dict[tuple[int, str], int] = {}  # (upid, heap) -> ts of the last rows applied
    for d, p in dumps:
        k = (int(p.info.upid), d.heap_name)
        totals = state.setdefault(k, {})
        after = applied.get(k, -1 << 62)
        if d.ts_end > after:
            for cs, count, size in profile._rows(
                    "SELECT callsite_id, count, size FROM heap_profile_allocation"
                    " WHERE upid = ? AND heap_name = ? AND ts > ? AND ts <= ?",
                    (k[0], k[1], after, d.ts_end)):
                t = totals.get(int(str(cs)))
                if t is None:
                    t = totals[int(str(cs))] = [0, 0, 0, 0]
                n, s = int(str(count)), int(str(size))
                if s > 0 or n > 0:
                    t[0] += s
                    t[2] += n
                else:
                    t[1] -= s
                    t[3] -= n
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
    sink.flush()


def _write_interned(profile: Profile, packet, upids: list[int], t0: int) -> None:  # type: ignore[no-untyped-def]
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

    mappings = profile._rows('SELECT id, build_id, exact_offset, start_offset, start, "end", load_bias, name'
                             " FROM stack_profile_mapping ORDER BY id")
    build_ids: dict[str, int] = {}
    paths: dict[str, int] = {}
    for r in mappings:
        bid = str(r[1] or "")
        if bid and bid not in build_ids:
            build_ids[bid] = len(build_ids) + 1
        name = str(r[7] or "")
        if name not in paths:
            paths[name] = len(paths) + 1
    chunked(_I_BUILD_IDS, (pb.uint(1, i) + pb.blob(2, _hex_bytes(b)) for b, i in build_ids.items()))
    chunked(_I_MAPPING_PATHS, (pb.uint(1, i) + pb.string(2, n) for n, i in paths.items()))
    chunked(_I_MAPPINGS, (
        pb.uint(1, int(str(r[0]))) + pb.opt_uint(2, build_ids.get(str(r[1] or ""), 0))
        + pb.uint(3, int(str(r[3] or 0))) + pb.uint(4, int(str(r[4] or 0))) + pb.uint(5, int(str(r[5] or 0)))
        + pb.uint(6, int(str(r[6] or 0))) + pb.uint(7, paths[str(r[7] or "")]) + pb.uint(8, int(str(r[2] or 0)))
        for r in mappings))

    names: dict[str, int] = {}
    frame_rows = profile._rows("SELECT id, name, mapping, rel_pc FROM stack_profile_frame ORDER BY id")
    for r in frame_rows:
        n = str(r[1] or "")
        if n not in names:
            names[n] = len(names) + 1
    chunked(_I_FUNCTION_NAMES, (pb.uint(1, i) + pb.string(2, n) for n, i in names.items()))
    chunked(_I_FRAMES, (
        pb.uint(1, int(str(r[0]))) + pb.uint(2, names[str(r[1] or "")]) + pb.uint(3, int(str(r[2])))
        + pb.uint(4, int(str(r[3])))
        for r in frame_rows))
    del frame_rows

    frames = Frames(profile)
    marks = ",".join("?" * len(upids))
    used = profile._rows(f"SELECT DISTINCT callsite_id FROM heap_profile_allocation WHERE upid IN ({marks})",
                         upids) if upids else []
    chunked(_I_CALLSTACKS, (
        pb.uint(1, int(str(r[0]))) + pb.unpacked(2, frames.path(CallsiteId(int(str(r[0])))))
        for r in used))
    if first:
        emit(_I_FUNCTION_NAMES, [])


def _hex_bytes(h: str) -> bytes:
    try:
        return bytes.fromhex(h)
    except ValueError:
        return h.encode()
