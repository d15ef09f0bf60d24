"""The flamegraph's lifetime parts: the "temporary" view and each node's size histogram.

Lifetimes are kept for the whole run (store/lifetimes.py), not per dump, so the temporary
view's per-node self values (sampled bytes freed within 1 ms) are the same at every snapshot
of a process's timeline. The sizes travel as one flat list per process,

    "sizes": [node, bucket, allocations, bytes, node, bucket, ...]

node in the page's numbering (0 is the synthetic root), bucket the power of two of the size
class [2^bucket, 2^(bucket+1)) (0 holds 0 and 1), allocations de-sampled (heapscope/estimate.py),
bytes sampled; the page sums a node's subtree for its tooltip. A profile without lifetime
tables adds neither, and the page shows no such view.
"""

from __future__ import annotations

from heapscope.estimate import estimate_int
from heapscope.store.lifetimes import LifeSums, has_lifetimes, life_sums_by_process
from heapscope.store.reader import Process, Profile
from heapscope.store.select import process_interval
from heapscope.view._paths import size_cells
from heapscope.view.lifetimes import DEFAULT_TEMPORARY_NS
from heapscope.view.tree import MergedTree

TEMPORARY = "temporary"


def lifetime_values(profile: Profile, process: Process, tree: MergedTree,
                    lives: LifeSums | None = None) -> tuple[list[int], list[int]] | None:
    """(temporary sampled bytes per node of `tree`, its flat "sizes" list) of `process`; None
    when the profile has no lifetimes. `lives`: its lifetimes' sums, when read already
    (store/lifetimes.py life_sums_by_process, at DEFAULT_TEMPORARY_NS)."""
    if not has_lifetimes(profile):
        return None
    interval = process_interval(profile, process)
    temporary = [0] * len(tree)
    sizes: list[int] = []
    if lives is None:
        upid = process.info.upid
        lives = life_sums_by_process(profile, [upid], DEFAULT_TEMPORARY_NS).get(upid, LifeSums({}, {}))
    node_of = tree.node_of
    for cs, size in lives.temporary.items():
        node = node_of.get(cs)
        if node is not None:
            temporary[node] += size
    items = sorted(lives.sizes.items())
    got = size_cells(node_of, items, interval, estimate_int)  # in C (view/_selfs.c), this loop's values
    if got is not None:
        return temporary, got
    for cs, cells in items:
        node = node_of.get(cs)
        if node is None:
            continue
        for (lo, _hi), (count, size, real) in sorted(cells.items()):
            # The value of view/lifetimes.py cell_estimate, without its standard error.
            sizes += (node + 1, max(lo, 1).bit_length() - 1, estimate_int(count, size, interval, real), size)
    return temporary, sizes
