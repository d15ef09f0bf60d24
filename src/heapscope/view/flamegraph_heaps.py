"""The flamegraph page's graphs of every heap of a profile, and of the sums the page offers.

A profile of several heaps (libc.malloc with mmap and brk, python.pymalloc) gives the page one
set of graphs per heap, one for their default sum, and "all heaps merged". Each process has one
tree whatever the heap (the page carries it once), made of every callsite any heap's graphs need.
When the default sum is every heap and each process's heaps peak at one ts (as `record` writes
them), the sum's graph of a process is added up from its heaps' graphs, node by node, rather than
read and placed again (a build's page read libc.malloc's rows a second time for it): exact when
no callsite is in two heaps, since a callsite's de-sampled values are not linear in its samples;
otherwise that process's sum is read. "all" is then the sum's graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import cast

from heapscope.model import CallsiteId
from heapscope.store.lifetimes import LifeSums, life_sums_by_process, merged_life_sums
from heapscope.store.peaks_by_heap import Peak, peak_values_by_heap
from heapscope.store.reader import Profile
from heapscope.store.select import ALL_HEAPS, heap_members, heap_names, resolve_heap, select_heap, select_processes
from heapscope.store.series import (
    Point,
    Sample,
    memory_samples_by_heap,
    memory_series_by_heap,
    samples_of,
    series_of,
    thin_series,
)
from heapscope.view._paths import sparse
from heapscope.view.flamegraph import (
    MAX_DUMPS,
    NO_LIVES,
    DumpStates,
    HeapGraphs,
    ProcessGraph,
    Snapshot,
    all_processes,
    dump_states,
    opening,
    process_graph,
    profile_graphs,
)
from heapscope.view.lifetimes import DEFAULT_TEMPORARY_NS
from heapscope.view.memory import MAX_POINTS, Memory
from heapscope.view.tree import MergedTree, build_tree


def heap_graphs(profile: Profile, heap: str | None = None, pid: int | None = None, dump: str | int | None = None,
                merge: str | None = None, python_only: bool = False,
                max_dumps: int = MAX_DUMPS) -> tuple[list[HeapGraphs], int]:
    """The graphs of every heap of the profile (profile_graphs), then of all heaps merged when
    there are several, and the position of the heap to open at: `heap` as --heap takes it
    (store.select.resolve_heap; None: the default heap). Leaves the profile showing that heap.
    One tree a process, whatever the heap (the page carries it once): its heaps' callsites when
    their sum is added up from theirs (the module's docstring), else that sum's, built first."""
    shown = resolve_heap(profile, heap)
    names = heap_names(profile)
    # Each heap's lifetimes, read once: a sum of heaps adds them up (a build's ~380k rows took
    # 1.8 s to read again for libc.malloc+mmap).
    lives: dict[str, dict[int, LifeSums]] = {}
    for name in names:
        select_heap(profile, name)
        lives[name] = life_sums_by_process(profile, [p.info.upid for p in select_processes(profile, pid)],
                                           DEFAULT_TEMPORARY_NS)
    # Every heap's memory samples in one read, each heap or sum taking its own (a build's ~300k
    # rows were read once for each: 0.45 s a read).
    upids = [p.info.upid for p in profile.processes() if pid is None or p.info.pid == pid]
    samples = memory_samples_by_heap(profile, upids)
    points = memory_series_by_heap(profile, upids)  # the same for their series (~0.1 s a build's page)

    sets = names + ([shown] if shown is not None and shown not in names else [])
    # The default sum is every heap already, and each process's heaps peak at one ts (as `record`
    # writes them): "all" reads the same rows, so its graphs are the sum's (a build's page built
    # them again: 5.8 of its 17.5 s).
    summed = next((h for h in sets if set(heap_members(h) or ()) == set(names)), None) if len(names) > 1 else None
    reused = summed if summed is not None and profile.peaks_at_one_ts() else None
    # Each process's rows read once for every heap and sum of the page (a build's ~195k rows were
    # read once a heap and once for their sum: 0.9 s), each set's sums at its dumps kept.
    reads: dict[str, dict[int, DumpStates]] = {}
    peaks: dict[str, dict[int, Peak]] = {}
    if len(names) > 1:
        select_heap(profile, ALL_HEAPS)
        heaps_of: dict[str, list[str] | None] = {h: [h] if h in names else heap_members(h) or [] for h in sets
                                                 if h != reused}  # the sum of every heap: added up below
        if reused is None:
            heaps_of[ALL_HEAPS] = None
        for p in select_processes(profile, pid):
            for name, got in dump_states(profile, p, dump, max_dumps, heaps_of).items():
                reads.setdefault(name, {})[p.info.upid] = got
        peaks = peak_values_by_heap(profile, heaps_of) or {}  # the peak rows read once too

    def graphs(name: str, trees: dict[int, MergedTree] | None) -> list[ProcessGraph]:
        select_heap(profile, name)
        members = [name] if name in names else heap_members(name) or []
        added = (lives[members[0]] if len(members) == 1 else merged_life_sums([lives[m] for m in members])) \
            if members and all(m in lives for m in members) else None
        return profile_graphs(profile, pid, dump, merge, python_only, max_dumps, added,
                              samples_of(samples, members) if members else None, trees, reads.get(name),
                              peaks.get(name), series_of(points, members) if members else None)

    every: list[ProcessGraph] | None = None  # every heap merged
    built: dict[str, list[ProcessGraph]] = {}
    if reused is not None:
        # Each heap's graphs on one tree a process (every callsite any of them needs), then the
        # sum's added up from theirs (_added): a build's page read and placed the rows of
        # libc.malloc again for the sum, ~1/4 of its time.
        shared = _union_trees(profile, [reads.get(h, {}) for h in names], [peaks.get(h, {}) for h in names],
                              python_only)
        built = {h: graphs(h, shared) for h in names}
        select_heap(profile, reused)
        every = _every_heap(profile, pid, dump, merge, python_only, max_dumps, names,
                            [built[h] for h in names], reads, peaks, lives, shared,
                            series_of(points, names), lambda: samples_of(samples, names))
    elif len(names) > 1:
        select_heap(profile, ALL_HEAPS)
        every = profile_graphs(profile, pid, dump, merge, python_only, max_dumps,
                               samples=samples_of(samples, None), reads=reads.get(ALL_HEAPS),
                               peaks=peaks.get(ALL_HEAPS), series=series_of(points, None))
    trees = None if every is None else {g.upid: g.tree for g in every if g.upid >= 0}
    out = [HeapGraphs(h, every if h == reused and every is not None else built[h] if h in built
                      else graphs(h, trees)) for h in sets]
    if every is not None:
        out.append(HeapGraphs(ALL_HEAPS, every))
    if not out:  # no dumps at all
        out.append(HeapGraphs(shown or "", profile_graphs(profile, pid, dump, merge, python_only, max_dumps)))
    at = next((k for k, h in enumerate(out) if h.name == (shown if shown is not None else ALL_HEAPS)), 0)
    select_heap(profile, out[at].name if len(names) > 1 else None)
    return out, at


def _union_trees(profile: Profile, reads: list[dict[int, DumpStates]], peaks: list[dict[int, Peak]],
                 python_only: bool) -> dict[int, MergedTree]:
    """Per process, one tree of every callsite that any of the heaps' graphs needs (process_graph's
    `needed`: its last state's and its peak's), which they and their sum share."""
    needed: dict[int, set[CallsiteId]] = {}
    for by_upid in reads:
        for upid, got in by_upid.items():
            if got.states:
                needed.setdefault(upid, set()).update(got.states[-1][2])
    for by_peak in peaks:
        for upid, peak in by_peak.items():
            needed.setdefault(upid, set()).update(peak[1])
    return {upid: build_tree(profile, sorted(cs), python_only=python_only, python_lines=True)
            for upid, cs in needed.items()}


def _every_heap(profile: Profile, pid: int | None, dump: str | int | None, merge: str | None, python_only: bool,
                max_dumps: int, names: list[str], graphs: list[list[ProcessGraph]],
                reads: dict[str, dict[int, DumpStates]], peaks: dict[str, dict[int, Peak]],
                lives: dict[str, dict[int, LifeSums]], trees: dict[int, MergedTree],
                series: dict[int, list[Point]], read_samples: Callable[[], dict[int, list[Sample]]]
                ) -> list[ProcessGraph]:
    """profile_graphs of the sum of every heap (shown), each process's graph added up from its
    heaps' `graphs` when their callsites are apart (_added), else read (`series`: the sum's memory
    series; `read_samples`: its memory samples, taken only then)."""
    parts: dict[int, list[ProcessGraph]] = {}
    for heap_graphs_ in graphs:
        for part in heap_graphs_:
            if part.upid >= 0:
                parts.setdefault(part.upid, []).append(part)
    samples: dict[int, list[Sample]] | None = None  # the sum's, for a process whose sum is read
    merged: dict[int, LifeSums] | None = None
    out = []
    for p in select_processes(profile, pid):
        upid = p.info.upid
        g: ProcessGraph | None = None
        if upid in parts and _apart([_callsites(reads.get(h, {}).get(upid), peaks.get(h, {}).get(upid))
                                     for h in names]) \
                and _apart([lives[h][upid].sizes.keys() for h in names if upid in lives.get(h, {})]):
            g = _added(parts[upid], series.get(upid, []))
        if g is None:
            if merged is None or samples is None:
                merged = merged_life_sums([lives[h] for h in names if h in lives])
                samples = read_samples()
            g = process_graph(profile, p, dump, python_only, max_dumps, merged.get(upid, NO_LIVES),
                              samples.get(upid, []), trees.get(upid), series=series.get(upid, []))
        if g.snapshots:
            out.append(g)
    out.sort(key=lambda g: -sum(opening(g).self_values["space"]))  # as profile_graphs orders them
    if len(out) > 1 or (merge is not None and out):
        out.insert(0, all_processes(profile, out, merge))
    return out


def _callsites(read: DumpStates | None, peak: Peak | None) -> set[CallsiteId]:
    """The callsites of one heap's rows of a process: those of its last state and of its peak."""
    out = set(read.states[-1][2]) if read is not None and read.states else set()
    if peak is not None:
        out.update(peak[1])
    return out


