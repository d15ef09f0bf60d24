"""The merged call tree of one process: Perfetto's `experimental_flamegraph` rule.

Callsites are merged by (frame name, mapping name) under the same merged
parent, so two return addresses in one function become one node, while the
same function reached along two paths stays two nodes:

    callsites                          merged tree
    [1] main@0x10 ─ [2] f@0x20 (A)      main ─┬─ f   self = A + B
    [1] main@0x10 ─ [3] f@0x24 (B)            └─ g   self = C
    [4] main@0x14 ─ [5] g@0x30 (C)

A node's self value is the sum of the callsites mapped to it; its
cumulative value adds all its descendants. Nodes are kept in preorder with
siblings sorted by (name, mapping), so ids are stable and a parent always
comes before its children. The tree serves the flamegraph HTML, `diff`,
`report --tree` and `sql --flamegraph`.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from typing import cast

from heapscope.errors import UsageError
from heapscope.estimate import estimate_int
from heapscope.model import VIEWS, CallsiteId, FrameId
from heapscope.records import Record, TupleRecord, field
from heapscope.store.reader import Profile, ViewValues, fallback_frame_name
from heapscope.view._paths import desampled_selfs, merge_paths, preorder

#: The four per-node numbers of experimental_flamegraph, in ViewValues order.
FIELDS = ("space", "objects", "alloc_space", "alloc_objects")


class MergedTree(Record):
    """Nodes in preorder; index i describes node i."""

    parent: list[int] = field(default_factory=list)  # -1 for a root
    depth: list[int] = field(default_factory=list)  # 0 for a root
    name: list[str] = field(default_factory=list)  # function, or `lib+0x..` when unsymbolized
    map_name: list[str] = field(default_factory=list)  # the mapping's file path
    source_file: list[str | None] = field(default_factory=list)  # from stack_profile_symbol
    line_number: list[int | None] = field(default_factory=list)
    node_of: dict[CallsiteId, int] = field(default_factory=dict)  # callsite -> its node
    # Whether two siblings may have the same name and mapping, told apart by their line (a
    # Python frame with python_lines, any with lines): False when build_tree knows they cannot.
    lines_apart: bool = True

    def __len__(self) -> int:
        return len(self.parent)

    def path(self, node: int) -> list[int]:
        """Node ids from the root down to `node`."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]

    def self_values(self, values: dict[CallsiteId, ViewValues], view: str) -> list[int]:
        """Per node: the summed `view` of its callsites in `values`."""
        out = [0] * len(self)
        for cs, v in values.items():
            node = self.node_of.get(cs)
            if node is not None:
                out[node] += v.get(view)
        return out

    def by_value(self, totals: list[int]) -> list[int]:
        """Node ids in preorder with siblings ranked by `totals` (per node, e.g. cumulative()),
        largest first, as a printed tree reads: the branch that holds the most comes first.
        Ties keep the tree's own order (by name), so the output stays stable."""
        children: list[list[int]] = [[] for _ in self.parent]
        roots: list[int] = []
        for i, p in enumerate(self.parent):
            (roots if p < 0 else children[p]).append(i)

        def ranked(ids: list[int]) -> list[int]:
            return sorted(ids, key=lambda i: (abs(totals[i]), -i))  # reversed for the stack

        out: list[int] = []
        stack = ranked(roots)
        while stack:
            i = stack.pop()
            out.append(i)
            stack.extend(ranked(children[i]))
        return out

    def desampled_selfs(self, values: dict[CallsiteId, ViewValues], interval: int) -> dict[str, list[int]]:
        """Per view (VIEWS' order), self_values of estimate.desampled_map(values, interval): one
        pass, without the de-sampled copies (the flamegraph takes this at every dump; at
        interval 1, every view as recorded, for a diff's sides and the tree rows).
        In C (_selfs.c), estimate_int's arithmetic; here when a sum passes 64 bits."""
        node_of = self.node_of
        if type(values) is dict and type(node_of) is dict:  # a subclass could hide its items from C
            got = desampled_selfs(node_of, values, len(self), interval, estimate_int)
            if got is not None:
                return {view: got[FIELDS.index(view)] for view in VIEWS}
        space, objects, alloc_space, alloc_objects = ([0] * len(self) for _ in range(4))
        for cs, v in values.items():
            node = node_of.get(cs)
            if node is None:
                continue
            space[node] += v.space
            alloc_space[node] += v.alloc_space
            if interval > 1:
                objects[node] += estimate_int(v.objects, v.space, interval, v.real_space)
                alloc_objects[node] += estimate_int(v.alloc_objects, v.alloc_space, interval, v.alloc_real_space)
            else:
                objects[node] += v.objects
                alloc_objects[node] += v.alloc_objects
        by_view = {"space": space, "objects": objects, "alloc_space": alloc_space, "alloc_objects": alloc_objects}
        return {view: by_view[view] for view in VIEWS}

    def cumulative(self, self_values: list[int]) -> list[int]:
        """Per node: its own value plus all its descendants' (preorder makes one pass enough)."""
        total = list(self_values)
        for i in range(len(total) - 1, -1, -1):
            p = self.parent[i]
            if p >= 0:
                total[p] += total[i]
        return total


