"""The flamegraph page's chart of memory over time, and what a range of it shows.

Per process the page gets its series (store/series.py: unreleased bytes by time, each span's
largest and at its end, and allocated bytes; thinned to MAX_POINTS, peaks kept) and the
samples behind it: each kept sample's node in the page's tree, its malloc's time, its free's
time (or none) and the bytes and samples it stands for. A range selected on the chart is then
answered in the page, without another file: the stacks allocated in the range and still held
at its end (or those also freed within it) are the weighted sums of the samples that fall in it.

Why samples and not per-time-bucket totals per callsite: a bucket's totals cannot tell a free of
memory allocated in the range from one of older memory, and a matrix of (malloc bucket, free
bucket) per callsite grows with the square of the buckets. A sample carries both of its times in
four numbers. Their number is bounded twice: the tracker keeps at most 16384 freed ones a heap by
a hash of their seq (tracker_series.h), and a process's page keeps at most MAX_SAMPLES of its n:
every k-th from a random start, k = ceil(n/MAX_SAMPLES), each kept with probability 1/k and its
weight multiplied by k, so every sum stays unbiased (Horvitz-Thompson); the page says how many
samples it carries. Sampled bytes are already unbiased estimates of real bytes, so the chart's and the
range's bytes are estimates as they are.
"""

from __future__ import annotations

import random
from itertools import compress
from operator import itemgetter, mul
from typing import cast

from heapscope.model import CallsiteId
from heapscope.records import Record, field
from heapscope.store.reader import Profile
from heapscope.store.series import Point, memory_samples, memory_series, thin_series

#: Points of a process's chart (a chart is about a thousand pixels wide).
MAX_POINTS = 1000
#: Samples a process's page carries for range selections, at most.
MAX_SAMPLES = 5000


class Memory(Record):
    """One process's chart and samples, ready for the page."""

    series: list[Point]  # (ts, unreleased: largest in the span, at its end, allocated)
    node: list[int] = field(default_factory=list)  # per sample: its node in the page's tree
    alloc_ts: list[int] = field(default_factory=list)
    free_ts: list[int | None] = field(default_factory=list)
    size: list[int] = field(default_factory=list)  # bytes it stands for (size x weight x the step kept by)
    weight: list[int] = field(default_factory=list)  # samples it stands for
    samples_in_profile: int = 0


def process_memory(profile: Profile, upid: int, node_of: dict[CallsiteId, int], max_points: int = MAX_POINTS,
                   max_samples: int = MAX_SAMPLES,
                   samples: list[tuple[int, int, int | None, int, int]] | None = None,
                   series: list[Point] | None = None) -> Memory | None:
    """The chart and the samples of process `upid`, its samples placed by `node_of` (callsite ->
    node of the page's tree, the root being node 0); None when the profile has no series.
    `samples`, `series`: its memory_samples and memory_series, when read already (store/series.py
    memory_samples_by_process, series_of)."""
    if series is None:
        series = memory_series(profile, upid)
    if not series:
        return None
    mem = Memory(thin_series(series, max_points))
    rows = memory_samples(profile, upid) if samples is None else list(samples)
    mem.samples_in_profile = len(rows)
    scale = 1
    if len(rows) > max_samples > 0:
        # Every k-th row from a start seeded by the process (the same profile gives the same
        # page), k the smallest step that keeps at most max_samples: each row is kept with
        # probability 1/k and stands for k. The rows being in time order, the kept ones spread
        # evenly over the run; random.sample took ~3 ms a process of a build's page.
        k = -(-len(rows) // max_samples)
        rows = rows[random.Random(upid).randrange(k)::k]
        scale = k
    rows.sort(key=itemgetter(1))
    # Column by column: a build's page places ~600k samples (a loop appending to five lists
    # took 0.3 s of it).
    found = list(map(cast("dict[int, int]", node_of).get, (r[0] for r in rows)))
    if None in found:  # a sample whose callsite the tree does not have
        rows = list(compress(rows, [n is not None for n in found]))
    nodes = [n for n in found if n is not None]
    if rows:
        _, alloc_ts, free_ts, size, weight = zip(*rows, strict=True)
        mem.node = [n + 1 for n in nodes]  # the page's node 0 is its synthetic root
        mem.alloc_ts, mem.free_ts = list(alloc_ts), list(free_ts)
        mem.size, mem.weight = list(map(mul, size, weight)), list(weight)
        if scale > 1:
            mem.size = [s * scale for s in mem.size]
            mem.weight = [w * scale for w in mem.weight]
    return mem


def encode_memory(mem: Memory, t0: int) -> dict[str, object]:
    """The page's "memory" of a process: times in µs after `t0` (ns), a free of None as -1."""
    return {
        "t": [(p[0] - t0) // 1000 for p in mem.series], "u": [p[1] for p in mem.series],
        "e": [p[2] for p in mem.series], "a": [p[3] for p in mem.series],
        "sn": mem.node, "sa": [(t - t0) // 1000 for t in mem.alloc_ts],
        "sf": [-1 if t is None else max(0, (t - t0) // 1000) for t in mem.free_ts],
        "sb": mem.size, "sw": mem.weight,
        "kept": len(mem.node), "samples": mem.samples_in_profile,
    }