def _apart(keys: list[Collection[CallsiteId]]) -> bool:
    """Whether no callsite is in two of `keys`: then each callsite's de-sampled values, which
    are not linear in its sampled ones, are those of one heap, and the heaps' node values add up."""
    seen: set[CallsiteId] = set()
    for k in keys:
        if not seen.isdisjoint(k):
            return False
        seen.update(k)
    return True


def _added(parts: list[ProcessGraph], series: list[Point]) -> ProcessGraph | None:
    """The graph of one process in a sum of heaps from its graphs in each (`parts`, on one tree,
    their callsites apart) and the sum's memory series; None when they do not line up (other
    snapshots, another opening): the sum is then read."""
    first = parts[0]
    shape = [(s.ts, s.label) for s in first.snapshots]
    for g in parts[1:]:
        if (g.tree is not first.tree or [(s.ts, s.label) for s in g.snapshots] != shape or g.start != first.start
                or g.dumps_left_out != first.dumps_left_out or g.t0 != first.t0):
            return None
    memory = None
    if series:
        memory = Memory(thin_series(series, MAX_POINTS))
        for g in parts:  # each heap's samples, thinned by its own step (view/memory.py)
            m = g.memory
            if m is not None:
                memory.node += m.node
                memory.alloc_ts += m.alloc_ts
                memory.free_ts += m.free_ts
                memory.size += m.size
                memory.weight += m.weight
                memory.samples_in_profile += m.samples_in_profile
    if len(parts) == 1:
        if (first.memory is None) != (memory is None) or (memory is not None and first.memory is not None
                                                          and memory.series != first.memory.series):
            return None
        return first
    done: dict[tuple[int, ...], list[int]] = {}  # by the lists added: the temporary view's is every snapshot's
    snapshots = []
    for k, s in enumerate(first.snapshots):
        values: dict[str, list[int]] = {}
        for view, vals in s.self_values.items():
            lists = [vals, *(g.snapshots[k].self_values.get(view) for g in parts[1:])]
            key = tuple(map(id, lists))
            got = done.get(key)
            if got is None:
                if any(v is None for v in lists):
                    return None
                got = done[key] = _plus(cast("list[list[int]]", lists))
            values[view] = got
        snapshots.append(Snapshot(s.ts, s.label, values))
    return ProcessGraph(first.label, first.upid, first.tree, snapshots=snapshots, start=first.start,
                        dumps_left_out=first.dumps_left_out, t0=first.t0, memory=memory,
                        sizes=[x for g in parts for x in g.sizes], summed=parts)


def _plus(lists: list[list[int]]) -> list[int]:
    """The sum of equally long lists, element by element: the first copied, the others' non-zero
    values added (a heap beside malloc's, mmap's, holds a few dozen nodes of a compiler's ~4k)."""
    out = list(lists[0])
    for other in lists[1:]:
        pairs = sparse(other, 0)
        i = 0
        for k in range(0, len(pairs), 2):
            i += pairs[k]
            out[i] += pairs[k + 1]
    return out
