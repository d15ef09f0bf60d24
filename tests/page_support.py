"""What the flamegraph page shows, read from its payload (view/flamegraph.py) in Python.

The payload carries each tree once: a process of another heap names the entry that holds its
tree ("tree": [heap, position]), a sum of heaps added up from its heaps' graphs names them
("sum"), and "all processes" names its members ("parts"); the page puts them together
(flamegraph.js, materialize). `shown` does the same here and keys every
value by its frame's path, so two pages compare by what a user sees, whatever their node order
or the nodes that hold nothing (a tree shared by several heaps has nodes another heap fills).
"""

from __future__ import annotations

from typing import Any

Path = tuple[tuple[str, str], ...]  # (name, library) from the root down: a node's identity


def heap_lists(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each heap's process entries (one heap, "": the page's `processes`), as the page links them."""
    if "heaps" not in data:
        return {"": data["processes"]}
    heaps = data["heaps"]
    lists = [data["processes"] if k == data["heap"] else h["processes"] for k, h in enumerate(heaps)]
    lists = [lists[h["same"]] if h.get("same") is not None else lst for h, lst in zip(heaps, lists, strict=True)]
    return {h["name"]: lst for h, lst in zip(heaps, lists, strict=True)}


def materialized(data: dict[str, Any], entry: dict[str, Any], siblings: list[dict[str, Any]]) -> dict[str, Any]:
    """`entry` with its depth, name, lib and src lists and its dumps' self values, as the page
    fills them in; `siblings`: the list it is in (its parts' positions count there)."""
    if "depth" in entry:
        return entry
    if "tree" in entry:
        h, k = entry["tree"]
        lists = list(heap_lists(data).values())
        q = materialized(data, lists[h][k], lists[h])
        return {**entry, **{f: q[f] for f in ("depth", "name", "lib", "src")}}
    if "sum" in entry:  # its heaps' graphs, added up
        lists = list(heap_lists(data).values())
        qs = [materialized(data, lists[h][k], lists[h]) for h, k in entry["sum"]]
        dumps = []
        for at, d in enumerate(qs[0]["dumps"]):
            totals = {v: sum(q["dumps"][at]["totals"].get(v, 0) for q in qs) for v in d["totals"]}
            selfs: dict[str, list[int]] = {}
            for v in d["totals"]:
                by_node: dict[int, int] = {}
                for q in qs:
                    sp, i = q["dumps"][at]["self"].get(v, []), 0
                    for k in range(0, len(sp), 2):
                        i += sp[k]
                        by_node[i] = by_node.get(i, 0) + sp[k + 1]
                gaps: list[int] = []
                last = 0
                for i in sorted(n for n, value in by_node.items() if value):
                    gaps += (i - last, by_node[i])
                    last = i
                selfs[v] = gaps
            dumps.append({"ts": d["ts"], "label": d["label"], "totals": totals, "self": selfs})
        summed = {**entry, **{f: qs[0][f] for f in ("depth", "name", "lib", "src", "start", "t0")}, "dumps": dumps}
        if any("sizes" in q for q in qs):
            summed["sizes"] = [x for q in qs for x in q.get("sizes", [])]
        if "memory" in entry:
            ms = [q["memory"] for q in qs if "memory" in q]
            summed["memory"] = {**entry["memory"], **{k: [x for m in ms for x in m[k]] for k in SAMPLE_KEYS},
                             "kept": sum(m["kept"] for m in ms), "samples": sum(m["samples"] for m in ms)}
        return summed
    parts = [materialized(data, siblings[k], siblings) for k in entry["parts"]]
    strings: list[str] = data["strings"]
    depth, name, lib, src = [0], [parts[0]["name"][0]], [parts[0]["lib"][0]], [-1]
    views = list(entry["dumps"][0]["totals"])
    absolute: dict[str, list[tuple[int, int]]] = {v: [] for v in views}
    extra: list[str] = []
    for q in parts:
        base = len(depth)
        depth.append(1)
        name.append(len(strings) + len(extra))
        extra.append(q["label"])
        lib.append(entry["partLib"])
        src.append(-1)
        depth += [d + 1 for d in q["depth"][1:]]
        name += q["name"][1:]
        lib += q["lib"][1:]
        src += q["src"][1:]
        at = q["dumps"][q["start"]]
        for v in views:
            i = 0
            sp = at["self"].get(v, [])
            for k in range(0, len(sp), 2):
                i += sp[k]
                absolute[v].append((base + i, sp[k + 1]))
    selfs = {}
    for v, pairs in absolute.items():
        out: list[int] = []
        last = 0
        for i, value in pairs:
            out += (i - last, value)
            last = i
        selfs[v] = out
    dumps = [{**entry["dumps"][0], "self": selfs}]
    return {**entry, "depth": depth, "name": name, "lib": lib, "src": src, "dumps": dumps,
            "_strings": strings + extra}


SAMPLE_KEYS = ("sn", "sa", "sf", "sb", "sw")  # a memory sample's node, times, bytes and weight


def shown(data: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Per heap, per process (label, upid, the dump it opens at): per dump its ts, label, totals
    and per view the non-zero self values by path; and its chart's samples and size histograms,
    their nodes by path."""
    out = {}
    for heap, entries in heap_lists(data).items():
        procs = []
        for entry in entries:
            p = materialized(data, entry, entries)
            strings = p.get("_strings", data["strings"])
            paths: list[Path] = []
            parent_at: list[int] = []
            for i, d in enumerate(p["depth"]):
                del parent_at[d:]
                frame = (strings[p["name"][i]], strings[p["lib"][i]])
                paths.append((*paths[parent_at[-1]], frame) if parent_at else (frame,))
                parent_at.append(i)
            dumps = []
            for dump in p["dumps"]:
                by_view: dict[str, dict[Path, int]] = {}
                for v, sp in dump["self"].items():
                    values: dict[Path, int] = {}
                    i = 0
                    for k in range(0, len(sp), 2):
                        i += sp[k]
                        values[paths[i]] = values.get(paths[i], 0) + sp[k + 1]
                    by_view[v] = values
                dumps.append((dump["ts"], dump["label"], dump["totals"], by_view))
            extras: dict[str, object] = {}
            if "memory" in p:  # the chart, and its samples by the path of their node, in any order
                m = p["memory"]
                extras["memory"] = {**{k: v for k, v in m.items() if k not in SAMPLE_KEYS},
                                    "samples": sorted(zip([paths[i] for i in m["sn"]],
                                                          *(m[k] for k in SAMPLE_KEYS[1:]), strict=True))}
            if "sizes" in p:  # (node, bucket, allocations, bytes) by the node's path
                sz = p["sizes"]
                extras["sizes"] = sorted((paths[sz[k]], *sz[k + 1:k + 4]) for k in range(0, len(sz), 4))
            procs.append((p["label"], p["upid"], p["start"], dumps, extras))
        out[heap] = procs
    return out
