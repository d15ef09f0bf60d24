"""Chrome trace JSON with memory-infra `heaps_v2` dumps (chrome://tracing, catapult).

As Chromium's heap-profiling exporter writes it, one `ph:"v"` event
per heapscope dump, plus catapult's import rules (docs/exports.md):
`version` always present, node and string ids from 1, a `types` map with id 0
= "[unknown]" and a `types` column in every allocator, every allocator dump
with a `guid`, hex strings in `allocators` and `process_mmaps`, maps
incremental per process (a later dump adds only new strings and nodes).

Values. The view picks live (space, objects) or allocated (alloc_space,
alloc_objects) allocations; `sizes`/`counts` are the two of that family.
- With `record --stream-allocations`, every sampled allocation's real size is
  known, and the seed's de-sampling applies exactly: entries are grouped by
  (callsite, allocation size); a size below the sampling rate is scaled by
  `sampling_rate / size` (count and bytes), larger ones are exact.
- Without the stream, the profile holds heapprofd-style estimates: bytes are
  already scaled to real bytes (interval x samples), so they are written as they
  are; counts are de-sampled estimates (heapscope/estimate.py; exact at interval 1).
Every entry is kept by default. With `thresholds=True` (`export
--chrome-thresholds`), as the seed does, entries whose size is under
MIN_SIZE_THRESHOLD *and* whose count is under MIN_COUNT_THRESHOLD are dropped
(the allocator summary keeps their bytes); what was dropped is said through
`warn` and written in the trace's metadata (`heapscope-dropped`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import BinaryIO

from heapscope.estimate import estimate_int
from heapscope.export._common import Frames, check_view, interval_of, pick_dumps, process_label, select_processes
from heapscope.export._sink import Sink
from heapscope.model import CallsiteId
from heapscope.store.reader import Dump, Profile, StreamEvent, ViewValues
from heapscope.store.reader import Process as StoredProcess
from heapscope.store.select import default_dump, process_state

#: --dump all: every dump of each process, not one state.
ALL_DUMPS = "all"
MIN_SIZE_THRESHOLD = 16 * 1024
MIN_COUNT_THRESHOLD = 1024
_LIVE_VIEWS = ("space", "objects")


def _hex(n: float) -> str:
    return format(max(0, int(round(n))), "x")


class _Maps:
    """One process's incremental string and node tables (ids from 1)."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {"[unknown]": 1}
        self.nodes: dict[tuple[int, int], int] = {}  # (name_sid, parent or 0) -> id
        self.new_strings: list[tuple[int, str]] = [(1, "[unknown]")]
        self.new_nodes: list[tuple[int, int, int]] = []
        self.callsite_node: dict[CallsiteId, int] = {}

    def sid(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            i = self.strings[s] = len(self.strings) + 1
            self.new_strings.append((i, s))
        return i

    def node(self, frames: Frames, cs: CallsiteId) -> int:
        n = self.callsite_node.get(cs)
        if n is None:
            parent = 0
            for name in list(frames.names(cs)) or ["[no frames]"]:
                k = (self.sid(name), parent)
                nid = self.nodes.get(k)
                if nid is None:
                    nid = self.nodes[k] = len(self.nodes) + 1
                    self.new_nodes.append((nid, k[0], parent))
                parent = nid
            n = self.callsite_node[cs] = parent
        return n


# Long on purpose: one streamed pass that writes the events in the order the format reads them, with the
# frame and stream tables it shares between them.
def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: str | int | None = None, thresholds: bool = False, min_size: int = MIN_SIZE_THRESHOLD,
           min_count: int = MIN_COUNT_THRESHOLD, warn: Callable[[str], None] | None = None) -> None:
    """`dump`: peak (the default for space and objects, as every view: one dump per process, at
    its peak), end, N (that dump of each process), or all (every dump). `thresholds`: drop
    Chromium's small entries (min_size / min_count); off, every entry is kept."""
    check_view(view)
    if not thresholds:
        min_size = min_count = 0
    dropped_entries = 0
    dropped_bytes = 0.0
    kept_bytes = 0.0
    processes = select_processes(profile, pid)
    frames = Frames(profile)
    sink = Sink(out)
    live = view in _LIVE_VIEWS
    sink.text('{"traceEvents":[\n')
    first = True

    def event(obj: dict[str, object]) -> None:
        nonlocal first
        sink.text(("" if first else ",\n") + json.dumps(obj, separators=(",", ":")))
        first = False

    choice = default_dump(view) if dump is None else dump
    dumps: list[tuple[Dump, StoredProcess]] = []
    at_state: dict[int, dict[CallsiteId, ViewValues]] = {}  # dump id -> values at a peak
    shown: dict[str, str] = {}  # pid -> the state its dumps are
    for p in processes:
        event({"pid": p.info.pid, "ph": "M", "name": "process_name", "args": {"name": p.info.name or "?"}})
        if choice == "peak":
            state = process_state(profile, p, "peak", view)
            if state is not None:
                d = Dump(-len(at_state) - 1, state.ts, state.ts, p.info.upid, "", state.kind)
                at_state[d.id] = state.values
                dumps.append((d, p))
                shown[str(p.info.pid)] = state.label
            continue
        n = None if choice == ALL_DUMPS else -1 if choice == "end" else int(choice)
        picked = pick_dumps(profile.dumps(p.info.upid), n, process_label(p))
        dumps.extend((d, p) for d in picked)
        shown[str(p.info.pid)] = "every dump" if n is None else f"dump {n}" if n > 0 else "end (the last dump)"
    dumps.sort(key=lambda dp: (dp[0].ts_end, dp[0].id))
    maps: dict[int, _Maps] = {}
    streams: dict[int, _Stream | None] = {}
    for dump_no, (d, p) in enumerate(dumps, 1):
        upid = int(p.info.upid)
        m = maps.setdefault(upid, _Maps())
        rate = interval_of(profile, p)
        st = streams.get(upid)
        if st is None and upid not in streams:
            st = streams[upid] = _Stream.open(profile, upid)
        if st is not None:
            groups = st.advance(d.ts_end, live)
            entries = _desample(groups, rate)
        else:
            values = at_state.get(d.id) or profile.callsite_values(upid, d.ts_end)
            # Counts de-sampled as every view does (heapscope/estimate.py); sizes need no correction.
            entries = {cs: ((estimate_int(v.objects, v.space, rate, v.real_space), v.space) if live
                            else (estimate_int(v.alloc_objects, v.alloc_space, rate, v.alloc_real_space),
                                  v.alloc_space))
                       for cs, v in values.items()}
        total_count = sum(c for c, _ in entries.values())
        total_size = sum(s for _, s in entries.values())
        by_node: dict[int, list[float]] = {}
        mapping_ids: set[int] = set()
        for cs, (count, size) in entries.items():
            if count <= 0 and size <= 0:
                continue
            for fid in frames.path(cs):
                mapping_ids.add(frames.mapping.get(fid, 0))
            if size < min_size and count < min_count:
                dropped_entries += 1
                dropped_bytes += max(0.0, size)
                continue
            kept_bytes += max(0.0, size)
            acc = by_node.setdefault(m.node(frames, cs), [0.0, 0.0])
            acc[0] += count
            acc[1] += size
        heaps: dict[str, object] = {
            "version": 1,
            "maps": {
                "strings": [{"id": i, "string": s} for i, s in m.new_strings],
                "nodes": [{"id": i, "name_sid": sid, **({"parent": par} if par else {})}
                          for i, sid, par in m.new_nodes],
                "types": [{"id": 0, "name_sid": 1}],
            },
            "allocators": {"malloc": {
                "counts": [round(c) for c, _ in by_node.values()],
                "sizes": [round(s) for _, s in by_node.values()],
                "types": [0] * len(by_node),
                "nodes": list(by_node),
            }},
        }
        m.new_strings, m.new_nodes = [], []
        guid = f"{p.info.pid:x}{dump_no:08x}"
        dumps_arg = {
            "level_of_detail": "detailed",
            "process_mmaps": {"vm_regions": _regions(profile, mapping_ids)},
            "allocators": {
                "malloc": {"guid": guid + "01", "attrs": {
                    "size": {"type": "scalar", "units": "bytes", "value": _hex(total_size)},
                    "virtual_size": {"type": "scalar", "units": "bytes", "value": _hex(total_size)}}},
                "malloc/allocated_objects": {"guid": guid + "02", "attrs": {
                    "shim_allocated_objects_count": {"type": "scalar", "units": "objects",
                                                     "value": _hex(total_count)},
                    "shim_allocated_objects_size": {"type": "scalar", "units": "bytes",
                                                    "value": _hex(total_size)}}},
            },
            "heaps_v2": heaps,
        }
        event({"pid": p.info.pid, "ph": "v", "name": "periodic_interval", "ts": d.ts_end // 1000,
               "id": str(dump_no), "cat": "disabled-by-default-memory-infra", "args": {"dumps": dumps_arg}})
    meta = '"heapscope-view":' + json.dumps(view) + ',"heapscope-state":' + json.dumps(shown)
    if dropped_entries:
        meta += ',"heapscope-dropped":' + json.dumps(
            {"entries": dropped_entries, "bytes": round(dropped_bytes), "min_size": min_size, "min_count": min_count})
    sink.text('\n],"metadata":{' + meta + "}}\n")
    sink.flush()
    if dropped_entries and warn is not None:
        total = dropped_bytes + kept_bytes
        share = dropped_bytes / total * 100 if total > 0 else 0.0
        warn(f"chrome-json: dropped {dropped_entries:,} entries under Chromium's thresholds (size < {min_size:,} B"
             f" and count < {min_count:,}): {share:.1f}% of the bytes over all dumps; the allocator totals keep them")


