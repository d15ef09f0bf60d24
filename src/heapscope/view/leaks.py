"""Leaks: per process, the call paths still holding memory at the final dump.

A process's last dump is taken at its exit (or when the session ends), so
what is unreleased there was never freed. Call paths are those of the merged
tree (functions, not addresses), each with its full stack, largest first.
"""

from __future__ import annotations

from dataclasses import dataclass

from heapscope.store.reader import Process, Profile, mapping_basename
from heapscope.store.select import select_processes
from heapscope.view.tree import build_tree


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    library: str  # basename of the mapping
    source: str  # "file:line", or "" when unknown


@dataclass(frozen=True, slots=True)
class Leak:
    bytes: int  # unreleased at the final dump
    objects: int  # allocations still live
    stack: list[Frame]  # leaf (the allocating function) first


@dataclass(frozen=True, slots=True)
class ProcessLeaks:
    process: Process
    ts: int | None  # the final dump, None without dumps
    reason: str  # why that dump was taken (exit, end, ...)
    total_bytes: int
    total_objects: int
    leaks: list[Leak]  # largest first


def find_leaks(profile: Profile, pid: int | None = None) -> list[ProcessLeaks]:
    """Per process (only `pid` when given; UnknownProcessError when there is none such)."""
    out = []
    for p in select_processes(profile, pid):
        dumps = profile.dumps(p.info.upid)
        if not dumps:
            out.append(ProcessLeaks(p, None, "", 0, 0, []))
            continue
        last = max(dumps, key=lambda d: (d.ts_end, d.id))
        values = {cs: v for cs, v in profile.callsite_values(p.info.upid, last.ts_end).items() if v.space > 0}
        tree = build_tree(profile, sorted(values))
        space = tree.self_values(values, "space")
        objects = tree.self_values(values, "objects")
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
        out.append(ProcessLeaks(p, last.ts_end, last.reason, sum(space), sum(objects), leaks))
    return out


def _source(file: str | None, line: int | None) -> str:
    if file is None:
        return ""
    return f"{file}:{line}" if line else file
