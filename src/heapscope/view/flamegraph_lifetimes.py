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

from heapscope.model import CallsiteId
from heapscope.store.lifetimes import CallsiteLife, has_lifetimes, read_lifetimes
from heapscope.store.reader import Process, Profile
from heapscope.store.select import process_interval
from heapscope.view.lifetimes import DEFAULT_TEMPORARY_NS, cell_estimate, temporary_cells
from heapscope.view.tree import MergedTree

TEMPORARY = "temporary"


def lifetime_values(profile: Profile, process: Process, tree: MergedTree,
                    lives: dict[CallsiteId, CallsiteLife] | None = None) -> tuple[list[int], list[int]] | None:
    """(temporary sampled bytes per node of `tree`, its flat "sizes" list) of `process`; None
    when the profile has no lifetimes. `lives`: its lifetimes, when read already
    (store/lifetimes.py read_lifetimes_by_process)."""
    if not has_lifetimes(profile):
        return None
    interval = process_interval(profile, process)
    temporary = [0] * len(tree)
    sizes: list[int] = []
    if lives is None:
        lives = read_lifetimes(profile, [process.info.upid])
    for cs, life in sorted(lives.items()):
        node = tree.node_of.get(cs)
        if node is None:
            continue
        temporary[node] += sum(c.size for c in temporary_cells(life, DEFAULT_TEMPORARY_NS))
        for (lo, _hi), c in sorted(life.sizes.items()):
            sizes += (node + 1, max(lo, 1).bit_length() - 1, round(cell_estimate(c, interval).value), c.size)
    return temporary, sizes
