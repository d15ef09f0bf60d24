"""Diff: how each call path grew between two snapshots.

The snapshots may come from two profiles (two runs, or two builds, of a
program) or two dumps of one. Addresses differ between runs and builds, so call
paths are matched by their functions: a path is the tuple of (function, where)
from the root down, as in the merged tree, where `where` is

  * the basename of the function's source file when it is known (build
    directories and executable names differ between builds; `foo.c` does not);
  * else the library's basename (`libc.so.6`); JIT code, in each process's own
    `[unknown pid N]`, is `[unknown]` (runs match by the names its perf map gave);
  * else, for the process's own executable, EXECUTABLE, so that `app-1.2` and
    `app-1.3` built without debug info still match by function name.

Sorting these tuples gives the preorder of the union tree, siblings by name,
which is what the flamegraph page expects.
"""

from __future__ import annotations

import os

from heapscope.model import VIEWS, CallsiteId, unknown_code_pid
from heapscope.records import Record
from heapscope.store.labels import process_label
from heapscope.store.reader import Process, Profile, ViewValues, mapping_basename
from heapscope.store.select import dump_position, process_with_dump
from heapscope.view.flamegraph import ProcessGraph, Snapshot
from heapscope.view.tree import NO_PYTHON, MergedTree, build_tree

PathKey = tuple[tuple[str, str], ...]
EXECUTABLE = "[executable]"  # `where` of a frame of the process's executable without a source file


class CallPath(tuple[tuple[str, str], ...]):
    """A PathKey that remembers its hash and its parent's path. A tuple's hash is computed
    again at every lookup, over every frame: a build's ~93k paths, ~40 frames deep, were
    hashed ~15 times each by a diff (most of its time). Equal to the plain tuple."""

    parent: CallPath | None
    _hash: int

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            self._hash = tuple.__hash__(self)
            return self._hash


# The paths made so far, both sides': (id of the parent's CallPath, 0 for a root; its last
# (function, where)) -> the CallPath (read_side's `shared`).
SharedPaths = dict[tuple[int, tuple[str, str]], CallPath]


class Side(Record, frozen=True):
    """One snapshot: where it comes from and each path's own value per view."""

    label: str  # e.g. "before.db pid 12 dump 2/3"
    process: Process
    ts: int
    self_values: dict[PathKey, dict[str, int]]
    sources: dict[PathKey, str]


class Change(Record, frozen=True):
    """The growth of one call path (its own value, not its descendants')."""

    path: PathKey  # root first
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


def pick_process(profile: Profile, pid: int | None, like: Process | None = None) -> Process:
    """The process `pid`, or the one with a dump that held the most, one of `like`'s executable
    first (store.select.process_with_dump)."""
    return process_with_dump(profile, pid, like)


def dump_ts(profile: Profile, process: Process, index: int | None, flag: str = "--dump") -> tuple[int, str]:
    """The ts of dump number `index` (1-based; negative from the end; None = last) and a label.

    Dumps of several heaps at one timestamp count as one."""
    tss = sorted({d.ts_end for d in profile.dumps(process.info.upid)})
    pos = dump_position(index, len(tss), f"{profile.path} pid {process.info.pid}", flag)
    return tss[pos], f"dump {pos + 1}/{len(tss)}"


def read_side(profile: Profile, process: Process, ts: int, label: str, python: bool = False,
              values: dict[CallsiteId, ViewValues] | None = None,
              shared: SharedPaths | None = None) -> Side:
    """One snapshot's paths: the dump at `ts`, or `values` (a peak's) when given; `python`: the
    Python view (native frames folded into the Python function that called them, as report's;
    view.tree.build_tree's python_only). `shared`: the paths met so far, the other side's: a
    path both sides have is then one object, and the diff's lookups compare it by identity."""
    if values is None:
        values = profile.callsite_values(process.info.upid, ts)
    tree = build_tree(profile, sorted(values), python_only=python)
    keys = path_keys(tree, process.info.exe, shared)
    selfs: dict[PathKey, dict[str, int]] = {}
    per_view = tree.desampled_selfs(values, 1)  # every view in one pass, as recorded
    for key, *own in zip(keys, *(per_view[v] for v in VIEWS), strict=True):
        selfs[key] = dict(zip(VIEWS, own, strict=True))
    sources: dict[PathKey, str] = {
        key: f"{tree.source_file[i]}:{tree.line_number[i]}" if tree.line_number[i] else str(tree.source_file[i])
        for i, key in enumerate(keys) if tree.source_file[i]}
    return Side(label, process, ts, selfs, sources)


