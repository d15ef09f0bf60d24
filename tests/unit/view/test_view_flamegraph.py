"""Which dumps a flamegraph's timeline carries when a process has more than the cap, and the
"all processes" graph that puts every process's tree under a root of its own."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from heapscope.model import VIEWS, Mapping, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.writer import ProfileWriter
from heapscope.view.flamegraph import ProcessGraph, Snapshot, all_processes, kept_dumps
from heapscope.view.tree import MergedTree


def test_every_dump_kept_within_the_cap_or_without_one() -> None:
    assert kept_dumps(5, 5) == [0, 1, 2, 3, 4]
    assert kept_dumps(5, 0) == [0, 1, 2, 3, 4]
    assert kept_dumps(0, 3) == []


def test_past_the_cap_evenly_spread_from_the_first_to_the_last() -> None:
    assert kept_dumps(9, 3) == [0, 4, 8]
    kept = kept_dumps(86_400, 100)  # a day of dumps every second
    assert len(kept) == 100 and kept[0] == 0 and kept[-1] == 86_399
    gaps = {b - a for a, b in pairwise(kept)}
    assert max(gaps) - min(gaps) <= 1


def test_the_dump_asked_for_and_the_end_are_kept_whatever_the_cap() -> None:
    assert kept_dumps(9, 3, chosen=5) == [0, 4, 5, 8]
    assert kept_dumps(9, 1) == [8]
    assert kept_dumps(9, 1, chosen=0) == [0, 8]


def _graph(upid: int, nodes: list[tuple[int, str, int | None]], space: list[int]) -> ProcessGraph:
    """A process's graph: its tree's nodes (parent, name, line) in preorder, one snapshot."""
    tree = MergedTree(parent=[p for p, _, _ in nodes], name=[n for _, n, _ in nodes],
                      map_name=["/bin/p"] * len(nodes), source_file=[None] * len(nodes),
                      line_number=[line for _, _, line in nodes])
    depth: list[int] = []
    for p, _, _ in nodes:
        depth.append(0 if p < 0 else depth[p] + 1)
    tree.depth = depth
    return ProcessGraph(f"pid {upid} p", upid, tree, [Snapshot(5, "peak", {v: list(space) for v in VIEWS})], 0)


def _flat(g: ProcessGraph) -> list[tuple[int, str, int]]:
    return [(p, n, s) for p, n, s in zip(g.tree.parent, g.tree.name, g.snapshots[0].self_values["space"],
                                         strict=True)]


def test_all_processes_in_preorder_whether_trees_merge_or_not(tmp_path: Path) -> None:
    """Each process's tree goes under a root of its own; when no node merges with another, the
    trees, each in preorder already, are kept as they came (no reordering pass); when nodes
    merge (processes of one executable, a function's lines under one parent), the result is
    reordered into preorder, a merged node's values added."""
    w = ProfileWriter(tmp_path / "p.db")
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "/bin/p"))])
    for upid in (1, 2):
        w.add_process(ProcessInfo(Upid(upid), 40 + upid, 1, "p", "p", "/bin/p", 0, 1))
    w.commit()
    w.close()
    a = _graph(1, [(-1, "main", None), (0, "f", None), (1, "h", None), (0, "g", None)], [0, 1, 2, 3])
    b = _graph(2, [(-1, "main", None), (0, "f", None)], [0, 4])
    with open_profile(tmp_path / "p.db") as prof:
        apart = all_processes(prof, [a, b])
        assert _flat(apart) == [(-1, "pid 1 p", 0), (0, "main", 0), (1, "f", 1), (2, "h", 2), (1, "g", 3),
                                (-1, "pid 2 p", 0), (5, "main", 0), (6, "f", 4)]
        assert apart.tree.depth == [0, 1, 2, 3, 2, 0, 1, 2]
        # one executable: b's main > f is a's
        together = all_processes(prof, [a, b], merge="exe")
        assert _flat(together) == [(-1, "p (2 processes)", 0), (0, "main", 0), (1, "f", 5), (2, "h", 2),
                                   (1, "g", 3)]
        # Python's lines of one function, siblings apart in a process's tree, merge here: the
        # second line's child comes after g when appended, and goes back under f
        lines = _graph(1, [(-1, "main", None), (0, "f", 3), (0, "g", None), (0, "f", 4), (3, "k", None)],
                       [0, 1, 2, 3, 4])
        merged = all_processes(prof, [lines])
        assert _flat(merged) == [(-1, "pid 1 p", 0), (0, "main", 0), (1, "f", 4), (2, "k", 4), (1, "g", 2)]


