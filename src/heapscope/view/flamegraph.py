"""The flamegraph HTML: one self-contained file, data interned and compressed.

The page data is one JSON document, gzip-compressed and base64-encoded into
the HTML; the page inflates it with the browser's DecompressionStream, so the
file needs no network and stays small. Its shape:

    {"mode": "profile" | "diff", "title": str, "views": [...], "strings": [str, ...],
     "processes": [{
        "label": str, "upid": int,
        "depth": [0, 1, 2, 2, ...],        # preorder; node 0 is the synthetic root "all"
        "name": [string index, ...], "lib": [string index, ...],
        "src": [string index or -1, ...],  # "file:line" when stack_profile_symbol has it
        "dumps": [{"ts": int, "label": str, "totals": {view: int},
                   "self": {view: [gap, value, gap, value, ...]}}]}]}

A profile with several heaps (custom heaps) adds

    "heap": int,                            # the heap `processes` is of, opened first
    "heaps": [{"name": str, "processes": [...] or null}]   # null: the opened heap's, in `processes`

with an entry per heap and a last one, "all", with every heap merged; the
page's heap picker swaps `processes`. All heaps share `strings`.

Each tree travels once. A process's graphs of every heap share one tree (flamegraph_heaps.py): the
first entry carries it, and the others name it instead of depth, name, lib and src:

    "tree": [heap, position]                # heaps[heap].processes[position] carries it

and a sum of heaps whose graph of a process is its heaps' graphs added up (flamegraph_heaps.py)
names them, with only its memory series ("memory" without samples):

    "sum": [[heap, position], ...]          # the page adds their dumps, sizes and samples up

and "all processes", when it is its members' trees side by side (all_processes), names them;
its one dump carries only its totals, and the page puts the tree and the values together:

    "parts": [position, ...], "partLib": string index   # each member under a node of its label

`self` lists only the non-zero self values of a view as (index gap, value)
pairs, where each gap is counted from the previous listed node. A parent is
recovered from the depths (the nearest earlier node one level up), so no
parent ids travel. Totals per node are summed in the page.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator
from importlib import resources

from heapscope.estimate import add_values
from heapscope.jsontext import compact
from heapscope.model import VIEWS, CallsiteId, Upid
from heapscope.records import Record, field
from heapscope.store.labels import process_label as named
from heapscope.store.lifetimes import LifeSums, life_sums_by_process
from heapscope.store.peaks_by_heap import Peak
from heapscope.store.reader import DumpValues, Process, Profile, ViewValues, mapping_basename
from heapscope.store.select import dump_position, process_interval, select_processes
from heapscope.store.series import Point, Sample, memory_samples_by_process
from heapscope.view._paths import sparse
from heapscope.view.flamegraph_lifetimes import TEMPORARY, lifetime_values
from heapscope.view.lifetimes import DEFAULT_TEMPORARY_NS
from heapscope.view.memory import Memory, encode_memory, process_memory
from heapscope.view.tree import MergedTree, build_tree


class Snapshot(Record):
    """One point of the timeline: per-node self values of every view."""

    ts: int
    label: str
    self_values: dict[str, list[int]]  # view -> value per node of the tree


class ProcessGraph(Record):
    """What the page shows for one process: its tree and a snapshot per dump."""

    label: str
    upid: int
    tree: MergedTree
    snapshots: list[Snapshot] = field(default_factory=list)
    start: int = -1  # the snapshot the page opens at (-1: the last)
    dumps_left_out: int = 0  # dumps not carried (MAX_DUMPS): the page says so
    t0: int = 0  # the process's start (its timeline's 0 s); 0: unknown, the first snapshot's ts is 0 s
    memory: Memory | None = None  # its chart of memory over time (view/memory.py); None: not in the profile
    sizes: list[int] = field(default_factory=list)  # view/flamegraph_lifetimes.py's flat size histograms
    # "all processes" when it is its members' trees side by side, each under a node of its label
    # (all_processes): the page puts it together from theirs, so it is not carried twice.
    parts: list[ProcessGraph] = field(default_factory=list)
    # A sum of heaps' graph added up from its heaps' graphs of the process (flamegraph_heaps.py):
    # the page adds them up itself, so the sum's values are not carried a second time.
    summed: list[ProcessGraph] = field(default_factory=list)


class Strings:
    """String interning for the payload."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.index)
        return i

    def table(self) -> list[str]:
        return list(self.index)


