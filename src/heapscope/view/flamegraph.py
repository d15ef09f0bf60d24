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

`self` lists only the non-zero self values of a view as (index gap, value)
pairs, where each gap is counted from the previous listed node. A parent is
recovered from the depths (the nearest earlier node one level up), so no
parent ids travel. Totals per node are summed in the page.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass, field
from importlib import resources

from heapscope.model import VIEWS, CallsiteId
from heapscope.store.reader import DumpValues, Process, Profile, ViewValues, mapping_basename
from heapscope.store.select import select_processes
from heapscope.view.tree import MergedTree, build_tree


@dataclass(slots=True)
class Snapshot:
    """One point of the timeline: per-node self values of every view."""

    ts: int
    label: str
    self_values: dict[str, list[int]]  # view -> value per node of the tree


@dataclass(slots=True)
class ProcessGraph:
    """What the page shows for one process: its tree and a snapshot per dump."""

    label: str
    upid: int
    tree: MergedTree
    snapshots: list[Snapshot] = field(default_factory=list)


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
    return f"pid {p.info.pid} {p.info.name or '?'}"


def process_graph(profile: Profile, process: Process, python_only: bool = False) -> ProcessGraph:
    """The merged tree of a process and its four views at each of its dumps."""
    upid = process.info.upid
    rows = profile.dump_values(upid)
    dump_ts = sorted({d.ts_end for d in profile.dumps(upid)} | {r.ts for r in rows})
    by_ts: dict[int, list[DumpValues]] = {}
    for r in rows:
        by_ts.setdefault(r.ts, []).append(r)
    callsite_ids = sorted({r.callsite for r in rows})
    tree = build_tree(profile, callsite_ids, python_only)
    graph = ProcessGraph(process_label(process), upid, tree)
    running: dict[CallsiteId, list[int]] = {}
    for n, ts in enumerate(dump_ts):
        for r in by_ts.get(ts, ()):
            acc = running.setdefault(r.callsite, [0, 0, 0, 0])
            v = r.values
            acc[0] += v.space
            acc[1] += v.objects
            acc[2] += v.alloc_space
            acc[3] += v.alloc_objects
        values = {cs: ViewValues(*v) for cs, v in running.items()}
        graph.snapshots.append(Snapshot(ts, f"dump {n + 1}", {v: tree.self_values(values, v) for v in VIEWS}))
    return graph


def _sparse(values: list[int]) -> list[int]:
    out: list[int] = []
    last = 0
    for i, v in enumerate(values):
        if v:
            out.append(i - last)
            out.append(v)
            last = i
    return out


def encode_process(graph: ProcessGraph, strings: Strings) -> dict[str, object]:
    """One process of the payload; node 0 is a synthetic root above the tree's roots."""
    t = graph.tree
    depth = [0] + [d + 1 for d in t.depth]
    name = [strings("all")] + [strings(n) for n in t.name]
    lib = [strings("")] + [strings(mapping_basename(m)) for m in t.map_name]
    src = [-1] + [
        -1 if f is None else strings(f if line is None else f"{f}:{line}")
        for f, line in zip(t.source_file, t.line_number, strict=True)
    ]
    dumps = []
    for s in graph.snapshots:
        dumps.append({
            "ts": s.ts,
            "label": s.label,
            "totals": {v: sum(vals) for v, vals in s.self_values.items()},
            # Shift by one for the root, which holds nothing itself.
            "self": {v: _sparse([0, *vals]) for v, vals in s.self_values.items()},
        })
    return {"label": graph.label, "upid": graph.upid, "depth": depth, "name": name, "lib": lib,
            "src": src, "dumps": dumps}


def payload(graphs: list[ProcessGraph], *, title: str, mode: str = "profile",
            subtitle: str = "") -> dict[str, object]:
    strings = Strings()
    processes = [encode_process(g, strings) for g in graphs]
    return {"mode": mode, "title": title, "subtitle": subtitle, "views": list(VIEWS),
            "strings": strings.table(), "processes": processes}


def render_html(data: dict[str, object]) -> str:
    """The page: template, hand-written script and style, and the packed data."""
    import jinja2  # only the commands that write HTML pay for the import

    packed = gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=9, mtime=0)
    templates = resources.files("heapscope.view") / "templates"
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.from_string((templates / "flamegraph.html").read_text(encoding="utf-8"))
    script = (templates / "flamegraph.js").read_text(encoding="utf-8")
    style = (templates / "flamegraph.css").read_text(encoding="utf-8")
    if "</script" in script.lower() or "</style" in style.lower():
        raise AssertionError("a template asset closes its own tag")
    return page.render(
        title=str(data["title"]),
        script=_markup(script),
        style=_markup(style),
        data=base64.b64encode(packed).decode("ascii"),
    )


def _markup(s: str) -> object:
    from markupsafe import Markup

    return Markup(s)


def profile_graphs(profile: Profile, pid: int | None = None, python_only: bool = False) -> list[ProcessGraph]:
    """A graph per process with at least one dump (only `pid` when given; UnknownProcessError
    when the profile has no such process). python_only: native frames left out."""
    out = []
    for p in select_processes(profile, pid):
        g = process_graph(profile, p, python_only)
        if g.snapshots:
            out.append(g)
    return out
