"""Each process's peak in several heap sets at once, from one read of the peak rows.

A flamegraph page shows each heap and their sums; Profile.peak_values read the whole table once
for each (a build's ~98k rows, three times). With the profile showing every heap, this reads the
rows once with their heap and sums, per set, what peak_values of that set shown sums: per process
and callsite, its rows in the set's heaps (a NULL real size counts as SQLite's SUM counts it), at
the latest ts of them.
"""

from __future__ import annotations

from typing import cast

from heapscope.model import CallsiteId
from heapscope.store.convert import plain_values
from heapscope.store.reader import Profile, ViewValues

Peak = tuple[int, dict[CallsiteId, ViewValues]]  # Profile.peak_values: its ts, each callsite's values


def peak_values_by_heap(profile: Profile, sets: dict[str, list[str] | None]) -> dict[str, dict[int, Peak]] | None:
    """Per set (name -> its heaps; None: every heap), each process's peak_values (by upid), as
    read with the profile showing that set; None when this read does not say the same (a
    process's heaps peaking at several ts, which the heap views line up, or values not as
    `record` writes them): the caller reads each set's as before."""
    if not profile.peaks_at_one_ts():
        return None
    rows = profile.peak_rows_by_heap()
    if not rows:
        return {name: {} for name in sets}
    plain = plain_values(rows, (0, 7, 8), 1)
    if plain is None:
        return None
    keys, values = plain
    callsites, stamps, upids = cast("tuple[list[CallsiteId], list[int], list[int]]", keys)
    heaps = [r[9] if type(r[9]) is str else "" for r in rows]  # not text: no heap's (the views' IN)
    out: dict[str, dict[int, Peak]] = {}
    for name, members in sets.items():
        among = None if members is None else set(members)
        peaks: dict[int, Peak] = {}
        for upid, cs, ts, heap, v in zip(upids, callsites, stamps, heaps, values, strict=True):
            if among is not None and heap not in among:
                continue
            peak = peaks.get(upid)
            if peak is None or ts > peak[0]:
                peak = peaks[upid] = (ts, {} if peak is None else peak[1])
            o = peak[1].get(cs)
            peak[1][cs] = v if o is None else _summed(o, v)
        out[name] = peaks
    return out


def _summed(a: ViewValues, b: ViewValues) -> ViewValues:
    """Two rows' values added as SQLite's SUM adds them: NULL only when both are."""
    def opt(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else x + y

    return ViewValues(a.space + b.space, a.objects + b.objects, a.alloc_space + b.alloc_space,
                      a.alloc_objects + b.alloc_objects, opt(a.real_space, b.real_space),
                      opt(a.alloc_real_space, b.alloc_real_space))
