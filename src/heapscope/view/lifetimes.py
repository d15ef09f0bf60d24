"""The lifetime views: temporary allocations per stack, lifetimes per function, sizes.

Built from the profile's lifetime tables (store/lifetimes.py): per callsite, how many samples
were freed after how long (1-2-5 buckets, heapscope.model.LIFETIME_BOUNDS), how many are still
held at the end, and the sizes asked for (log2 buckets). Prints nothing (cli/lifetimes.py does).

    temporary(stack)   samples freed within the threshold: their sampled bytes (an unbiased
                       estimate of the real bytes) and the allocations they stand for,
                       de-sampled with a standard error (heapscope/estimate.py), per bucket
    lifetimes(F)       per function (the leaf of its stacks: self, as the report's table):
                       allocated, % temporary, the median and 90th percentile lifetime of the
                       freed allocations (the bucket they fall in, weighted by estimated
                       allocations), % still held at the end
    sizes              the histogram of asked-for sizes, estimated allocations per bucket

A threshold counts the buckets that end at or below it: it is a bound when it is one of the
1-2-5 steps, else it is taken down to the step below (said in the header). heaptrack's
definition (freed before the allocating thread's next malloc) is exact at interval 1 only:
with sampling, "next" is the next sample. At interval 1 every figure is exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable

from heapscope.estimate import Estimate, combine, estimate_count
from heapscope.model import LIFETIME_BOUNDS, CallsiteId, FrameId
from heapscope.records import Record
from heapscope.store.lifetimes import CallsiteLife, Cell, add_cell, freed_within, has_lifetimes, read_lifetimes
from heapscope.store.reader import Profile, mapping_basename
from heapscope.view.tree import frame_functions

#: `--temporary heaptrack`: heaptrack's definition instead of a threshold.
HEAPTRACK = "heaptrack"
DEFAULT_TEMPORARY_NS = 1_000_000

Bucket = tuple[int, "int | None"]


def effective_threshold(ns: int) -> int:
    """The largest bucket bound at or below `ns` (0 below the first): what a threshold counts."""
    below = [b for b in LIFETIME_BOUNDS if b <= ns]
    return below[-1] if below else 0


def format_ns(ns: int) -> str:
    """`800 ns`, `50 us`, `1 ms`, `2.5 s`: a duration in its unit, short."""
    for unit, scale in (("s", 10 ** 9), ("ms", 10 ** 6), ("us", 10 ** 3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns} ns"


def format_bucket(b: Bucket | None) -> str:
    """A lifetime bucket as a range: `<1 us`, `500 us-1 ms`, `>=1000 s`; `-` for none."""
    if b is None:
        return "-"
    lo, hi = b
    if hi is None:
        return f">={format_ns(lo)}"
    if lo == 0:
        return f"<{format_ns(hi)}"
    return f"{format_ns(lo)}-{format_ns(hi)}"


def cell_estimate(c: Cell, interval: int) -> Estimate:
    """The allocations behind a cell's samples, with its standard error."""
    return estimate_count(c.samples, c.size, interval, c.real)


def total(estimates: Iterable[Estimate]) -> Estimate:
    """The sum of independent estimates (heapscope/estimate.py combine)."""
    return combine(list(estimates))


def _sum(cells: Iterable[Cell]) -> Cell:
    out = Cell()
    for c in cells:
        out = out.plus(c)
    return out


def temporary_cells(life: CallsiteLife, threshold: int | str) -> list[Cell]:
    """The cells of `life` that are temporary by `threshold` (ns, or HEAPTRACK)."""
    if threshold == HEAPTRACK:
        return [c for c in life.heaptrack.values() if c.samples]
    assert isinstance(threshold, int)
    return freed_within(life, threshold)


