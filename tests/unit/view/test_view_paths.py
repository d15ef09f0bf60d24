"""view._paths: the views' per-callsite loops in C, on small trees whose answers are worked
out by hand. Their callers (view/tree.py build_tree, view/report.py function_rows) are
tested on real profiles in test_view_tree.py and test_view_report.py.

    callsites              frames (function ids, outermost first; 12 has g inlined into f)
    [1] 10 main            10 -> main
    [2] 11 parse           11 -> parse
    [3] 12 f, g inlined    12 -> f, g [inlined]
    [4] 11 parse (in [2])  13 -> emit
    [5] 13 emit
    [6] 99 (dangling parent 77: a root)
"""

from __future__ import annotations

from typing import cast

import pytest

from heapscope.model import CallsiteId, FrameId
from heapscope.view._paths import function_totals, merge_paths, preorder

CALLSITES = cast("dict[CallsiteId, tuple[CallsiteId | None, FrameId]]", {
    1: (None, 10), 2: (1, 11), 3: (2, 12), 4: (2, 11), 5: (1, 13), 6: (77, 99)})
MAIN, PARSE, F, G, EMIT, OTHER = range(6)
FNS = cast("dict[FrameId, tuple[int, ...]]",
           {10: (MAIN, -1), 11: (PARSE, 0), 12: (F, 1, G, 2), 13: (EMIT, -1), 99: (OTHER, -1)})


def ids(*ints: int) -> list[CallsiteId]:
    return [CallsiteId(i) for i in ints]


def frames(*ints: int) -> set[FrameId]:
    return {FrameId(i) for i in ints}


def flat_steps(frame: FrameId) -> tuple[object, ...]:
    """A frame's node keys (function ids as keys) and sources, flat."""
    pairs = FNS[frame]
    return tuple(x for k in range(0, len(pairs), 2) for x in (pairs[k], f"src{pairs[k + 1]}"))


def test_merge_paths_merges_shared_prefixes_root_first() -> None:
    asked: list[int] = []
    cache: dict[FrameId, tuple[object, ...]] = {}

    def steps(frame: FrameId) -> tuple[object, ...]:
        asked.append(frame)
        got = cache[frame] = flat_steps(frame)
        return got

    parents, keys, sources, node_of = merge_paths(CALLSITES, ids(3, 4, 5, 6), cache, steps, None)
    # main, parse, f, g (leaf 3), parse under parse (4), emit (5), the dangling one (6)
    assert keys == [MAIN, PARSE, F, G, PARSE, EMIT, OTHER]
    assert parents == [-1, 0, 1, 2, 1, 0, -1]
    assert sources == ["src-1", "src0", "src1", "src2", "src0", "src-1", "src-1"]
    # A callsite maps to its innermost function's node; ancestors were merged on the way.
    assert node_of == {1: 0, 2: 1, 3: 3, 4: 4, 5: 5, 6: 6}
    assert list(node_of) == [1, 2, 3, 4, 5, 6]  # the order the Python loop filled it in
    assert sorted(asked) == [10, 11, 12, 13, 99]  # each frame asked for once


def test_merge_paths_keeps_a_nodes_first_source_and_python_frames_only() -> None:
    cache = cast("dict[FrameId, tuple[object, ...]]", {
        10: (MAIN, None), 11: (PARSE, None), 12: (F, "f.c:3", G, None), 13: (EMIT, "e.c:1"), 99: (OTHER, None)})
    # Two callsites of one function under one parent are one node, whose source is the first
    # not-None one met.
    callsites = {**CALLSITES, CallsiteId(7): (CallsiteId(1), FrameId(14))}
    cache[FrameId(14)] = (EMIT, "e.c:9")
    _, keys, sources, node_of = merge_paths(callsites, ids(7, 5), cache, cache.__getitem__, None)
    assert keys == [MAIN, EMIT] and sources == [None, "e.c:9"] and node_of == {1: 0, 7: 1, 5: 1}
    # Only frames 11 and 13 kept: what has none above is -1, the caller's NO_PYTHON.
    parents, keys, _, node_of = merge_paths(CALLSITES, ids(3, 4, 5, 1), cache, cache.__getitem__, frames(11, 13))
    assert keys == [PARSE, PARSE, EMIT] and parents == [-1, 0, -1]
    assert node_of == {1: -1, 2: 0, 3: 0, 4: 1, 5: 2}