def process_label(p: Process) -> str:
    return f"pid {p.info.pid} {named(p.info)}"


# A snapshot holds a value per node and view, so a day of -c dumps would not fit in a page;
# past this many a process's timeline keeps this many, evenly spread, plus the peak and the end.
MAX_DUMPS = 100


def kept_dumps(count: int, limit: int, chosen: int | None = None) -> list[int]:
    """The positions (0-based, ascending) of the dumps a timeline carries out of `count`: all when
    `limit` is 0 or not exceeded, else `limit` evenly spread from the first to the last, and
    `chosen` (the dump asked to open at) whatever the spread."""
    if limit <= 0 or count <= limit:
        return list(range(count))
    keep = {count - 1} if limit == 1 else {round(k * (count - 1) / (limit - 1)) for k in range(limit)}
    keep.add(count - 1)
    if chosen is not None:
        keep.add(chosen)
    return sorted(keep)


class DumpStates(Record):
    """A process's running sums at the dumps its graph keeps (kept_dumps), read from its rows."""

    count: int  # its dumps
    chosen: int | None  # the dump asked to open at (process_graph's `dump`), when one was
    states: list[tuple[int, int, dict[CallsiteId, ViewValues]]]  # (dump position, ts, sums) of each kept


def dump_states(profile: Profile, process: Process, dump: str | int | None, max_dumps: int,
                sets: dict[str, list[str] | None] | None = None) -> dict[str, DumpStates]:
    """The DumpStates of `process` in each heap set of `sets` (name -> its heaps; None: every
    heap) from one pass over its rows, read with the profile showing every heap (heap_graphs);
    without `sets`, of the heap the profile shows, under the name "". One pass, by timestamp: the
    running sums go on through the dumps left out, and those of the dumps kept are copied (a
    day of dumps: 100 copies, not 1.7 M rows held)."""
    upid = process.info.upid
    # Each heap's dump times: its dumps' ends and the times of its rows.
    by_heap: dict[str, set[int]] = {}
    if sets is None:
        sets = {"": None}
        rows: Iterator[tuple[int, str, DumpValues]] = ((r.ts, "", r) for r in profile.iter_dump_values(upid))
        by_heap[""] = {d.ts_end for d in profile.dumps(upid)} | set(profile.dump_stamps(upid))
    else:
        rows = profile.iter_dump_values_by_heap(upid)
        for d in profile.dumps(upid):
            by_heap.setdefault(d.heap_name, set()).add(d.ts_end)
        for heap, ts in profile.dump_stamps_by_heap(upid):
            by_heap.setdefault(heap, set()).add(ts)
    plans: list[tuple[str, list[int], set[int], int | None]] = []
    in_sets: dict[str, list[int]] = {}  # a heap -> the sets holding it
    every: list[int] = []  # the sets holding every heap
    for k, (name, heaps) in enumerate(sets.items()):
        stamps = sorted(set().union(*(ts for h, ts in by_heap.items() if heaps is None or h in heaps)))
        chosen = dump_position(dump, len(stamps), process_label(process)) if isinstance(dump, int) else None
        plans.append((name, stamps, set(kept_dumps(len(stamps), max_dumps, chosen)), chosen))
        for heap in heaps if heaps is not None else ():
            in_sets.setdefault(heap, []).append(k)
        if heaps is None:
            every.append(k)
    targets = {heap: every + ks for heap, ks in in_sets.items()}  # a row's heap -> the sets it adds to
    running: list[dict[CallsiteId, ViewValues]] = [{} for _ in plans]
    states: list[list[tuple[int, int, dict[CallsiteId, ViewValues]]]] = [[] for _ in plans]
    # Each set's dumps in the order of their timestamps: a dump's copy takes the rows up to it.
    events = sorted((ts, k, n) for k, (_, stamps_of, _, _) in enumerate(plans) for n, ts in enumerate(stamps_of))
    row = next(rows, None)
    for ts, k, n in events:
        # <=: a live profile's rows are read in a later statement than its dumps, and may have
        # gained a dump since (its rows go to the next dump read, or to none after the last)
        while row is not None and row[0] <= ts:
            _, heap, r = row
            for j in targets.get(heap, every):
                into = running[j]
                o = into.get(r.callsite)
                into[r.callsite] = r.values if o is None else add_values(o, r.values)
            row = next(rows, None)
        if n in plans[k][2]:
            states[k].append((n, ts, dict(running[k])))
    return {name: DumpStates(len(stamps_of), chosen, states[k])
            for k, (name, stamps_of, _, chosen) in enumerate(plans)}


