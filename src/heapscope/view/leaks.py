"""Leaks: per process, the call paths still holding memory at the final dump.

A process's last dump is taken at its exit (or when the session ends), so
what is unreleased there was never freed. Call paths are those of the merged
tree (functions, not addresses), each with its full stack, largest first.
"""

from __future__ import annotations

from heapscope.estimate import Estimate, view_estimate
from heapscope.records import Record
from heapscope.store.reader import Process, Profile, mapping_basename
from heapscope.store.select import process_state, select_processes
from heapscope.view.tree import build_tree


class Frame(Record, frozen=True):
    function: str
    library: str  # basename of the mapping
    source: str  # "file:line", or "" when unknown


class Leak(Record, frozen=True):
    bytes: int  # unreleased at the final dump
    objects: int  # allocations still live (estimated; exact at interval 1)
    stack: list[Frame]  # leaf (the allocating function) first


class ProcessLeaks(Record, frozen=True):
    process: Process
    ts: int | None  # the state shown (the final dump by default), None without dumps
    reason: str  # which state: "end (dump 2 of 2, exit, ...)", "peak at ..."
    total_bytes: int
    total_objects: int  # estimated allocations (exact at interval 1)
    leaks: list[Leak]  # largest first
    samples: int = 0  # the raw samples behind total_objects
    estimate: Estimate | None = None  # at interval > 1: total_objects as an estimate with its error


def find_leaks(profile: Profile, pid: int | None = None, dump: str | int | None = None) -> list[ProcessLeaks]:
    """Per process (only `pid` when given; UnknownProcessError when there is none such), at the
    state `dump` (store.select.process_state; default: the end, where unfreed means never freed)."""
    out = []
    for p in select_processes(profile, pid):
        st = process_state(profile, p, "end" if dump is None else dump, "space")
        if st is None:
            out.append(ProcessLeaks(p, None, "", 0, 0, []))
            continue
        raw = {cs: v for cs, v in st.values.items() if v.space > 0}
        tree = build_tree(profile, sorted(raw))
        own = tree.desampled_selfs(raw, st.interval)
        space, objects = own["space"], own["objects"]
        leaks = []
        for node in range(len(tree)):
            if space[node] <= 0:
                continue
            stack = [
                Frame(tree.name[i], mapping_basename(tree.map_name[i]),
                      _source(tree.source_file[i], tree.line_number[i]))
                for i in reversed(tree.path(node))
            ]
            leaks.append(Leak(space[node], objects[node], stack))
        leaks.sort(key=lambda x: (-x.bytes, -x.objects, [f.function for f in x.stack]))
        est = view_estimate(raw, "objects", st.interval) if st.interval > 1 else None
        out.append(ProcessLeaks(p, st.ts, st.label, sum(space), sum(objects), leaks,
                                sum(v.objects for v in raw.values()), est))
    return out


def _source(file: str | None, line: int | None) -> str:
    if file is None:
        return ""
    return f"{file}:{line}" if line else file
