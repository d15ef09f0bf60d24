"""pprof export: a gzipped `perftools.profiles.Profile` (profile.proto), written as it goes.

Go heap-profile conventions, so `go tool pprof -inuse_space/-alloc_objects/...` work:
sample types alloc_objects/count, alloc_space/bytes, inuse_objects/count,
inuse_space/bytes; `default_sample_type` is the chosen view (inuse_space by
default); `period_type` space/bytes with `period` = the sampling interval.
Values are the profile's estimates (already scaled), as pprof expects.

One sample per callsite at the chosen state of each process (default: its
peak for space/objects, its end for the alloc views; `dump` chooses); object
counts are de-sampled estimates (heapscope/estimate.py). With several
processes, samples carry a numeric label `pid`, and comments name each
process with its state, the largest first; the period is the largest's.

Allocation labels (docs/labels.md): a callsite's samples made under label sets are split
out, one pprof sample per set with a string label per key (Go's convention for profiler
labels, which `go tool pprof -tags` lists and `-tagfocus` filters on), and one sample for
the rest without labels.

Heaps (docs/profile.md, "Heaps"): the profile's current heap selection
(store/select.py; `heapscope export` selects the default heap unless told);
in a profile with several heaps every sample carries a string label `heap`,
and with `heaps` (--heap all) each heap is written in turn, each sample
labelled, so that pprof's tag filters (`-tagfocus heap=...`) pick one.

Locations: `address` is the runtime address of the frame. heapscope's rel_pc
is already taken at return address - 1 (inside the call instruction), which
is what pprof wants for a caller frame, so address = rel_pc + the mapping's
load address, without a further adjustment. Lines come from
stack_profile_symbol (innermost inlined function first, as pprof wants) when
the frame was symbolized with file:line, else one line naming the function;
frames without any name get no line at all, so that pprof symbolizes them
itself from the mapping's file and build id (`pprof -symbolize=local`).
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Sequence
from typing import BinaryIO

from heapscope.estimate import estimate_int
from heapscope.export import _proto as pb
from heapscope.export._common import (
    Frames,
    LabelParts,
    check_view,
    chosen_states,
    interval_of,
    process_label,
    select_processes,
)
from heapscope.export._sink import Sink
from heapscope.model import HEAP_NAME, CallsiteId, FrameId
from heapscope.store.reader import Process, Profile
from heapscope.store.select import ALL_HEAPS, State, heap_names, select_heap

# Profile field numbers (google/pprof proto/profile.proto).
_SAMPLE_TYPE, _SAMPLE, _MAPPING, _LOCATION, _FUNCTION, _STRING = 1, 2, 3, 4, 5, 6
_PERIOD_TYPE, _PERIOD, _COMMENT, _DEFAULT_SAMPLE_TYPE = 11, 12, 13, 14

_SAMPLE_KEY, _VALUE_KEY = pb.key(_SAMPLE, pb.LEN), pb.key(2, pb.LEN)  # Profile.sample, Sample.value (packed)
varint = pb.varint

SAMPLE_TYPES = (("alloc_objects", "count"), ("alloc_space", "bytes"),
                ("inuse_objects", "count"), ("inuse_space", "bytes"))
VIEW_SAMPLE_TYPE = {"alloc_objects": "alloc_objects", "alloc_space": "alloc_space",
                    "objects": "inuse_objects", "space": "inuse_space"}


class _Writer:
    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.strings: dict[str, int] = {}
        self.s("")  # string_table[0] must be ""

    def s(self, text: str) -> int:
        i = self.strings.get(text)
        if i is None:
            i = len(self.strings)
            self.strings[text] = i
            self.sink.write(pb.string(_STRING, text))
        return i

    def field(self, number: int, body: bytes) -> None:
        self.sink.write(pb.blob(number, body))


# Long on purpose: one streamed pass that writes the Profile's fields in order, with the string, location
# and function tables its nested helpers fill as the samples need them.
def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: str | int | None = None, heaps: Sequence[str] | None = None,
           labels: Callable[[Process], Sequence[tuple[str, int | str]]] | None = None,
           trailer: bytes = b"") -> int:
    """With `heaps` (--heap all), each of those heaps in turn (store.select.select_heap), its
    samples labelled `heap`; else the heap the profile shows now (default: the default heap).

    For a profile that leaves its host (heapscope.fleet.pprof_source): `labels(process)` gives
    further labels of every sample of that process (an int is a numeric label; `pid` is not
    written twice) and `trailer` is appended to the encoded Profile (top-level fields).
    Returns the number of samples written."""
    check_view(view)
    processes = select_processes(profile, pid)
    labelled = len(heap_names(profile)) > 1  # several heaps: every sample says its heap
    chosen: list[tuple[Process, State, str]] = []
    if heaps:
        for h in heaps:
            select_heap(profile, h)
            chosen += [(p, st, h) for p, st in chosen_states(profile, processes, dump, view)]
        select_heap(profile, ALL_HEAPS)
    else:
        for p, st in chosen_states(profile, processes, dump, view):
            names = {x.heap_name for x in profile.dumps(p.info.upid)}
            chosen.append((p, st, next(iter(names)) if len(names) == 1 else ""))
    # The header describes the data: the process holding the most names the period.
    weights: dict[int, int] = {}
    for p, st, _h in chosen:
        weights[p.info.upid] = weights.get(p.info.upid, 0) + sum(abs(v.get(view)) for v in st.values.values())
    main_process = max((p for p, _, _ in chosen), key=lambda p: weights[p.info.upid], default=None)
    gz = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0)
    sink = Sink(gz)  # type: ignore[arg-type]
    w = _Writer(sink)

    for name, unit in SAMPLE_TYPES:
        w.field(_SAMPLE_TYPE, pb.opt_uint(1, w.s(name)) + pb.opt_uint(2, w.s(unit)))
    w.field(_PERIOD_TYPE, pb.opt_uint(1, w.s("space")) + pb.opt_uint(2, w.s("bytes")))
    sink.write(pb.uint(_PERIOD, interval_of(profile, main_process)))
    sink.write(pb.uint(_DEFAULT_SAMPLE_TYPE, w.s(VIEW_SAMPLE_TYPE[view])))
    sink.write(pb.uint(_COMMENT, w.s(f"heapscope export of {os.path.basename(profile.path)}")))
    for p, st, h in sorted(chosen, key=lambda c: -weights[c[0].info.upid]):
        sink.write(pb.uint(_COMMENT, w.s(f"{process_label(p)}: {st.label}" + (f" (heap {h})" if h else ""))))

    # The main binaries first, the heaviest process's first: pprof's header names the first
    # mapping (`File: env` for pyenv's python3 shim, whose env starts first).
    ranked = sorted(processes, key=lambda p: -weights.get(p.info.upid, 0))
    mapping_ids = _write_mappings(profile, w, list(dict.fromkeys(p.info.exe for p in ranked if p.info.exe)))
    frames = Frames(profile)
    location_ids: dict[FrameId, bytes] = {}
    function_ids: dict[tuple[str, str], int] = {}
    python_frames = profile.python_frames()

    def function_id(name: str, file: str, python: bool = False) -> int:
        fid = function_ids.get((name, file))
        if fid is None:
            fid = len(function_ids) + 1
            function_ids[(name, file)] = fid
            n = w.s(name)
            # A Python function has no system name. With one equal to its name, pprof takes the name
            # for demangled C++ and strips what is in <...>: `<module>` read `<unknown>`.
            w.field(_FUNCTION, pb.uint(1, fid) + pb.opt_uint(2, n) + pb.opt_uint(3, 0 if python else n)
                    + pb.opt_uint(4, w.s(file) if file else 0))
        return fid

    def location_id(fid: FrameId) -> bytes:
        """The id of frame `fid`'s location, made at its first use, as its varint."""
        got = location_ids.get(fid)
        if got is None:
            lid = len(location_ids) + 1
            got = location_ids[fid] = varint(lid)
            info = frames.info.get(fid)
            mid, address = 0, 0
            if info is not None:
                mid, base = mapping_ids.get(frames.mapping.get(fid, 0), (0, 0))
                address = info.rel_pc + base
            body = pb.uint(1, lid) + pb.opt_uint(2, mid) + pb.opt_uint(3, address)
            if info is not None and (info.name or fid in frames.symbols):
                for line in reversed(frames.chain(fid)):  # innermost first
                    body += pb.blob(4, pb.uint(1, function_id(line.name, line.file, fid in python_frames))
                                    + pb.opt_uint(2, line.line))
            w.field(_LOCATION, body)
        return got

    # A sample's location ids, leaf first, packed: its callsite's leaf location followed by its
    # parent's, so each callsite's bytes are made once from its parent's (a build's ~200k
    # samples of ~30 frames took 0.65 s a varint at a time). Locations are made in the order
    # a sample meets them, leaf to root, as before.
    packed_locs: dict[CallsiteId, bytes] = {}

    def locations(cs: CallsiteId) -> bytes:
        todo, known = frames.walk_to(cs, packed_locs)
        body = known if known is not None else b""
        ids = [location_id(frame) for _node, frame in todo]  # leaf first: new locations in that order
        for (node_id, _frame), lid in zip(reversed(todo), reversed(ids), strict=True):
            body = lid + body
            packed_locs[node_id] = body
        return body  # the leaf's: the loop ends at `cs`

    several = len(processes) > 1
    pid_key = w.s("pid") if several else 0
    heap_key = 0
    samples = 0
    for p, st, name in chosen:
        label = pb.blob(3, pb.uint(1, pid_key) + pb.uint(3, p.info.pid)) if several else b""
        # Custom heaps: a `heap` label with the heap's name, on every sample of a
        # profile with several heaps (and on a lone heap not named libc.malloc).
        if name and (labelled or name != HEAP_NAME):
            heap_key = heap_key or w.s("heap")
            label += pb.blob(3, pb.uint(1, heap_key) + pb.uint(2, w.s(name)))
        for key, value in labels(p) if labels is not None else ():
            if key != "pid" or not several:
                label += pb.blob(3, pb.uint(1, w.s(key)) + (pb.uint(3, value) if isinstance(value, int)
                                                             else pb.uint(2, w.s(value))))
        split = LabelParts(profile, p.info.upid, st.kind, st.ts)
        interval = st.interval
        for cs, whole in st.values.items():
            locs: bytes | None = None
            # One sample per allocation label set (Go's string labels: `go tool pprof -tags`), and
            # one for the rest, each de-sampled on its own (estimate.desampled's figures).
            for pairs, raw in split.parts(cs, whole) if split.split else (((), whole),):
                alloc_objects, objects = raw.alloc_objects, raw.objects
                if interval > 1:
                    alloc_objects = estimate_int(alloc_objects, raw.alloc_space, interval, raw.alloc_real_space)
                    objects = estimate_int(objects, raw.space, interval, raw.real_space)
                if not (alloc_objects or raw.alloc_space or objects or raw.space):
                    continue
                if locs is None:
                    body = locations(CallsiteId(cs))
                    locs = pb.blob(1, body) if body else b""
                tags = b"".join(pb.blob(3, pb.uint(1, w.s(k)) + pb.uint(2, w.s(x))) for k, x in pairs) if pairs \
                    else b""
                # Sample.value packed (field 2), spelled out: a build's ~100k samples
                values = varint(alloc_objects) + varint(raw.alloc_space) + varint(objects) + varint(raw.space)
                sample = locs + _VALUE_KEY + varint(len(values)) + values + label + tags
                sink.write(_SAMPLE_KEY + varint(len(sample)) + sample)
                samples += 1
    sink.write(trailer)
    sink.flush()
    gz.close()
    return samples


