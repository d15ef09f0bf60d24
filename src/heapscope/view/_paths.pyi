"""The views' per-callsite loops, in C (_paths.c, _totals.c, _selfs.c)."""

from collections.abc import Callable, Iterable, Mapping, Sequence, Set

from heapscope.model import CallsiteId, FrameId
from heapscope.store.rows import ViewValues

def merge_paths(
    callsites: Mapping[CallsiteId, tuple[CallsiteId | None, FrameId]],
    leaves: Iterable[CallsiteId],
    frame_steps: dict[FrameId, tuple[object, ...]],
    steps: Callable[[FrameId], tuple[object, ...]],
    python: Set[FrameId] | None,
) -> tuple[list[int], list[int], list[object], dict[CallsiteId, int]]:
    """build_tree's first pass: each leaf's path merged into nodes by (parent node, step key);
    the nodes' parents, keys and sources, and {callsite: node} (view/tree.py)."""

def preorder(
    parents: list[int], names: list[str], maps: list[str], lines: list[int] | None,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """build_tree's second pass: the nodes (each parent before its children, -1: a root) in
    preorder, siblings by (name, mapping, line), equal ones by id descending: the nodes in that
    order, each node's new id, and by new id each one's parent and depth."""

def function_totals(
    callsites: Mapping[CallsiteId, tuple[CallsiteId | None, FrameId]],
    values: Mapping[CallsiteId, int],
    frame_fns: dict[FrameId, tuple[int, ...]],
    fns_of: Callable[[FrameId], tuple[int, ...]],
    python: Set[FrameId] | None,
    no_python: int,
) -> tuple[dict[int, int], list[tuple[int, int]], list[tuple[int, int, int]], list[int] | None]:
    """function_rows' walk of every stack with a non-zero value: each function's self and (once
    per path) total, the totals in the order first counted, the value held per (function,
    source id), and the root functions common to every path (None: no path); view/report.py."""

def desampled_selfs(
    node_of: dict[CallsiteId, int],
    values: dict[CallsiteId, ViewValues],
    nodes: int,
    interval: int,
    estimate: Callable[[int, int, int, int | None], int],
) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """MergedTree.desampled_selfs' loop: per node the sums of space, objects, alloc_space and
    alloc_objects (the object views de-sampled by estimate_int's arithmetic, `estimate` called
    where C cannot be exact); None when a sum passes 64 bits (view/tree.py)."""

def size_cells(
    node_of: dict[CallsiteId, int],
    items: Sequence[tuple[CallsiteId, Mapping[tuple[int, int], tuple[int, int, int | None]]]],
    interval: int,
    estimate: Callable[[int, int, int, int | None], int],
) -> list[int] | None:
    """view/flamegraph_lifetimes.py's "sizes" list of the size cells `items` (sorted by callsite):
    per cell of a callsite the tree shows, sorted by (lo, hi), its node + 1, its size class's
    power of two, its allocations de-sampled (estimate_int's arithmetic, `estimate` called where C
    cannot be exact) and its sampled bytes; None when a value is past 64 bits."""

def sparse(values: list[int], shift: int) -> list[int]:
    """(gap, value) pairs of the non-zero values of `values`, node i being node i + shift, the
    first gap counted from node 0 (view/flamegraph.py _sparse)."""