def process_graph(profile: Profile, process: Process, dump: str | int | None = None,
                  python_only: bool = False, max_dumps: int = MAX_DUMPS,
                  lives: LifeSums | None = None,
                  samples: list[tuple[int, int, int | None, int, int]] | None = None,
                  tree: MergedTree | None = None, read: DumpStates | None = None,
                  peaks: dict[int, Peak] | None = None, series: list[Point] | None = None) -> ProcessGraph:
    """The merged tree of a process and its four views at each of its dumps (at most `max_dumps`
    of them, kept_dumps; 0: all) and at its peak (object views de-sampled); the page opens at the
    state `dump` (default: the peak). python_only: native frames left out (view/tree.py build_tree).
    `lives`, `samples`, `series`: its lifetimes' sums, memory samples and memory series when read
    already (profile_graphs).
    `tree`: a tree of this process built already (another heap's, heap_graphs), taken when it holds
    every callsite this graph needs, so that the heaps of a page share one tree. `read`: its
    dump_states in the heap shown, `peaks`: every process's peak_values there, when read already."""
    upid = process.info.upid
    interval = process_interval(profile, process)
    if read is None:
        read = dump_states(profile, process, dump, max_dumps)[""]
    peak = profile.peak_values(upid) if peaks is None else peaks.get(upid)
    states: list[tuple[int, str, dict[CallsiteId, ViewValues]]] = []
    peak_at = chosen_at = -1
    for n, ts, sums in read.states:
        if peak is not None and peak_at < 0 and peak[0] <= ts:
            peak_at = len(states)
            states.append((peak[0], "peak", peak[1]))
        if n == read.chosen:
            chosen_at = len(states)
        states.append((ts, f"dump {n + 1}", sums))
    if peak is not None and peak_at < 0:
        peak_at = len(states)
        states.append((peak[0], "peak", peak[1]))
    chosen = read.chosen
    last = read.states[-1][2] if read.states else {}  # the last dump is always kept
    # Python frames are lines, as report's rows are (a node merging a function's lines
    # showed whichever line came first); native frames merge per function.
    needed = last.keys() | (peak[1].keys() if peak else set())
    if tree is None or not needed <= tree.node_of.keys():
        tree = build_tree(profile, sorted(needed), python_only=python_only, python_lines=True)
    graph = ProcessGraph(process_label(process), upid, tree, t0=max(0, process.info.start_ts))
    graph.dumps_left_out = read.count - len(read.states)
    graph.snapshots = [Snapshot(ts, label, tree.desampled_selfs(values, interval)) for ts, label, values in states]
    graph.memory = process_memory(profile, upid, tree.node_of, samples=samples, series=series)
    if chosen is not None:
        graph.start = chosen_at
    elif dump != "end" and peak_at >= 0:
        graph.start = peak_at
    life = lifetime_values(profile, process, tree, lives)
    if life is not None:  # whole-run figures: the same at every snapshot
        for s in graph.snapshots:
            s.self_values[TEMPORARY] = life[0]
        graph.sizes = life[1]
    return graph


def _encode_tree(t: MergedTree, strings: Strings) -> dict[str, list[int]]:
    """A tree's depth, name, lib and src lists in the payload, the synthetic root first."""
    index = strings.index
    depth = [0] + [d + 1 for d in t.depth]
    # Strings are numbered as first met: names, then libraries, then sources, node by node.
    name = [strings("all")] + [index.setdefault(n, len(index)) for n in t.name]
    lib = [strings("")]
    lib_of: dict[str, int] = {}  # a mapping's path -> its basename's string
    for m in t.map_name:
        k = lib_of.get(m)
        if k is None:
            k = lib_of[m] = strings(mapping_basename(m))
        lib.append(k)
    src = [-1] + [
        -1 if f is None else strings(f if line is None else f"{f}:{line}")
        for f, line in zip(t.source_file, t.line_number, strict=True)
    ]
    return {"depth": depth, "name": name, "lib": lib, "src": src}