def _desample(groups: dict[tuple[CallsiteId, int], int], rate: int) -> dict[CallsiteId, tuple[float, float]]:
    """Seed 003's de-sampling of (callsite, size) -> sample count, summed per callsite."""
    out: dict[CallsiteId, tuple[float, float]] = {}
    for (cs, size), n in groups.items():
        count, total = float(n), float(size) * n
        if 0 < size < rate:
            multiplier = rate / size
            count *= multiplier
            total *= multiplier
        c0, s0 = out.get(cs, (0.0, 0.0))
        out[cs] = (c0 + count, s0 + total)
    return out


class _Stream:
    """A process's heapscope_allocation_stream, replayed up to each dump in sequence order."""

    def __init__(self, events: list[StreamEvent]) -> None:
        self.events = events
        self.pos = 0
        self.live: dict[int, tuple[CallsiteId, int]] = {}  # address -> (callsite, size)
        self.allocated: dict[tuple[CallsiteId, int], int] = {}

    @classmethod
    def open(cls, profile: Profile, upid: int) -> _Stream | None:
        events = profile.allocation_stream(upid)
        return cls(events) if any(e.kind == "malloc" for e in events) else None

    def advance(self, ts: int, live: bool) -> dict[tuple[CallsiteId, int], int]:
        events = self.events
        while self.pos < len(events):
            e = events[self.pos]
            if e.ts is not None and e.ts > ts:
                break
            self.pos += 1
            if e.kind == "malloc":
                k = (e.callsite, e.size)
                self.live[e.address] = k
                self.allocated[k] = self.allocated.get(k, 0) + 1
            else:
                self.live.pop(e.address, None)
        if not live:
            return dict(self.allocated)
        groups: dict[tuple[CallsiteId, int], int] = {}
        for k in self.live.values():
            groups[k] = groups.get(k, 0) + 1
        return groups


def _regions(profile: Profile, mapping_ids: set[int]) -> list[dict[str, object]]:
    if not mapping_ids:
        return []
    out: list[dict[str, object]] = []
    for m in sorted((m for m in profile.mappings() if m.id in mapping_ids), key=lambda m: m.start):
        if m.end <= m.start:
            continue
        region: dict[str, object] = {"sa": _hex(m.start), "sz": _hex(m.end - m.start), "pf": 5, "mf": m.name}
        if m.build_id:
            region["id"] = m.build_id
        out.append(region)
    return out