def _write_mappings(profile: Profile, w: _Writer, exes: list[str]) -> dict[int, tuple[int, int]]:
    """Write the mappings, main binaries first in the order of `exes`; stored id -> (pprof id,
    runtime address of rel_pc 0)."""
    rank = {exe: k for k, exe in enumerate(exes)}
    rows = sorted(profile.mappings(), key=lambda m: (rank.get(m.name, len(rank)), m.id))
    out: dict[int, tuple[int, int]] = {}
    for m in rows:
        mid, build_id, offset, start, end, load_bias, name = (
            m.id, m.build_id, m.exact_offset, m.start, m.end, m.load_bias, m.name)
        named, symbolized = m.all_named, m.any_symbolized
        if start == 0 and end == 0:
            out[mid] = (0, 0)  # no code behind it (unknown pc, special frames): location without mapping
            continue
        pid_ = len(out) + 1
        out[mid] = (pid_, start - offset - load_bias)
        w.field(_MAPPING, pb.uint(1, pid_) + pb.opt_uint(2, start) + pb.opt_uint(3, end)
                + pb.opt_uint(4, offset) + pb.opt_uint(5, w.s(name)) + pb.opt_uint(6, w.s(build_id))
                + pb.opt_uint(7, int(named)) + pb.opt_uint(8, int(symbolized))
                + pb.opt_uint(9, int(symbolized)) + pb.opt_uint(10, int(symbolized)))
    return out
