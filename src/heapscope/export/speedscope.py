"""speedscope JSON: one `sampled` profile per view (and per process), one dump.

File format: speedscope's `file-format-spec.ts` (docs/exports.md). Each
callsite is one sample, its frames root first, weighted by the view's value;
`bytes` is the unit of the space views and `none` that of the object counts.
`activeProfileIndex` opens the chosen view. Each view is of one state of each
process: its peak for the held views, its end for the allocated ones (--dump
chooses one for all; the file's name says which the chosen view shows);
object counts are de-sampled estimates. The profiles are written first
and `shared.frames` last (JSON objects are unordered), so frames are interned
while the samples stream out.
"""

from __future__ import annotations

import json
import os
from typing import BinaryIO

from heapscope.estimate import desampled_view
from heapscope.export._common import Frames, check_view, chosen_states, process_label, select_processes
from heapscope.export._sink import Sink
from heapscope.model import VIEWS, CallsiteId, FrameId
from heapscope.store.reader import Profile
from heapscope.store.select import State, default_dump

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
UNITS = {"space": "bytes", "alloc_space": "bytes", "objects": "none", "alloc_objects": "none"}
_JOINED = 4096  # samples a write


def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: str | int | None = None) -> None:
    check_view(view)
    processes = select_processes(profile, pid)
    frames = Frames(profile)
    sink = Sink(out)
    frame_index: dict[tuple[str, str, int], int] = {}
    own: dict[FrameId, str] = {}  # a frame's functions' indices, outermost first
    # a callsite's indices, root first: its parent's and its own frame's (a build's ~200k stacks,
    # ~40 frames deep, each walked whole, were most of the export)
    paths: dict[CallsiteId, str] = {}
    stacks: dict[CallsiteId, str] = {}

    def frame_indices(fid: FrameId) -> str:
        got = own.get(fid)
        if got is None:
            idx = []
            for line in frames.chain(fid):
                k = (line.name, line.file, line.line)
                i = frame_index.get(k)
                if i is None:
                    i = frame_index[k] = len(frame_index)
                idx.append(str(i))
            got = own[fid] = ",".join(idx)
        return got

    def stack(cs: CallsiteId) -> str:
        s = stacks.get(cs)
        if s is None:
            todo, body = frames.walk_to(cs, paths)
            for node, fid in reversed(todo):  # root first: indices numbered as met from the root
                body = f"{body},{frame_indices(fid)}" if body is not None else frame_indices(fid)
                paths[node] = body
            s = stacks[cs] = "[" + (body or "") + "]"
        return s

    # Each view at its own default state (the peak for held memory, the end for allocated totals),
    # each state read once: the two views of one state share it (a build's end states, read
    # twice, were a sixth of the export).
    states: dict[str | int, dict[int, State]] = {}
    by_view: dict[str, dict[int, State]] = {}
    for v in VIEWS:
        key = dump if dump is not None else default_dump(v)
        if key not in states:
            states[key] = {p.info.upid: st for p, st in chosen_states(profile, processes, key, v)}
        by_view[v] = states[key]
    chosen = [p for p in processes if p.info.upid in by_view[view]]
    several = len(processes) > 1
    if len(chosen) == 1:
        name = f"{process_label(chosen[0])}, {by_view[view][chosen[0].info.upid].label}"
    else:
        name = os.path.basename(profile.path) + (f" ({len(chosen)} processes)" if several else "")
    sink.text(f'{{"$schema":"{SCHEMA}","version":"0.0.1","name":{json.dumps(name + " heap")},'
              f'"exporter":"heapscope","activeProfileIndex":{VIEWS.index(view)},"profiles":[')
    first_profile = True
    for p in chosen:
        for v in VIEWS:
            st = by_view[v].get(p.info.upid)
            # De-sampling changes the object views only: a byte view's values are as sampled.
            items = [] if st is None else [(cs, w) for cs, w in desampled_view(st.values, v, st.interval) if w > 0]
            title = f"{process_label(p)}: {v}" if several else v
            sink.text(("" if first_profile else ",") + f'{{"type":"sampled","name":{json.dumps(title)},'
                      f'"unit":"{UNITS[v]}","startValue":0,"endValue":{sum(w for _, w in items)},"samples":[')
            first_profile = False
            # Joined a few thousand at a time: a write per sample was a tenth of a build's export.
            for at in range(0, len(items), _JOINED):
                sink.text(("," if at else "") + ",".join([stack(cs) for cs, _ in items[at:at + _JOINED]]))
            sink.text('],"weights":[' + ",".join(str(w) for _, w in items) + "]}")
    sink.text('],"shared":{"frames":[')
    for i, (fname, file, line) in enumerate(frame_index):
        entry: dict[str, object] = {"name": fname}
        if file:
            entry["file"] = file
        if line:
            entry["line"] = line
        sink.text(("," if i else "") + json.dumps(entry, separators=(",", ":")))
    sink.text("]}}\n")
    sink.flush()