def _one_process(db: Path) -> ProfileWriter:
    """A writer of a profile with one process (upid 1, started at 1 ns, one sample per 4096
    bytes) and callsites 2 and 3 under 1: a test adds its rows, commits and closes it."""
    from heapscope.model import Frame, MappingId, ProcessFlags

    w = ProfileWriter(db)
    w.add_mappings([(1, Mapping("aa", 0, 0, 0x1000, 0x9000, 0, "/usr/bin/p"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main")), (2, Frame(MappingId(1), 0x20, "both")),
                  (3, Frame(MappingId(1), 0x30, "maps"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 1, 1, 3)])
    p = ProcessInfo(Upid(1), pid=42, ppid=1, name="p", cmdline="p", exe="/usr/bin/p", uid=0, start_ts=1)
    w.add_process(p)
    w.set_process_flags(p, ProcessFlags(unwinder="fp", sampling_interval_bytes=4096,
                                        orig_sampling_interval_bytes=4096))
    return w


def test_one_pass_over_the_rows_gives_each_heap_what_it_reads_alone(tmp_path: Path) -> None:
    """dump_states of several heap sets at once (heap_graphs: each process's rows read once for
    every heap and sum of the page) is, set by set, what the profile showing that set reads:
    dumps at times of their own per heap, a callsite in two heaps, kept dumps and a chosen one."""
    from heapscope.store.select import ALL_HEAPS, select_heap
    from heapscope.view.flamegraph import dump_states

    db = tmp_path / "heaps.db"
    w = _one_process(db)
    s = 1_000_000_000
    for k in range(1, 6):  # malloc's dumps at 1-5 s; mmap's at 2 and 4 s, and one of its own at 4.5 s
        w.add_dump(1, (k - 1) * s, k * s, "periodic", [(2, k, 4096 * k)], "libc.malloc")
        if k % 2 == 0:
            w.add_dump(1, (k - 1) * s, k * s, "periodic", [(2, 1, 1 << 20), (3, k, 8192 * k)], "mmap")
    w.add_dump(1, 4 * s, 4 * s + s // 2, "periodic", [(3, -1, -8192)], "mmap")
    w.commit()
    w.close()
    sets: dict[str, list[str] | None] = {"libc.malloc": ["libc.malloc"], "mmap": ["mmap"],
                                         "libc.malloc+mmap": ["libc.malloc", "mmap"], ALL_HEAPS: None}
    with open_profile(db) as prof:
        (process,) = prof.processes()
        for dump, max_dumps in ((None, 0), (None, 2), (2, 2), ("end", 1)):
            select_heap(prof, ALL_HEAPS)
            together = dump_states(prof, process, dump, max_dumps, sets)
            for name in sets:
                select_heap(prof, name)
                alone = dump_states(prof, process, dump, max_dumps)[""]
                assert together[name] == alone, (name, dump, max_dumps)
            assert together["libc.malloc+mmap"].count == 6 and together["mmap"].count == 3


def _two_heaps(db: Path, mmap_callsite: int) -> None:
    """One process with libc.malloc's rows at callsite 2 and mmap's at `mmap_callsite` (2: the
    same callsite), a dump, a peak at one ts, a memory series and samples in each heap."""
    w = _one_process(db)
    s = 1_000_000_000
    # One sample of 100 bytes in malloc's heap, one of 10000 in mmap's: de-sampled as one
    # callsite's two samples, their objects are not those of each heap's sample added
    for heap, cs, size in (("libc.malloc", 2, 100), ("mmap", mmap_callsite, 10_000)):
        w.add_dump(1, 0, 5 * s, "exit", [(cs, 1, size)], heap)
        w.add_peak(1, 2 * s, heap, [(cs, 1, size, 1, size)])
        w.add_memory(1, heap, [s, size, size, size, 3 * s, size, size, size], [cs, s, None, size, 1])
    w.commit()
    w.close()


def test_the_sum_of_heaps_added_up_from_its_heaps_shows_what_reading_it_does(tmp_path: Path) -> None:
    """heap_graphs adds the sum of every heap up from its heaps' graphs when their callsites are
    apart, and reads it when a callsite is in two heaps (its de-sampled values are not the sum of
    each heap's): either way the page shows what the profile showing the sum reads."""
    from page_support import shown

    from heapscope.store.select import select_heap
    from heapscope.view.flamegraph import payload, profile_graphs
    from heapscope.view.flamegraph_heaps import heap_graphs

    objects = {}
    for mmap_callsite in (3, 2):
        db = tmp_path / f"heaps{mmap_callsite}.db"
        _two_heaps(db, mmap_callsite)
        with open_profile(db) as prof:
            heaps, at = heap_graphs(prof)
            assert [h.name for h in heaps] == ["libc.malloc", "mmap", "libc.malloc+mmap", "all"] and at == 2
            page = payload(heaps[at].graphs, title="t")
            select_heap(prof, "libc.malloc+mmap")
            read = payload(profile_graphs(prof), title="t")
        assert shown(page) == shown(read), mmap_callsite
        objects[mmap_callsite] = page["processes"][0]["dumps"][-1]["totals"]["objects"]  # type: ignore[index]
    assert objects[2] != objects[3], objects  # the shared callsite's values could not be added up