INLINED = " [inlined]"


class FrameFn(TupleRecord):
    """One function of a frame: the frame's own, or one inlined into it."""

    name: str  # inlined functions end with INLINED
    map_name: str
    source_file: str | None
    line_number: int | None


def frame_functions(profile: Profile) -> Callable[[FrameId], tuple[FrameFn, ...]]:
    """frame id -> its functions, outermost (the frame's own) first, then those inlined into it.

    The symbol rows of a frame are innermost first (Perfetto's order); each row's
    line is where that function is at the pc, so the frame's own function gets
    the outermost row's line, not that of a header inlined into it.
    """
    frames = profile.frames()
    symbols = profile.frame_symbols()
    cache = _FUNCTIONS.setdefault(profile, {})

    def get(frame_id: FrameId) -> tuple[FrameFn, ...]:
        got = cache.get(frame_id)
        if got is not None:
            return got
        info = frames.get(frame_id)
        if info is None:
            got = (FrameFn(f"[frame {frame_id}]", "", None, None),)
        else:
            own = info.name or fallback_frame_name(info.mapping_name, info.rel_pc)
            rows = symbols.get(frame_id, [])
            if rows and all(r.name for r in rows):
                outer = rows[-1]
                got = (FrameFn(own, info.mapping_name, outer.source_file or None, outer.line_number or None),
                       *(FrameFn(r.name + INLINED, info.mapping_name, r.source_file or None, r.line_number or None)
                         for r in reversed(rows[:-1])))
            else:
                got = (FrameFn(own, info.mapping_name, None, None),)
        cache[frame_id] = got
        return got

    return get


NO_PYTHON = "[no Python frames]"

# What build_tree merges nodes by: a function's (name, mapping, line or None: not told apart by
# line), interned per profile and kind of tree to a small int, so the merge (_paths.c) hashes ints.
_Key = tuple[str, str, int | None]


class _Steps:
    """Per profile and kind of tree: each frame's node keys and sources, as merge_paths takes
    them (a flat (key, source, key, source, ...) per frame), and the keys' table. Worked out
    once, not once per process: a build's processes share their frames."""

    def __init__(self) -> None:
        self.by_frame: dict[FrameId, tuple[object, ...]] = {}
        self.ids: dict[_Key, int] = {}
        self.keys: list[_Key] = []


# Per profile, what its frames are (frame_functions) and add to a node's key (build_tree, per
# kind of tree).
_FUNCTIONS: weakref.WeakKeyDictionary[Profile, dict[FrameId, tuple[FrameFn, ...]]] = weakref.WeakKeyDictionary()
_STEPS: weakref.WeakKeyDictionary[Profile, dict[tuple[bool, bool, bool, bool], _Steps]] = weakref.WeakKeyDictionary()