def encode_process(graph: ProcessGraph, strings: Strings, tree_at: list[int] | None = None,
                   parts: list[int] | None = None) -> dict[str, object]:
    """One process of the payload; node 0 is a synthetic root above the tree's roots.
    `tree_at`: [heap, process] of the entry that carries this graph's tree already (the page takes
    its depth, name, lib and src); `parts`: for "all processes" made of its members' trees
    (ProcessGraph.parts), their positions in the same list: the page puts its tree and values
    together from theirs, and only its totals travel."""
    if parts is not None:
        s = graph.snapshots[0]
        totals = {v: sum(vals) for v, vals in s.self_values.items()}
        # Each member's node is named by its label; its library, as all_processes's tree gives it.
        return {"label": graph.label, "upid": graph.upid, "parts": parts, "partLib": strings(mapping_basename("")),
                "start": 0, "t0": None, "dumps": [{"ts": s.ts, "label": s.label, "totals": totals}]}
    out: dict[str, object] = {"label": graph.label, "upid": graph.upid}
    if tree_at is not None:
        out["tree"] = tree_at
    else:
        out.update(_encode_tree(graph.tree, strings))
    dumps = []
    done: dict[int, tuple[int, list[int]]] = {}  # by id: the temporary view's list is every snapshot's

    def encoded(vals: list[int]) -> tuple[int, list[int]]:
        got = done.get(id(vals))
        if got is None:
            # Its total, and (gap, value) pairs of its non-zero values (most nodes hold nothing
            # themselves), shifted by one for the root; pairs made in C (view/_selfs.c).
            got = done[id(vals)] = (sum(vals), sparse(vals, 1))
        return got

    for s in graph.snapshots:
        views = {v: encoded(vals) for v, vals in s.self_values.items()}
        dumps.append({
            "ts": s.ts,
            "label": s.label,
            "totals": {v: total for v, (total, _) in views.items()},
            "self": {v: pairs for v, (_, pairs) in views.items()},
        })
    start = graph.start if 0 <= graph.start < len(dumps) else len(dumps) - 1
    t0 = _t0(graph)
    out.update(dumps=dumps, start=start, t0=t0)
    if graph.sizes:
        out["sizes"] = graph.sizes
    if graph.memory is not None:
        # Its times count from the timeline's 0 s too.
        out["memory"] = encode_memory(graph.memory, t0 if t0 is not None else graph.memory.series[0][0])
    return out


def _t0(graph: ProcessGraph) -> int | None:
    """A graph's timeline's 0 s: the process's start, so its peak is drawn when it happened (the
    start is read in clock ticks: a first sample up to 10 ms before it moves 0 s back)."""
    return min([graph.t0, *(s.ts for s in graph.snapshots)]) if graph.t0 > 0 else None


def encode_sum(graph: ProcessGraph, refs: list[list[int]]) -> dict[str, object]:
    """A graph of a sum of heaps whose values are those of the graphs at `refs` ([heap, process]
    each, on one tree, with the same snapshots and 0 s) added up: the page adds their dumps, sizes
    and memory samples; only the sum's memory series travels (thinned from the heaps' sum)."""
    out: dict[str, object] = {"label": graph.label, "upid": graph.upid, "sum": refs}
    t0 = _t0(graph)
    if graph.memory is not None and t0 is not None:
        out["memory"] = encode_memory(Memory(graph.memory.series), t0)
    return out


def left_out_line(graphs: list[ProcessGraph]) -> str:
    """One line on the dumps the page does not carry (MAX_DUMPS), or "" when it carries every one."""
    short = [g for g in graphs if g.dumps_left_out]
    if not short:
        return ""
    n = sum(g.dumps_left_out for g in short)
    return (f"timeline: {n} dump{'' if n == 1 else 's'} of {len(short)} process{'' if len(short) == 1 else 'es'}"
            " left out (the dumps kept evenly spread, with the peak and the end; flamegraph --max-dumps 0: all)")