def test_merge_paths_refuses_a_bad_steps_table() -> None:
    def fails(frame: FrameId) -> tuple[object, ...]:
        raise ZeroDivisionError(frame)

    with pytest.raises(TypeError):
        merge_paths(CALLSITES, ids(3), {}, lambda frame: (1,), None)
    with pytest.raises(ValueError):
        merge_paths(CALLSITES, ids(3), {}, lambda frame: (-5, None), None)
    with pytest.raises(ZeroDivisionError):  # an error in the callback goes through as it is
        merge_paths(CALLSITES, ids(3), {}, fails, None)


def test_function_totals_count_each_function_once_per_path() -> None:
    cache: dict[FrameId, tuple[int, ...]] = {}

    def fns_of(frame: FrameId) -> tuple[int, ...]:
        got = cache[frame] = FNS[frame]
        return got

    values = {CallsiteId(3): 100, CallsiteId(4): 10, CallsiteId(5): 1, CallsiteId(2): 0}
    self_values, totals, where, prefix = function_totals(CALLSITES, values, cache, fns_of, None, 0)
    # Leaf 3's innermost function is g (inlined into f); leaf 4's parse holds 10 below parse:
    # parse's total counts it once.
    assert self_values == {G: 100, PARSE: 10, EMIT: 1}
    assert totals == [(G, 100), (F, 100), (PARSE, 110), (MAIN, 111), (EMIT, 1)]
    assert sorted(where) == [(PARSE, 0, 110), (F, 1, 100), (G, 2, 100)]
    assert prefix == [MAIN]  # the roots common to every path with a value


def test_function_totals_python_view_and_wide_values() -> None:
    big = 1 << 70
    self_values, totals, _, prefix = function_totals(CALLSITES, dict(zip(ids(3, 1, 5), (big, -3, 2), strict=True)),
                                                     dict(FNS), FNS.__getitem__, frames(11, 13), 42)
    # Stacks with no kept frame go to `no_python` (42); values past 64 bits add up exactly.
    assert self_values == {PARSE: big, 42: -3, EMIT: 2}
    assert totals == [(PARSE, big), (42, -3), (EMIT, 2)]
    assert prefix == []
    wide = dict(zip(ids(3, 4), (5, -(big << 40)), strict=True))
    assert function_totals(CALLSITES, wide, dict(FNS), FNS.__getitem__, None, 0)[0] == {G: 5, PARSE: -(big << 40)}
    _, _, _, none = function_totals(CALLSITES, {}, {}, FNS.__getitem__, None, 0)
    assert none is None


def test_preorder_ranks_siblings_by_name_mapping_and_line() -> None:
    # b ─┬─ x ── y        a
    #    └─ a
    order, new_id, parents, depths = preorder([-1, 0, 0, -1, 1], ["b", "x", "a", "a", "y"], [""] * 5, None)
    assert order == [3, 0, 2, 1, 4] and new_id == [1, 3, 2, 0, 4]
    assert parents == [-1, -1, 1, 1, 3] and depths == [0, 0, 1, 1, 2]
    # Equal keys keep the order the Python loop gave them (ids descending); lines rank when given.
    assert preorder([-1, -1], ["f", "f"], ["m", "m"], None)[0] == [1, 0]
    assert preorder([-1, -1], ["f", "f"], ["m", "m"], [20, 10])[0] == [1, 0]
    assert preorder([-1, -1], ["f", "f"], ["m", "m"], [10, 20])[0] == [0, 1]
    assert preorder([-1, -1], ["f", "f"], ["m2", "m1"], [10, 20])[0] == [1, 0]
    assert preorder([], [], [], None) == ([], [], [], [])
    big = 2**63 - 1  # SQLite's largest integer, a line a damaged profile may hold
    assert preorder([-1, -1], ["f", "f"], ["m", "m"], [big, -big - 1])[0] == [1, 0]
    with pytest.raises(ValueError):
        preorder([1, -1], ["a", "b"], ["", ""], None)  # a parent after its child: no preorder
    with pytest.raises(TypeError):
        preorder([-1], [1], [""], None)  # type: ignore[list-item]