# Long on purpose: the merge's inputs and the renumbering in preorder share the node tables.
def build_tree(profile: Profile, callsite_ids: Iterable[CallsiteId], inlined: bool = True,
               python_only: bool = False, lines: bool = False, python_lines: bool = False) -> MergedTree:
    """The merged tree of `callsite_ids` and their ancestors; a frame with inlined calls is
    one node per function (callers first), and its callsite maps to the innermost. Without
    `inlined` (Perfetto's experimental_flamegraph), a frame is one node, its own function's.

    With python_only, native frames are left out (a callsite is merged into the
    node of its nearest Python ancestor); what has no Python frame at all goes
    to one root node, NO_PYTHON. With `lines`, nodes are also told apart by
    their line (`report`'s Python view: a Python frame is a line, as in the
    table; view/report.py); with `python_lines`, only Python frames are (the
    flamegraph, report --tree --native: native frames merge per function, and a
    Python node merging its function's lines would show whichever came first)."""
    callsites = profile.callsites()
    all_functions = frame_functions(profile)
    python_frames = profile.python_frames() if python_only or python_lines else set()
    python = python_frames if python_only else None

    def functions(frame_id: FrameId) -> tuple[FrameFn, ...]:
        fns = all_functions(frame_id)
        if inlined or len(fns) == 1:
            return fns
        # experimental_flamegraph's rule: the frame's name, the source of its first symbol
        # row (the innermost inlined function's), as Perfetto joins symbol_set_id.
        return (fns[0]._replace(source_file=fns[-1].source_file, line_number=fns[-1].line_number),)

    table = _STEPS.setdefault(profile, {}).setdefault((inlined, python_only, lines, python_lines), _Steps())

    def steps(frame_id: FrameId) -> tuple[object, ...]:
        by_line = lines or (python_lines and frame_id in python_frames)
        flat: list[object] = []
        for fn in functions(frame_id):
            key = (fn.name, fn.map_name, fn.line_number if by_line else None)
            k = table.ids.get(key)
            if k is None:
                k = table.ids[key] = len(table.keys)
                table.keys.append(key)
            flat += (k, None if fn.source_file is None else (fn.source_file, fn.line_number))
        got = table.by_frame[frame_id] = tuple(flat)
        return got

    # First pass (_paths.c): each path merged, root first, by (parent node, key); a node's
    # source is the first one met.
    k_parent, k_key, k_src_any, raw_node = merge_paths(callsites, callsite_ids, table.by_frame, steps, python)
    k_src = cast("list[tuple[str, int | None] | None]", k_src_any)
    k_name = [table.keys[k][0] for k in k_key]
    k_map = [table.keys[k][1] for k in k_key]

    if python is not None and any(n < 0 for n in raw_node.values()):
        orphan = len(k_parent)
        k_parent.append(-1)
        k_name.append(NO_PYTHON)
        k_map.append("")
        k_src.append(None)
        raw_node = {cs: orphan if n < 0 else n for cs, n in raw_node.items()}

    # Second pass (_paths.c): renumber in preorder, siblings by (name, mapping), and by line
    # when nodes are lines.
    line_of = [(src[1] or 0) if src is not None else 0 for src in k_src] if lines else None
    order, new_id, parents, depths = preorder(k_parent, k_name, k_map, line_of)
    sources = [k_src[old] for old in order]
    tree = MergedTree(parent=parents, depth=depths, name=[k_name[old] for old in order],
                      map_name=[k_map[old] for old in order],
                      source_file=[src[0] if src else None for src in sources],
                      line_number=[src[1] if src else None for src in sources])
    tree.node_of = {cs: new_id[old] for cs, old in raw_node.items()}
    tree.lines_apart = lines or (python_lines and bool(python_frames))
    return tree


class FlamegraphRow(Record, frozen=True):
    """One row of experimental_flamegraph (docs/profile.md), in its column order."""

    id: int
    ts: int
    upid: int
    profile_type: str
    focus_str: str | None
    depth: int
    name: str
    map_name: str
    count: int
    cumulative_count: int
    size: int
    cumulative_size: int
    alloc_count: int
    cumulative_alloc_count: int
    alloc_size: int
    cumulative_alloc_size: int
    parent_id: int | None
    source_file: str | None
    line_number: int | None


COLUMNS: tuple[str, ...] = tuple(FlamegraphRow.__slots__)