def payload(graphs: list[ProcessGraph], *, title: str, mode: str = "profile",
            subtitle: str = "", heaps: list[HeapGraphs] | None = None, heap: int = 0) -> dict[str, object]:
    """The page data of `graphs`; with `heaps` (heap_graphs), of every heap, `heaps[heap]` opened
    (its graphs are `graphs`). The subtitle gets left_out_line's line when dumps were left out."""
    note = left_out_line([g for h in heaps for g in h.graphs] if heaps else graphs)
    subtitle = "; ".join(filter(None, (subtitle, note)))
    strings = Strings()
    # Where each process tree went first ([heap, position]): the other heaps' graphs of that
    # process share it (heap_graphs), and the page takes it from there (a build's page: each of
    # ~450k nodes' four lists once, not once per heap).
    trees_at: dict[int, list[int]] = {}
    shares = heaps is not None and len(heaps) > 1
    # Where each graph is in the page ([heap, position]), first where several heaps hold it: a
    # sum's graph names its heaps' (ProcessGraph.summed), or the one it is, and the page adds
    # them up (a build's page: the sum's ~40% of the data).
    placed: dict[int, list[int]] = {}
    for k, h in enumerate(heaps if shares and heaps is not None else ()):
        for position, g in enumerate(h.graphs):
            placed.setdefault(id(g), [k, position])

    def encoded(gs: list[ProcessGraph], at: int) -> list[dict[str, object]]:
        where = {id(g): k for k, g in enumerate(gs)}
        out = []
        for k, g in enumerate(gs):
            parts = [where[id(m)] for m in g.parts if id(m) in where]
            if g.parts and len(parts) == len(g.parts):
                out.append(encode_process(g, strings, parts=parts))
                continue
            refs = [placed.get(id(m), [at]) for m in g.summed or [g]]
            if g.t0 > 0 and all(ref[0] != at for ref in refs):
                out.append(encode_sum(g, refs))
                continue
            first = trees_at.setdefault(id(g.tree), [at, k]) if shares and g.upid >= 0 else None
            out.append(encode_process(g, strings, None if first == [at, k] else first))
        return out

    processes = encoded(graphs, heap)
    temporary = [TEMPORARY] if any(TEMPORARY in s.self_values for g in graphs for s in g.snapshots) else []
    out: dict[str, object] = {"mode": mode, "title": title, "subtitle": subtitle, "views": [*VIEWS, *temporary]}
    if heaps is not None and len(heaps) > 1:
        out["heap"] = heap
        # Each set of graphs is carried once: the opened heap's are `processes`, and a heap whose
        # graphs are another's ("all" when the sum is every heap: heap_graphs) names that heap
        # (a build's page: 67 -> 39 MB of JSON).
        carried = {tuple(map(id, heaps[heap].graphs)): heap}
        entries: list[dict[str, object]] = []
        for k, h in enumerate(heaps):
            same = carried.setdefault(tuple(map(id, h.graphs)), k)
            if k == heap:
                entries.append({"name": h.name, "processes": None})
            elif same != k:
                entries.append({"name": h.name, "processes": None, "same": same})
            else:
                entries.append({"name": h.name, "processes": encoded(h.graphs, k)})
        out["heaps"] = entries
    out["strings"] = strings.table()
    out["processes"] = processes
    return out


class HeapGraphs(Record):
    """The graphs of one heap (name "all": every heap merged)."""

    name: str
    graphs: list[ProcessGraph]


def render_html(data: dict[str, object]) -> str:
    """The page: template, hand-written script and style, and the packed data."""
    import jinja2  # only the commands that write HTML pay for the import

    # Level 4: a 113-process build's 40 MB of JSON in 0.36 s to 6.7 MB; level 6 took 1.2 s (a
    # seventh of the command) for 6.1 MB, level 1 0.2 s for 8.0 MB.
    packed = gzip.compress(compact(data), compresslevel=4, mtime=0)
    templates = resources.files("heapscope.view") / "templates"
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.from_string((templates / "flamegraph.html").read_text(encoding="utf-8"))
    # The memory chart is a partial and a script of its own (memory.html, memchart.js), run after the page's.
    script = "\n".join((templates / f).read_text(encoding="utf-8") for f in ("flamegraph.js", "memchart.js"))
    style = (templates / "flamegraph.css").read_text(encoding="utf-8")
    if "</script" in script.lower() or "</style" in style.lower():
        raise AssertionError("a template asset closes its own tag")
    return page.render(
        title=str(data["title"]),
        script=_markup(script),
        style=_markup(style),
        memory=_markup((templates / "memory.html").read_text(encoding="utf-8")),
        data=base64.b64encode(packed).decode("ascii"),
    )