def path_keys(tree: MergedTree, executable: str = "", shared: SharedPaths | None = None) -> list[CallPath]:
    """Each node's path of (function, where), root first; see the module's docstring. The
    paths already in `shared` are given as they are there; the others are added to it."""
    exe = os.path.basename(executable) if executable else ""
    known: SharedPaths = {} if shared is None else shared
    keys: list[CallPath] = []
    for i in range(len(tree)):
        source = tree.source_file[i]
        if source:
            where = os.path.basename(source)
        elif tree.name[i] == NO_PYTHON:
            where = ""  # the Python view's root of what has no Python frame
        elif unknown_code_pid(tree.map_name[i]) is not None:
            where = "[unknown]"
        else:
            where = mapping_basename(tree.map_name[i])
            if exe and where == exe:
                where = EXECUTABLE
        here = (tree.name[i], where)
        p = tree.parent[i]
        parent = keys[p] if p >= 0 else None
        # A path is its parent's (one object: made before its children) and one more step: found
        # by the two, without hashing or comparing the whole tuple (~40 frames deep).
        slot = (0 if parent is None else id(parent), here)
        key = known.get(slot)
        if key is None:
            key = known[slot] = CallPath(parent + (here,) if parent is not None else (here,))  # + copies in C
            key.parent = parent
        keys.append(key)
    return keys


def changes(a: Side, b: Side, view: str) -> list[Change]:
    """Every path whose own value differs, largest growth first, largest shrink last."""
    out = []
    after_values = b.self_values
    for key, va in a.self_values.items():  # each path looked up once in the other side
        vb = after_values.get(key)
        before, after = va.get(view, 0), 0 if vb is None else vb.get(view, 0)
        if before != after:
            out.append(Change(key, before, after))
    before_values = a.self_values
    out += [Change(key, 0, vb.get(view, 0)) for key, vb in after_values.items()
            if key not in before_values and vb.get(view, 0) != 0]
    out.sort(key=lambda c: (-c.delta, c.path))
    return out


def diff_graph(a: Side, b: Side) -> ProcessGraph:
    """The union tree with two snapshots, before and after, for the flamegraph page."""
    # Each side's paths come in order (path_keys: its tree's preorder): the sort merges two runs
    # (sorting the set's order cost three times as much on a build's ~46k paths).
    keys = sorted(dict.fromkeys([*a.self_values, *b.self_values]))
    index = {k: i for i, k in enumerate(keys)}
    tree = MergedTree()
    sources: list[str | None] = [None] * len(keys)
    for side in (a, b):  # the after side's source where both have one
        for k, src in side.sources.items():
            if src:
                sources[index[k]] = src
    for k in keys:
        parent = getattr(k, "parent", None) if len(k) > 1 else None  # a CallPath's, already made
        tree.parent.append(index[parent if parent is not None else k[:-1]] if len(k) > 1 else -1)
        tree.depth.append(len(k) - 1)
        tree.name.append(k[-1][0])
        tree.map_name.append(k[-1][1])
    tree.source_file = sources
    tree.line_number = [None] * len(keys)
    graph = ProcessGraph(f"{process_label(b.process.info)}: {a.label} → {b.label}", b.process.info.upid, tree)
    for side, label in ((a, "before"), (b, "after")):
        selfs = {v: [0] * len(keys) for v in VIEWS}
        for k, values in side.self_values.items():  # each path looked up once, not once per view
            i = index[k]
            for v in VIEWS:
                selfs[v][i] = values.get(v, 0)
        graph.snapshots.append(Snapshot(side.ts, label, selfs))
    return graph