def experimental_flamegraph(
    profile: Profile, ts: int, upid: int, focus_str: str | None = None
) -> list[FlamegraphRow]:
    """What `experimental_flamegraph('native', ts, NULL, upid, NULL, focus_str)` returns.

    Rows with `ts <= ts` of the process, all heaps merged. With `focus_str`
    (view.tree.focus_pattern: a regular expression searched case-insensitively, so a plain word
    is Perfetto's case-insensitive substring), only matching nodes, their
    ancestors and their descendants are kept; cumulative values are summed
    over the kept nodes only and an ancestor that is kept only for its path
    keeps no self value, so every number describes focused memory.
    """
    values = profile.callsite_values(upid, ts)
    tree = build_tree(profile, sorted(values), inlined=False)
    own = tree.desampled_selfs(values, 1)  # every view in one pass, as recorded
    selfs = {f: own[f] for f in FIELDS}
    keep = focus_mask(tree, focus_str) if focus_str else None
    if keep is not None:
        for f in FIELDS:
            selfs[f] = [v if keep[i] == 2 else 0 for i, v in enumerate(selfs[f])]
    cums = {f: tree.cumulative(selfs[f]) for f in FIELDS}
    rows = []
    for i in range(len(tree)):
        if keep is not None and not keep[i]:
            continue
        p = tree.parent[i]
        rows.append(FlamegraphRow(
            id=i, ts=ts, upid=upid, profile_type="native", focus_str=focus_str, depth=tree.depth[i],
            name=tree.name[i], map_name=tree.map_name[i],
            count=selfs["objects"][i], cumulative_count=cums["objects"][i],
            size=selfs["space"][i], cumulative_size=cums["space"][i],
            alloc_count=selfs["alloc_objects"][i], cumulative_alloc_count=cums["alloc_objects"][i],
            alloc_size=selfs["alloc_space"][i], cumulative_alloc_size=cums["alloc_space"][i],
            parent_id=None if p < 0 else p, source_file=tree.source_file[i], line_number=tree.line_number[i],
        ))
    return rows


def focus_pattern(text: str, flag: str = "--focus") -> re.Pattern[str]:
    """What --focus (and --ignore) mean in every command: a regular expression searched in a
    function's name, case-insensitively (a plain word is a substring, as Perfetto's focus_str)."""
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as e:
        raise UsageError(f"{flag} {text!r}: not a regular expression ({e})") from e


def focus_mask(tree: MergedTree, focus_str: str) -> list[int]:
    """Per node: 2 = a match (focus_pattern) or below one, 1 = an ancestor of a match only, 0 = dropped."""
    needle = focus_pattern(focus_str)
    keep = [0] * len(tree)
    for i in range(len(tree)):  # preorder: a parent's mark is final before its children
        p = tree.parent[i]
        if needle.search(tree.name[i]) or (p >= 0 and keep[p] == 2):
            keep[i] = 2
    for i in range(len(tree) - 1, -1, -1):
        p = tree.parent[i]
        if keep[i] and p >= 0 and not keep[p]:
            keep[p] = 1
    return keep


def path_filter(
    tree: MergedTree, focus: re.Pattern[str] | None, ignore: re.Pattern[str] | None
) -> list[bool]:
    """Per node: True if the path root..node has a function matching `focus` (when
    given) and none matching `ignore` (when given). Applied to leaf callsites by
    `report --focus/--ignore`. A Python frame (its mapping is its source file,
    bookkeeping/frames.py) also matches by its file path."""
    ok_focus = [focus is None] * len(tree)
    bad = [False] * len(tree)
    for i in range(len(tree)):
        p = tree.parent[i]
        name = tree.name[i]
        src = tree.source_file[i]
        texts = (name, src) if src is not None and src == tree.map_name[i] else (name,)
        if focus is not None:
            ok_focus[i] = (p >= 0 and ok_focus[p]) or any(focus.search(t) for t in texts)
        if ignore is not None:
            bad[i] = (p >= 0 and bad[p]) or any(ignore.search(t) for t in texts)
    return [f and not b for f, b in zip(ok_focus, bad, strict=True)]