def _markup(s: str) -> object:
    from markupsafe import Markup

    return Markup(s)


def profile_graphs(profile: Profile, pid: int | None = None, dump: str | int | None = None,
                   merge: str | None = None, python_only: bool = False,
                   max_dumps: int = MAX_DUMPS,
                   lives: dict[int, LifeSums] | None = None,
                   samples: dict[int, list[Sample]] | None = None,
                   trees: dict[int, MergedTree] | None = None,
                   reads: dict[int, DumpStates] | None = None,
                   peaks: dict[int, Peak] | None = None,
                   series: dict[int, list[Point]] | None = None) -> list[ProcessGraph]:
    """A graph per process with at least one dump (only `pid` when given; UnknownProcessError
    when the profile has no such process), largest peak first; with several, an "all processes"
    graph comes first:
    one node per process (per executable with merge="exe"), each at the state it opens at.
    python_only: native frames left out. `lives`, `samples`, `series`: the processes' lifetimes,
    memory samples and memory series (by upid) when read already; `trees`: trees to take, `reads`: their dump_states (by
    upid), `peaks`: their peaks (process_graph)."""
    out = []
    processes = select_processes(profile, pid)
    # Each table read once for all the processes: a read per process scanned a build's tables
    # once for each of its ~110 processes (25 s of a 34 s page).
    upids = [p.info.upid for p in processes]
    if lives is None:
        lives = life_sums_by_process(profile, upids, DEFAULT_TEMPORARY_NS)
    if samples is None:
        samples = memory_samples_by_process(profile, upids)
    for p in processes:
        g = process_graph(profile, p, dump, python_only, max_dumps, lives.get(p.info.upid, NO_LIVES),
                          samples.get(p.info.upid, []), None if trees is None else trees.get(p.info.upid),
                          None if reads is None else reads.get(p.info.upid), peaks,
                          None if series is None else series.get(p.info.upid, []))
        if g.snapshots:
            out.append(g)
    # The page's picker largest first, as report's table: by what each holds where it opens
    # (its peak, else its end), read from its own snapshots (pyenv's shim: bash and env came first).
    out.sort(key=lambda g: -sum(opening(g).self_values["space"]))
    if len(out) > 1 or (merge is not None and out):
        out.insert(0, all_processes(profile, out, merge))
    return out


NO_LIVES = LifeSums({}, {})  # a process without lifetime rows (read only)


def _placed_whole(tree: MergedTree, root: int, m: MergedTree) -> bool:
    """Append the nodes of `m` under `root`, in its order, when no two siblings of it have the
    same name and mapping (all_processes' merge would keep them apart anyway): whether it did.
    A process of its own under its root, as every process is without --merge: its ~450k nodes
    were each looked up and appended one by one, for each of the page's three sets of graphs."""
    if m.lines_apart and len(set(zip(m.parent, m.name, m.map_name, strict=True))) != len(m):
        return False  # siblings that differ by line only (a lines tree): merged one by one
    base, below = len(tree.parent), tree.depth[root] + 1
    tree.parent.extend([root if parent < 0 else parent + base for parent in m.parent])
    tree.depth.extend([d + below for d in m.depth])
    tree.name.extend(m.name)
    tree.map_name.extend(m.map_name)
    tree.source_file.extend(m.source_file)
    tree.line_number.extend(m.line_number)
    return True


def opening(g: ProcessGraph) -> Snapshot:
    """The snapshot the page opens a process's graph at."""
    return g.snapshots[g.start if 0 <= g.start < len(g.snapshots) else -1]