def quantile(buckets: dict[Bucket, float], q: float) -> Bucket | None:
    """The bucket holding the q-quantile of weights over `buckets` (by lifetime); None if empty."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    acc = 0.0
    for b in sorted(buckets, key=lambda k: k[0]):
        acc += buckets[b]
        if acc >= q * total:
            return b
    return max(buckets, key=lambda k: k[0])


class TemporaryRow(Record, frozen=True):
    """One stack of the temporary view."""

    callsite: CallsiteId
    temp_bytes: int  # sampled bytes freed within the threshold
    temp: Estimate  # allocations freed within it
    alloc_bytes: int  # sampled bytes the stack allocated
    alloc: Estimate


class LifetimeRow(Record, frozen=True):
    """One function of `report --lifetimes`."""

    function: str
    library: str
    alloc_bytes: int
    alloc: Estimate
    temp_bytes: int
    temp: Estimate
    median: Bucket | None  # of the freed allocations' lifetimes
    p90: Bucket | None
    held_bytes: int  # still held at the end
    held: Estimate


class SizeRow(Record, frozen=True):
    """One bucket of a size histogram: sizes [lo, hi)."""

    lo: int
    hi: int
    samples: int
    size: int  # sampled bytes
    allocations: Estimate


def read(profile: Profile, upids: Collection[int],
         keep: Callable[[CallsiteId], bool] | None = None) -> dict[CallsiteId, CallsiteLife] | None:
    """The lifetimes of the callsites of `upids` that `keep` keeps (of the heap the profile
    shows); None when the profile has no lifetime tables (written before them)."""
    if not has_lifetimes(profile):
        return None
    lives = read_lifetimes(profile, upids)
    return {cs: v for cs, v in lives.items() if keep is None or keep(cs)}


def callsite_filter(profile: Profile, callsites: Iterable[CallsiteId], focus: re.Pattern[str] | None,
                    ignore: re.Pattern[str] | None) -> Callable[[CallsiteId], bool] | None:
    """report's --focus/--ignore on callsites (view/tree.py path_filter); None: keep all."""
    if focus is None and ignore is None:
        return None
    from heapscope.view.tree import build_tree, path_filter

    tree = build_tree(profile, sorted(callsites))
    ok = path_filter(tree, focus, ignore)
    return lambda cs: cs in tree.node_of and ok[tree.node_of[cs]]


def temporary_rows(lives: dict[CallsiteId, CallsiteLife], threshold: int | str,
                   interval: int) -> list[TemporaryRow]:
    """The stacks with temporary allocations, by temporary bytes, then allocations."""
    rows = []
    for cs, life in lives.items():
        cells = temporary_cells(life, threshold)
        temp = _sum(cells)
        if not temp.samples:
            continue
        alloc = _sum(life.sizes.values())
        rows.append(TemporaryRow(cs, temp.size, combine([cell_estimate(c, interval) for c in cells]),
                                 alloc.size, combine([cell_estimate(c, interval) for c in life.sizes.values()])))
    rows.sort(key=lambda r: (-r.temp_bytes, -r.temp.value, r.callsite))
    return rows


def leaf_functions(profile: Profile, python_only: bool) -> Callable[[CallsiteId], tuple[str, str]]:
    """callsite -> (function, library) of its leaf: the innermost function of its own frame
    (inlined ones included), or with python_only that of its nearest Python frame."""
    callsites = profile.callsites()
    functions = frame_functions(profile)
    python: set[FrameId] = profile.python_frames() if python_only else set()

    def leaf(cs: CallsiteId) -> tuple[str, str]:
        node: CallsiteId | None = cs
        seen = 0
        while node is not None and seen < 10_000:
            entry = callsites.get(node)
            if entry is None:
                break
            if not python_only or entry[1] in python:
                fn = functions(entry[1])[-1]
                return fn.name, mapping_basename(fn.map_name)
            node, seen = entry[0], seen + 1
        return ("[no Python frames]" if python_only else "[unknown]"), ""

    return leaf


def lifetime_rows(profile: Profile, lives: dict[CallsiteId, CallsiteLife], threshold: int | str,
                  interval: int, python_only: bool = False) -> list[LifetimeRow]:
    """Per leaf function, by sampled bytes allocated."""
    leaf = leaf_functions(profile, python_only)
    merged: dict[tuple[str, str], CallsiteLife] = {}
    for cs, life in lives.items():
        merged.setdefault(leaf(cs), CallsiteLife()).merge(life)
    rows = []
    for (fn, lib), life in merged.items():
        alloc = list(life.sizes.values())
        temp = temporary_cells(life, threshold)
        weights: dict[Bucket, float] = {}
        for (lo, hi, _size), c in life.freed.items():  # each size class estimated on its own
            weights[(lo, hi)] = weights.get((lo, hi), 0.0) + cell_estimate(c, interval).value
        held = list(life.held.values())
        rows.append(LifetimeRow(
            fn, lib, _sum(alloc).size, combine([cell_estimate(c, interval) for c in alloc]),
            _sum(temp).size, combine([cell_estimate(c, interval) for c in temp]),
            quantile(weights, 0.5), quantile(weights, 0.9),
            _sum(held).size, combine([cell_estimate(c, interval) for c in held])))
    rows.sort(key=lambda r: (-r.alloc_bytes, r.function, r.library))
    return rows


def size_rows(lives: Iterable[CallsiteLife], interval: int) -> list[SizeRow]:
    """The size histogram of `lives` together, by size."""
    sizes: dict[tuple[int, int], Cell] = {}
    for life in lives:
        for b, c in life.sizes.items():
            add_cell(sizes, b, c)
    return [SizeRow(lo, hi, c.samples, c.size, cell_estimate(c, interval)) for (lo, hi), c in sorted(sizes.items())]
