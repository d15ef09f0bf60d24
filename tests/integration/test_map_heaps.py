"""The memory malloc never sees: the mmap and brk heaps (client/maps.c, docs/mmap-heaps.md), under
the real client and producer.

tests/programs/mapheaps.c maps, trims, punches, remaps and unmaps memory and grows and shrinks
the break beside malloc, and prints the interval-1 truth of each path; a Python program, a
program built on jemalloc, GCC's cc1plus and node show that an allocator heapscope counts already
is not counted twice and that a runtime's own mapped heap lands under the stacks that mapped it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Profile, Programs, Recorder, Recording, Views, frame_matches, run_process
from store_support import read_in_c

pytestmark = pytest.mark.timeout(240)

MIB = 1 << 20


def truth(binary: Path) -> dict[tuple[str, str], Views]:
    """(heap, function) -> its views at interval 1 (the `heap` lines, and `truth` lines for
    libc.malloc); the file mapping's under ("file", "map_file"), the threads' under ("threads",
    "churn_maps")."""
    out = subprocess.run([str(binary), "--print-truth"], capture_output=True, text=True, timeout=30, check=True)
    found = {}
    for line in out.stdout.splitlines():
        kind, *rest = line.split()
        if kind == "heap":
            found[(rest[0], rest[1])] = Views(*(int(p) for p in rest[2:]))
        elif kind == "truth":
            found[("libc.malloc", rest[0])] = Views(*(int(p) for p in rest[1:]))
        elif kind in ("file", "threads"):
            found[(kind, rest[0])] = Views(*(int(p) for p in rest[1:]))
    assert found, out.stdout
    return found


def heap_views(profile: Profile, upid: int, heap: str, function: str | None = None) -> Views:
    """The four views of `heap` at the end, over the callsites whose stack holds `function` (all
    of them for None)."""
    rows = profile.query(
        """SELECT callsite_id,
                  SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS alloc_space,
                  SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS alloc_objects,
                  SUM(size) AS space, SUM(count) AS objects
           FROM heap_profile_allocation WHERE upid = ? AND heap_name = ? GROUP BY callsite_id""",
        (upid, heap))
    stacks = profile.stacks(upid)
    total = [0, 0, 0, 0]
    for r in rows:
        if function is None or any(frame_matches(n, function) for n in stacks.get(r["callsite_id"], [])):
            for i, key in enumerate(("alloc_space", "alloc_objects", "space", "objects")):
                total[i] += r[key]
    return Views(*total)


def heap_stacks(profile: Profile, upid: int, heap: str) -> list[list[str]]:
    """The stacks (leaf first) of every callsite of `heap` in upid."""
    ids = {r["callsite_id"] for r in profile.query(
        "SELECT DISTINCT callsite_id FROM heap_profile_allocation WHERE upid = ? AND heap_name = ?", (upid, heap))}
    return [[n or "" for n in names] for cid, names in profile.stacks(upid).items() if cid in ids]


def heaps_of(profile: Profile, upid: int) -> set[str]:
    return {r["heap_name"] for r in profile.query(
        "SELECT DISTINCT heap_name FROM heap_profile_allocation WHERE upid = ?", (upid,))}


def seen_and_rss(profile: Profile, upid: int) -> tuple[int, int]:
    st = profile.stats(upid)
    return st["peak_heap_bytes"], st["peak_rss_bytes"]


def report(db: Path, *args: str) -> str:
    run = run_process([*HEAPSCOPE, "report", str(db), *args], timeout=120)
    assert run.returncode == 0, run.describe()
    return run.stdout.decode()


def test_each_heap_exact_at_interval_1(programs: Programs, record: Recorder) -> None:
    # GIVEN mapheaps, which maps, trims, punches, remaps and unmaps, gives pages back with
    # madvise, grows and shrinks the break, and mallocs small blocks (glibc's brk heap) and
    # 2 MiB ones (glibc maps each)
    binary = programs.path("mapheaps")
    want = truth(binary)
    run = record([binary], interval=1)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = profile.only_upid("mapheaps")
    # THEN every path of every heap is its truth: a cut range freed and its parts booked again,
    # a remapped range moved with its stack, what mremap adds booked at mremap's caller, pages
    # given back (MADV_DONTNEED, MADV_FREE) no longer held until mprotect makes them memory again
    bad = [f"{heap} {fn}: expected {v}, got {heap_views(profile, upid, heap, fn)}"
           for (heap, fn), v in want.items()
           if heap not in ("file", "threads") and heap_views(profile, upid, heap, fn) != v]
    assert not bad, "\n".join([*bad, run.describe(), profile.describe_process(upid)])
    # AND nothing else is in mmap or brk: not glibc's mapped blocks (big_blocks), nor its brk
    # heap, nor heapscope's own tables, nor the file mapping or the PROT_NONE reservation
    for heap in ("mmap", "brk"):
        paths = [v for (h, _), v in want.items() if h == heap]
        expected = Views(*(sum(getattr(v, f) for v in paths) for f in ("alloc_space", "alloc_objects", "space",
                                                                          "objects")))
        assert heap_views(profile, upid, heap) == expected, (heap, profile.describe_process(upid))
    assert heap_views(profile, upid, "libc.malloc", "big_blocks") == want[("libc.malloc", "big_blocks")]
    st = profile.stats(upid)
    assert st["mmap_heap_sequence_gaps"] == st["brk_heap_sequence_gaps"] == st["direct_map_calls"] == 0, st
    assert st["mmap_heap_samples"] == sum(v.alloc_objects for (h, _), v in want.items() if h == "mmap"), st


def test_threads_mapping_and_cutting_at_once(programs: Programs, record: Recorder) -> None:
    # GIVEN 4 threads that each map 2000 x 64 KiB, unmap the first page of each (booked again
    # from the second page on) and then the rest of all but every 100th
    binary = programs.path("mapheaps")
    want = truth(binary)[("threads", "churn_maps")]
    run = record([binary, "threads"], interval=1)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = profile.only_upid("mapheaps")
    # THEN the mmap heap is the truth to the byte: no booking lost or doubled between threads
    assert heap_views(profile, upid, "mmap", "churn_maps") == want, profile.describe_process(upid)
    st = profile.stats(upid)
    assert st["mmap_heap_sequence_gaps"] == st["addr_table_full"] == st["dropped_records"] == 0, st


def test_an_attach_sees_what_is_mapped_after_it(programs: Programs, tmp_path: Path) -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (apt-get install gdb)")
    import signal

    from test_sessions import Proc

    db = tmp_path / "att.db"
    target = Proc([str(programs.path("mapheaps")), "serve"])
    rec = None
    try:
        # GIVEN a running program, attached (record -p: the GOT's mapping calls point at the hooks)
        target.out.wait_for(lambda s: s == "ready", "target start")
        rec = Proc([*HEAPSCOPE, "-v", "record", "-i", "1", "-o", str(db), "-p", str(target.p.pid)])
        rec.err.wait_for(lambda s: "attached to pid" in s, "the attach")
        # WHEN it maps 32 MiB, then unmaps the last 8 MiB of them, and is detached
        target.send("m")
        target.out.wait_for(lambda s: s == "mapped", "the mapping")
        target.send("u")
        target.out.wait_for(lambda s: s == "unmapped", "the unmap")
        rec.p.send_signal(signal.SIGINT)
        assert rec.wait() == 0, "\n".join(rec.err.seen)
        target.send("q")
        assert target.wait() == 0
    finally:
        target.kill()
        if rec is not None:
            rec.kill()
    # THEN the mapping is booked under late_map, cut to its 24 MiB left
    profile = Profile(db)
    upid = profile.only_upid("mapheaps")
    got = heap_views(profile, upid, "mmap", "late_map")
    assert got == Views((32 + 24) * MIB, 2, 24 * MIB, 1), profile.describe_process(upid)


def test_report_shows_every_heap_by_default_and_heap_chooses(programs: Programs, record: Recorder) -> None:
    run = record([programs.path("mapheaps")], interval=1)
    assert run.returncode == 0, run.describe()
    # THEN the default report sums libc.malloc, mmap and brk (disjoint) ...
    text = report(run.db)
    assert "showing: libc.malloc + mmap + brk" in text, text
    assert "map_arena" in text and "grow_brk" in text and "small_blocks" in text, text
    # ... and --heap mmap shows the mapped paths only
    text = report(run.db, "--heap", "mmap")
    assert "map_arena" in text and "small_blocks" not in text and "grow_brk" not in text, text


def test_seen_is_most_of_rss(programs: Programs, record: Recorder) -> None:
    # GIVEN mapheaps at the default interval: 107 MiB of its ~110 MiB RSS in the three heaps
    run = record([programs.path("mapheaps")], interval=None)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    seen, rss = seen_and_rss(profile, profile.only_upid("mapheaps"))
    # THEN "seen" is at least 90% of the RSS, as record's summary says
    assert seen >= 0.9 * rss, (seen, rss, run.describe())
    assert b" of RSS " in run.stderr


def test_file_mappings_with_the_flag(programs: Programs, record: Recorder) -> None:
    binary = programs.path("mapheaps")
    want = truth(binary)[("file", "map_file")]
    run = record([binary], interval=1, extra=["--mmap-files"])
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = profile.only_upid("mapheaps")
    # THEN the private file mapping is in the mmap heap at its page-rounded size (without the
    # flag it is not: test_each_heap_exact_at_interval_1's sums)
    assert heap_views(profile, upid, "mmap", "map_file") == want, profile.describe_process(upid)


def test_direct_system_calls_are_said_as_unseen(programs: Programs, record: Recorder) -> None:
    # GIVEN a program that maps and unmaps 4 MiB through syscall(SYS_mmap), syscall(SYS_munmap)
    run = record([programs.path("mapheaps"), "direct"], interval=1)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = profile.only_upid("mapheaps")
    st = profile.stats(upid)
    # THEN the two calls and the 4 MiB asked for are counted, not booked ...
    assert st["direct_map_calls"] == 2 and st["direct_map_bytes"] == 4 * MIB, st
    assert "mmap" not in heaps_of(profile, upid)
    # ... and said at the end of record and in report's warnings
    assert b"not seen: 2 mmap/munmap/mremap/brk calls made through syscall(2)" in run.stderr, run.describe()
    assert "2 mmap, munmap, mremap and brk calls made through syscall(2)" in report(run.db)


@pytest.mark.parametrize("interval", [1, None])
def test_pymalloc_arenas_not_counted_twice(record: Recorder, tmp_path: Path, interval: int | None) -> None:
    # GIVEN a Python program with 100k small objects (pymalloc's arenas, which it maps itself)
    # and an 8 MiB private anonymous mmap.mmap made in make_map; at the default interval most
    # of its requests take the wrappers' fast path, which calls pymalloc without the guard
    script = tmp_path / "maps.py"
    script.write_text(textwrap.dedent("""\
        import mmap

        def make_objects():
            return [(i, str(i)) for i in range(100_000)]

        def make_map():
            m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE)
            m.write(b"x" * (8 << 20))
            return m

        objects = make_objects()
        kept = make_map()
        """))
    run = record([sys.executable, str(script)], interval=interval, timeout=180)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    rows = profile.query("SELECT DISTINCT upid FROM heap_profile_allocation WHERE heap_name = 'python.pymalloc'")
    assert len(rows) == 1, profile.processes_text()
    upid = int(rows[0]["upid"])
    # THEN the mmap heap had the 8 MiB map under make_map (unmapped by the interpreter's end) ...
    assert heap_views(profile, upid, "mmap", "make_map") == Views(8 * MIB, 1, 0, 0), profile.describe_process(upid)
    # ... and besides it only the interpreter's frame stack (its chunks come from the arena
    # allocator directly, in no other heap, 16 KiB each): pymalloc's arenas are mapped under
    # the guard (the client's arena allocator), their objects booked in python.pymalloc only
    others = [s for s in heap_stacks(profile, upid, "mmap") if "make_map" not in s]
    assert all("_PyThreadState_BumpFramePointerSlow" in s for s in others), others
    arena_frames = ("new_arena", "allocate_from_new_pool", "pymalloc_alloc", "_PyObject_Malloc", "_PyObject_Calloc")
    assert not any(f in arena_frames for s in others for f in s), others
    assert heap_views(profile, upid, "mmap").alloc_space - 8 * MIB <= MIB, profile.describe_process(upid)
    assert heap_views(profile, upid, "python.pymalloc", "make_objects").alloc_space > 4 * MIB
    # ... and what the summary calls seen is not more than the process ever had resident (with
    # the arenas counted twice a 2 M-string script showed 298 MiB seen of an RSS of 188)
    seen, rss = seen_and_rss(profile, upid)
    assert seen < rss * 1.2, (seen, rss)


def _jemalloc() -> str | None:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    return next((line.split("=>")[-1].strip() for line in out.splitlines() if "libjemalloc.so " in line), None)


def test_jemalloc_extents_not_counted_twice(record: Recorder, tmp_path: Path) -> None:
    lib = _jemalloc()
    if lib is None or shutil.which("cc") is None:
        pytest.skip("no libjemalloc.so (apt install libjemalloc-dev) or no C compiler")
    # GIVEN a program linked with jemalloc, whose extents it maps itself through the PLT
    src = tmp_path / "jm.c"
    src.write_text("#include <stdlib.h>\n#include <string.h>\nvoid *volatile keep;\n"
                   "static void blocks(void) { for (int i = 0; i < 64; i++) { keep = malloc(1 << 20);"
                   " memset(keep, 1, 1 << 20); } }\nint main(void) { blocks(); return 0; }\n")
    binary = tmp_path / "jm"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", str(binary), str(src), lib],
                   check=True, timeout=120)
    run = record([binary], interval=1)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = profile.only_upid("jm")
    # THEN its 64 MiB are in libc.malloc once, and jemalloc's mappings are not in the mmap heap
    assert heap_views(profile, upid, "libc.malloc", "blocks").space == 64 * MIB, profile.describe_process(upid)
    assert "mmap" not in heaps_of(profile, upid), heap_stacks(profile, upid, "mmap")


def _major(profile: Profile, name: str) -> int:
    rows = [r for r in profile.processes() if name in (r["name"] or "")]
    assert rows, profile.processes_text()
    return int(max(rows, key=lambda r: seen_and_rss(profile, r["upid"])[1])["upid"])


def _runtime_heap(run: Recording, name: str, frame: str) -> tuple[Profile, int]:
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = _major(profile, name)
    stacks = heap_stacks(profile, upid, "mmap")
    assert any(frame in f for s in stacks for f in s), (frame, stacks[:5])
    return profile, upid


def test_cc1plus_gc_heap_under_its_stacks(record: Recorder, tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    # GIVEN cc1plus parsing the whole standard library (its GC heap is mmap'd: 6% seen before)
    src = tmp_path / "big.cpp"
    src.write_text("#include <bits/stdc++.h>\n")
    run = record(["g++", "-O2", "-fsyntax-only", str(src)], interval=None, timeout=200)
    # THEN its mmap heap holds the GC heap, under ggc's allocation stacks, most of its RSS seen
    profile, upid = _runtime_heap(run, "cc1plus", "ggc_internal_alloc")
    seen, rss = seen_and_rss(profile, upid)
    assert heap_views(profile, upid, "mmap").alloc_space > 0.5 * seen, profile.describe_process(upid)
    assert seen >= 0.75 * rss, (seen, rss)


def test_node_v8_pages_under_their_stacks(record: Recorder) -> None:
    if shutil.which("node") is None:
        pytest.skip("no node")
    # GIVEN node filling 300 arrays of 100k numbers: V8 reserves its pages PROT_NONE and commits
    # them with mprotect (132 of 295 MiB seen before)
    code = "let a=[]; for (let i=0;i<300;i++) a.push(new Array(100000).fill(i)); console.log(a.length)"
    run = record(["node", "-e", code], interval=None, timeout=200)
    # THEN they are in the mmap heap under V8's allocator, and most of the RSS is seen
    profile, upid = _runtime_heap(run, "node", "v8::internal::MemoryAllocator")
    seen, rss = seen_and_rss(profile, upid)
    assert heap_views(profile, upid, "mmap").alloc_space > 0.5 * seen, profile.describe_process(upid)
    assert seen >= 0.8 * rss, (seen, rss)


def test_flamegraph_all_heaps_is_the_default_sum_built_once(programs: Programs, record: Recorder,
                                                            tmp_path: Path) -> None:
    """With malloc, mmap and brk the default heap is their sum, and "all heaps merged" read the
    same rows (each process's heaps peak at one ts): the page built its graphs a second time
    (5.8 of a build's 17.5 s). Now it takes the sum's; when a process's heaps peak at different
    times (a profile written so), "all" is built on its own, and the data are as before."""
    import sqlite3

    from heapscope.store.reader import open_profile
    from heapscope.store.select import ALL_HEAPS, select_heap
    from heapscope.view.flamegraph import payload, profile_graphs
    from heapscope.view.flamegraph_heaps import heap_graphs

    run = record([programs.path("mapheaps")], interval=1)
    assert run.returncode == 0, run.describe()

    def pages(db: Path) -> tuple[bool, bool, object, object]:
        with open_profile(db) as prof:
            heaps, at = heap_graphs(prof)
            by_name = {h.name: h for h in heaps}
            assert list(by_name)[at] == "libc.malloc+mmap+brk" and list(by_name)[-1] == ALL_HEAPS, list(by_name)
            summed, every = by_name["libc.malloc+mmap+brk"], by_name[ALL_HEAPS]
            shared = all(a is b for a, b in zip(summed.graphs, every.graphs, strict=True))
            page_all = payload(every.graphs, title="t")
            select_heap(prof, ALL_HEAPS)  # "all" built on its own, as before
            return prof.peaks_at_one_ts(), shared, page_all, payload(profile_graphs(prof), title="t")

    from page_support import shown as page_shows

    one_ts, shared, page_all, alone = pages(run.db)
    assert one_ts and shared
    # the sum's graphs, added up from its heaps' (their callsites apart), are what "all" built on
    # its own shows; its memory samples are its heaps', in another order
    assert page_shows(page_all) == page_shows(alone)  # type: ignore[arg-type]
    # Each heap's graphs, their memory samples picked out of one read of every heap's and their
    # trees one a process, show what that heap shown alone reads and builds

    with open_profile(run.db) as prof:
        heaps, _ = heap_graphs(prof)
        for h in heaps[:-1]:
            select_heap(prof, h.name)
            assert page_shows(payload(h.graphs, title="t")) == page_shows(payload(profile_graphs(prof), title="t")), \
                h.name
            assert any(g.memory is not None and g.memory.node for g in h.graphs), h.name
    # AND the page carries them once: "all" names the opened sum's, and the picker shows them
    with open_profile(run.db) as prof:
        heaps, at = heap_graphs(prof)
        entries = payload(heaps[at].graphs, title="t", heaps=heaps, heap=at)["heaps"]
    assert entries[-1] == {"name": ALL_HEAPS, "processes": None, "same": at}, entries[-1]  # type: ignore[index]
    from test_views import browser

    html = tmp_path / "maps.html"
    page = run_process([*HEAPSCOPE, "flamegraph", str(run.db), "-o", str(html)], timeout=60)
    assert page.returncode == 0, page.describe()
    shown = "[window.heapscope.heapName(), window.heapscope.rootTotal('space'), window.heapscope.processLabels()]"
    res = browser(tmp_path, html, [
        {"do": "eval", "js": shown},
        {"do": "select", "selector": "#heap", "label": "all heaps merged (pools counted twice)"},
        {"do": "eval", "js": shown},
        {"do": "select", "selector": "#heap", "label": "mmap"},
        {"do": "eval", "js": shown},
    ])
    summed_view, all_view, mmap_view = res["results"][0::2]  # the evals: each step has a result
    assert summed_view[0] == "libc.malloc+mmap+brk" and all_view[0] == ALL_HEAPS, res["results"]
    assert all_view[1:] == summed_view[1:] and summed_view[1] > mmap_view[1] > 0, res["results"]
    # AND the sum the page added up from its heaps' graphs (it carries only their places) is the
    # one made here
    from heapscope.view.flamegraph import opening

    with open_profile(run.db) as prof:
        heaps, at = heap_graphs(prof)
        (summed_graph,) = heaps[at].graphs
        data = payload(heaps[at].graphs, title="t", heaps=heaps, heap=at)
    assert len(data["processes"][0]["sum"]) == 3  # type: ignore[index]
    assert summed_view[1] == sum(opening(summed_graph).self_values["space"]), res["results"]
    # AND the sum's lifetimes, added up from each heap's, are what reading the sum gives; the
    # page's sums (SQLite adding the temporary bytes) are those of the lifetimes read whole
    from heapscope.store.lifetimes import life_sums, life_sums_by_process, merged_life_sums, read_lifetimes_by_process

    with open_profile(run.db) as prof:
        upids = [int(p.info.upid) for p in prof.processes()]
        parts = []
        for name in ("libc.malloc", "mmap", "brk"):
            select_heap(prof, name)
            parts.append(life_sums_by_process(prof, upids, 1_000_000))
            assert parts[-1] == {u: life_sums(lives, 1_000_000)
                                 for u, lives in read_lifetimes_by_process(prof, upids).items()}, name
        select_heap(prof, None)
        read = life_sums_by_process(prof, upids, 1_000_000)
    assert all(parts) and merged_life_sums(parts) == read
    assert any(s.temporary and any(s.temporary.values()) and s.sizes for s in read.values()), read
    # WHEN a process's mmap peak rows are put at another ts
    odd = tmp_path / "odd.db"
    odd.write_bytes(run.db.read_bytes())
    db = sqlite3.connect(odd)
    db.execute("UPDATE heapscope_peak_allocation SET ts = ts - 1 WHERE heap_name = 'mmap'")
    db.commit()
    db.close()
    one_ts, shared, page_all, alone = pages(odd)
    # THEN "all" is built on its own, as before
    assert not one_ts and not shared and page_all == alone


def test_flamegraph_carries_each_tree_once(programs: Programs, record: Recorder, tmp_path: Path) -> None:
    """Every heap's graph of a process takes the tree of all heaps merged, and "all processes" is
    its members' trees side by side: the page carries each tree once (a build's page: 8.9 -> 6.4
    MB) and puts the rest together itself. What it shows is what each heap built alone shows."""
    from page_support import heap_lists, materialized
    from page_support import shown as page_shows
    from test_views import _page_data, browser

    from heapscope.store.reader import open_profile
    from heapscope.store.select import select_heap
    from heapscope.view.flamegraph import payload, profile_graphs
    from heapscope.view.flamegraph_heaps import heap_graphs

    # GIVEN three processes (a shell and two mapheaps), each with malloc, mmap and brk heaps
    exe = programs.path("mapheaps")
    run = record(["/bin/sh", "-c", f"{exe} && {exe}"], interval=1)
    assert run.returncode == 0, run.describe()
    with open_profile(run.db) as prof:
        heaps, at = heap_graphs(prof)
        data = payload(heaps[at].graphs, title="t", heaps=heaps, heap=at)
        alone = {}
        for h in heaps:
            select_heap(prof, h.name)
            alone[h.name] = page_shows(payload(profile_graphs(prof), title="t"))[""]
    lists = heap_lists(data)
    # THEN each process's tree travels once, and every "all processes" as its parts
    distinct = list({id(entries): entries for entries in lists.values()}.values())  # "all" is the sum's
    carried = [p["upid"] for entries in distinct for p in entries if "depth" in p]
    assert sorted(carried) == sorted({p["upid"] for entries in distinct for p in entries if p["upid"] >= 0})
    assert all("parts" in entries[0] and "depth" not in entries[0] for entries in distinct), lists
    assert any("tree" in p for entries in distinct for p in entries)
    # AND every heap shows what it shows built alone
    assert page_shows(data) == alone
    # AND the page puts "all processes" and the trees taken from another heap together as
    # page_support does (names, libraries, depths and values node by node; the command's page
    # has the wrappers folded, so it is read from its file)
    html = tmp_path / "three.html"
    page = run_process([*HEAPSCOPE, "flamegraph", str(run.db), "-o", str(html)], timeout=60)
    assert page.returncode == 0, page.describe()
    data = _page_data(html)
    lists = heap_lists(data)
    got = ("(() => { const D = window.heapscope.data(), p = D.processes[window.heapscope.state.proc];"
           " return [window.heapscope.heapName(), p.depth, p.name.map((i) => D.strings[i]),"
           " p.lib.map((i) => D.strings[i]), p.dumps[0].self]; })()")
    steps: list[dict[str, object]] = []
    for name, entries in lists.items():
        steps.append({"do": "select", "selector": "#heap", "label": name if name != "all" else
                      "all heaps merged (pools counted twice)"})
        for entry in entries:
            steps += [{"do": "select", "selector": "#proc", "label": entry["label"]}, {"do": "eval", "js": got}]
    res = browser(tmp_path, html, steps)
    evals = iter(r for r, s in zip(res["results"], steps, strict=True) if s["do"] == "eval")
    for name, entries in lists.items():
        for entry in entries:
            heap, depth, names, libs, selfs = next(evals)
            want = materialized(data, entry, entries)
            strings = want.get("_strings", data["strings"])
            assert heap == name
            assert depth == want["depth"] and selfs == want["dumps"][0]["self"], (name, entry["label"])
            assert names == [strings[i] for i in want["name"]] and libs == [strings[i] for i in want["lib"]]


def test_flamegraph_reads_each_table_once_for_every_heap(programs: Programs, record: Recorder,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A page of several heaps read a process's delta rows once per heap and once for their sum,
    the peak table once per heap, and checked the lifetime and size tables' types once per heap.
    Each is read (or checked) once now, whatever the heaps."""
    from heapscope.store.reader import open_profile
    from heapscope.view.flamegraph_heaps import heap_graphs

    exe = programs.path("mapheaps")
    run = record(["/bin/sh", "-c", f"{exe} && {exe}"], interval=1)
    assert run.returncode == 0, run.describe()
    statements: list[str] = []
    read_in_c(monkeypatch, statements.append)
    with open_profile(run.db) as prof:
        prof.sql_connection().set_trace_callback(statements.append)
        heaps, _ = heap_graphs(prof)
        processes = len([g for g in heaps[-1].graphs if g.upid >= 0])
    assert len(heaps) == 5 and processes == 3, [h.name for h in heaps]

    def count(table: str, *words: str) -> int:
        return sum(1 for s in statements if f"FROM {table}" in s or f"FROM main.{table}" in s
                   if all(w in s for w in words))

    assert count("heap_profile_allocation", "upid = ?", "size") == processes  # the delta rows: once a process
    assert count("heapscope_peak_allocation", "callsite_id, size") == 1  # the peak rows: once
    # each table's types checked once at most (the size and sample rows as C reads them: none here)
    for table in ("heapscope_callsite_lifetime", "heapscope_callsite_size", "heapscope_memory_sample"):
        assert count(table, "typeof(") <= 1, (table, [s for s in statements if table in s])
    assert count("heapscope_callsite_lifetime", "typeof(") == 1