def all_processes(profile: Profile, graphs: list[ProcessGraph], merge: str | None = None) -> ProcessGraph:
    """One tree whose roots are the processes (or executables), each holding its own tree, with
    one snapshot: every process at the state its own graph opens at."""
    by_upid = {p.info.upid: p for p in profile.processes()}
    tree = MergedTree()
    groups: dict[str, list[ProcessGraph]] = {}
    for g in graphs:
        p = by_upid.get(Upid(g.upid))
        key = g.label if merge is None or p is None else (p.info.exe or p.info.name or g.label)
        groups.setdefault(key, []).append(g)
    placed: list[tuple[list[int] | range, Snapshot]] = []  # per member: its nodes' places in `tree`, its values
    t_parent, t_depth, t_name, t_map = tree.parent, tree.depth, tree.name, tree.map_name
    t_src, t_line = tree.source_file, tree.line_number
    merged = False  # a member's node met one already placed
    for key, members in groups.items():
        label = key if merge is None else f"{key} ({len(members)} process{'' if len(members) == 1 else 'es'})"
        root = len(t_parent)
        _append_node(tree, -1, 0, label, "", None, None)
        if len(members) == 1 and _placed_whole(tree, root, members[0].tree):
            placed.append((range(root + 1, len(t_parent)), opening(members[0])))
            continue
        # Merge the members' trees under the root by (parent, name, mapping), like build_tree.
        keys: dict[tuple[int, str, str], int] = {}
        for g in members:
            m = g.tree
            mapped = [0] * len(m)
            for i, (mp, name, map_name) in enumerate(zip(m.parent, m.name, m.map_name, strict=True)):
                parent = root if mp < 0 else mapped[mp]
                k = (parent, name, map_name)
                node = keys.get(k)
                if node is None:
                    node = keys[k] = len(t_parent)
                    t_parent.append(parent)
                    t_depth.append(t_depth[parent] + 1)
                    t_name.append(name)
                    t_map.append(map_name)
                    t_src.append(m.source_file[i])
                    t_line.append(m.line_number[i])
                else:
                    merged = True
                mapped[i] = node
            placed.append((mapped, opening(g)))
    views = [*VIEWS, *([TEMPORARY] if placed and all(TEMPORARY in s.self_values for _, s in placed) else [])]
    selfs: dict[str, list[int]] = {v: [0] * len(t_parent) for v in views}
    for nodes, snap in placed:
        for v in views:  # each view's values added in one pass over the member's nodes
            acc, values = selfs[v], snap.self_values[v]
            if isinstance(nodes, range):  # nodes of its own, in its order: its values as they are
                if len(values) != len(nodes):
                    raise ValueError(f"{len(values)} values for {len(nodes)} nodes")
                acc[nodes.start:nodes.stop] = values
                continue
            for node, value in zip(nodes, values, strict=True):
                if value:
                    acc[node] += value
    label = "all processes" + (" (merged by executable)" if merge else "")
    states = {"its peak" if g.snapshots[g.start].label == "peak"
              else "its end" if g.start in (-1, len(g.snapshots) - 1) else "the dump chosen" for g in graphs}
    what = "each process at " + " or ".join(sorted(states))
    ts = max((g.snapshots[g.start].ts for g in graphs), default=0)
    if not merged:
        whole = merge is None and all(isinstance(nodes, range) for nodes, _ in placed)
        # Each member's nodes went in as they came, in its own preorder (MergedTree's), each
        # under its root: the tree is in preorder already (a build's 3 pages of ~450k nodes
        # spent 0.4 s reordering them to the same order).
        return ProcessGraph(label, -1, tree, [Snapshot(ts, what, selfs)], 0, parts=list(graphs) if whole else [])
    # The nodes were appended parent first but not in preorder when several members merge: reorder.
    order = _preorder(tree)
    new_id = [0] * len(order)
    for pos, old in enumerate(order):
        new_id[old] = pos
    new = MergedTree(
        parent=[-1 if t_parent[old] < 0 else new_id[t_parent[old]] for old in order],
        depth=[t_depth[old] for old in order], name=[t_name[old] for old in order],
        map_name=[t_map[old] for old in order], source_file=[t_src[old] for old in order],
        line_number=[t_line[old] for old in order])
    return ProcessGraph(label, -1, new, [Snapshot(ts, what, {v: [selfs[v][old] for old in order] for v in views})], 0)


def _append_node(tree: MergedTree, parent: int, depth: int, name: str,
                 map_name: str, source_file: str | None, line_number: int | None) -> None:
    tree.parent.append(parent)
    tree.depth.append(depth)
    tree.name.append(name)
    tree.map_name.append(map_name)
    tree.source_file.append(source_file)
    tree.line_number.append(line_number)


def _preorder(tree: MergedTree) -> list[int]:
    children: list[list[int]] = [[] for _ in tree.parent]
    roots: list[int] = []
    for i, p in enumerate(tree.parent):
        (roots if p < 0 else children[p]).append(i)
    out: list[int] = []
    stack = list(reversed(roots))
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(reversed(children[i]))
    return out
