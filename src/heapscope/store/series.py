"""Reading a process's memory over time (heapscope_memory_series) and the samples behind a range
of it (heapscope_memory_sample); both absent from profiles written before them, which then have
none. The heaps read are those the profile shows (select.py's views shadow these tables too).

Several heaps of one process (libc.malloc and python.pymalloc) have points at their own times:
their sum at a time is each heap's latest point then, added: a point's largest value is its
heap's largest plus the others' ends, exact when they did not change within its span.
"""

from __future__ import annotations

from collections.abc import Iterable

from heapscope.store.grouped import grouped_rows
from heapscope.store.values import (
    INT,
    INT_OR_NULL,
    TEXT,
    opt_int_from_sql,
    req_int_from_sql,
    str_from_sql,
    upid_filter,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING: the live view imports this module, not the reader
if TYPE_CHECKING:
    from heapscope.store.reader import Profile

SERIES = "heapscope_memory_series"
SAMPLES = "heapscope_memory_sample"


def _has_table(profile: Profile, name: str) -> bool:
    with profile.reading():
        return profile.sql_connection().execute(
            "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


Point = tuple[int, int, int, int]  # ts, unreleased (the span's largest), unreleased at its end, allocated


def memory_series(profile: Profile, upid: int) -> list[Point]:
    """(ts, sampled unreleased bytes: the span's largest and at its end, sampled bytes allocated
    in all) of a process, by time, its heaps summed; [] when the profile has no series."""
    if not _has_table(profile, SERIES):
        return []
    with profile.reading():  # values of the wrong type: one ProfileError, as every reader's
        rows = profile.sql_connection().execute(
            f"SELECT heap_name, ts, unreleased, unreleased_end, allocated FROM {SERIES} WHERE upid = ?"
            " ORDER BY ts, heap_name", (upid,)).fetchall()
        points = [(str_from_sql(h), req_int_from_sql(t, f"{SERIES}.ts"), req_int_from_sql(u, f"{SERIES}.unreleased"),
                   req_int_from_sql(e, f"{SERIES}.unreleased_end"), req_int_from_sql(a, f"{SERIES}.allocated"))
                  for h, t, u, e, a in rows]
    return sum_heaps(points)


HeapPoint = tuple[str, int, int, int, int]  # a heap's point: its name, then a Point's values


def memory_series_by_heap(profile: Profile, upids: Iterable[int]) -> dict[int, list[HeapPoint]]:
    """The series points of every heap of each of `upids` (keyed by upid), whatever heap is shown,
    by ts then heap name, in one read: a page of several heaps and their sums (the flamegraph)
    sums each one's with series_of (a query a process and heap cost a build's page ~0.1 s)."""
    from heapscope.store.alloc_labels import labelled_source

    wanted = set(upids)
    if not wanted or not _has_table(profile, SERIES):
        return {}
    where, args = upid_filter(wanted)
    out: dict[int, list[HeapPoint]] = {}
    db = profile.sql_connection()
    with profile.reading():  # values of the wrong type: one ProfileError, as memory_series'
        rows = db.execute(f"SELECT upid, heap_name, ts, unreleased, unreleased_end, allocated"
                          f" FROM {labelled_source(db, SERIES)}{where} ORDER BY upid, ts, heap_name", args).fetchall()
        for u, h, t, un, e, a in rows:
            upid = req_int_from_sql(u, f"{SERIES}.upid")
            if upid in wanted:
                out.setdefault(upid, []).append((
                    h if isinstance(h, str) else "", req_int_from_sql(t, f"{SERIES}.ts"),
                    req_int_from_sql(un, f"{SERIES}.unreleased"), req_int_from_sql(e, f"{SERIES}.unreleased_end"),
                    req_int_from_sql(a, f"{SERIES}.allocated")))
    return out


def series_of(by_heap: dict[int, list[HeapPoint]], heaps: Iterable[str] | None) -> dict[int, list[Point]]:
    """The memory_series of each process with the heaps named shown (None: every heap; several:
    summed) out of memory_series_by_heap's read."""
    among = None if heaps is None else set(heaps)
    out: dict[int, list[Point]] = {}
    for upid, rows in by_heap.items():
        picked = rows if among is None else [r for r in rows if r[0] in among]
        if picked:
            out[upid] = sum_heaps(picked)
    return out


def sum_heaps(rows: Iterable[tuple[str, int, int, int, int]]) -> list[Point]:
    """One series of the points (heap, ts, unreleased, its end, allocated) of several heaps,
    given by ts: at each, every heap as its latest point left it."""
    latest: dict[str, tuple[int, int]] = {}  # heap -> (unreleased at its latest point's end, allocated)
    out: list[Point] = []
    for heap, ts, unreleased, end, allocated in rows:
        # This heap's largest, with the others as their latest points left them.
        others = sum(e for h, (e, _) in latest.items() if h != heap)
        latest[heap] = (end, allocated)
        point = (ts, others + unreleased, sum(e for e, _ in latest.values()), sum(a for _, a in latest.values()))
        if out and out[-1][0] == point[0]:
            prev = out[-1]  # heaps with a point at the same ts: one point, every heap in it
            out[-1] = (point[0], max(prev[1], point[1]), point[2], point[3])
        else:
            out.append(point)
    return out


def memory_samples(profile: Profile, upid: int) -> list[tuple[int, int, int | None, int, int]]:
    """(callsite, alloc_ts, free_ts or None, sampled bytes, weight) of a process's kept samples;
    [] when the profile has none."""
    return memory_samples_by_process(profile, [upid]).get(upid, [])


def memory_samples_by_process(profile: Profile, upids: Iterable[int]
                              ) -> dict[int, list[tuple[int, int, int | None, int, int]]]:
    """memory_samples of each of `upids` (keyed by upid), in one pass over the table: a pass per
    process read a build's ~300k rows once for each of its ~110 processes."""
    wanted = set(upids)
    if not wanted or not _has_table(profile, SAMPLES):
        return {}
    where, args = upid_filter(wanted)
    out: dict[int, list[tuple[int, int, int | None, int, int]]] = {}
    db = profile.sql_connection()
    sql = f"SELECT upid, callsite_id, alloc_ts, free_ts, size, weight FROM {SAMPLES}{where}"
    with profile.reading():
        # Read in C, each value's type checked there: a build's ~300k rows took ~0.8 s below.
        got = grouped_rows(profile, sql, args, [t for _, t in _SAMPLE_COLUMNS])
        if got is not None:
            return {u: got_rows for u, got_rows in got.items() if u in wanted}
        rows: Iterable[tuple[int, int, int, int | None, int, int]] = db.execute(sql, args)
        if not profile.as_written(SAMPLES, _SAMPLE_COLUMNS, where, args):
            rows = (_checked_sample(r) for r in rows)
        for u, c, a, f, s, w in rows:
            if u in wanted:
                samples = out.get(u)
                if samples is None:
                    samples = out[u] = []
                samples.append((c, a, f, s, w))
    return out


Sample = tuple[int, int, int | None, int, int]  # callsite, alloc_ts, free_ts or None, sampled bytes, weight


def memory_samples_by_heap(profile: Profile, upids: Iterable[int]) -> dict[int, list[tuple[str, Sample]]]:
    """memory_samples_by_process of every heap at once, whatever heap is shown (the --label
    chosen still applies), each sample with its heap's name, in the table's order: a page of
    several heaps and their sums (the flamegraph) picks each one's rows out of one read with
    samples_of (a build's ~300k rows took ~0.45 s a read, and its page read them three times)."""
    from heapscope.store.alloc_labels import labelled_source

    wanted = set(upids)
    if not wanted or not _has_table(profile, SAMPLES):
        return {}
    where, args = upid_filter(wanted)
    out: dict[int, list[tuple[str, Sample]]] = {}
    db = profile.sql_connection()
    with profile.reading():
        source = labelled_source(db, SAMPLES)
        # Read in C as memory_samples_by_process's (a heap name not text goes the way below).
        got = grouped_rows(
            profile, f"SELECT upid, heap_name, callsite_id, alloc_ts, free_ts, size, weight FROM {source}{where}", args,
            [INT, TEXT, *(t for _, t in _SAMPLE_COLUMNS[1:])], tagged=True)
        if got is not None:
            return {u: got_rows for u, got_rows in got.items() if u in wanted}
        rows: Iterable[tuple[str, int, int, int, int | None, int, int]] = db.execute(
            f"SELECT heap_name, upid, callsite_id, alloc_ts, free_ts, size, weight FROM {source}{where}", args)
        if not profile.as_written(SAMPLES, (("heap_name", TEXT), *_SAMPLE_COLUMNS), where, args, source):
            # a name that is not text matches no heap, as in the views' heap_name IN (...)
            rows = ((r[0] if isinstance(r[0], str) else "", *_checked_sample(r[1:])) for r in rows)
        for h, u, c, a, f, s, w in rows:
            if u in wanted:
                samples = out.get(u)
                if samples is None:
                    samples = out[u] = []
                samples.append((h, (c, a, f, s, w)))
    return out


def samples_of(by_heap: dict[int, list[tuple[str, Sample]]], heaps: Iterable[str] | None) -> dict[int, list[Sample]]:
    """The memory samples of the heaps named (None: every heap; several: all of theirs, in the
    table's order) out of memory_samples_by_heap's read: what memory_samples_by_process reads
    with them shown."""
    among = None if heaps is None else set(heaps)
    out: dict[int, list[Sample]] = {}
    for upid, rows in by_heap.items():
        picked = [r for h, r in rows if among is None or h in among]
        if picked:
            out[upid] = picked
    return out


def _checked_sample(r: tuple[object, ...]) -> tuple[int, int, int, int | None, int, int]:
    """A memory-sample row through values.py's checks: ProfileError (BadValue) on damage."""
    return (req_int_from_sql(r[0], f"{SAMPLES}.upid"), req_int_from_sql(r[1], f"{SAMPLES}.callsite_id"),
            req_int_from_sql(r[2], f"{SAMPLES}.alloc_ts"), opt_int_from_sql(r[3], f"{SAMPLES}.free_ts"),
            req_int_from_sql(r[4], f"{SAMPLES}.size"), req_int_from_sql(r[5], f"{SAMPLES}.weight"))


_SAMPLE_COLUMNS = (("upid", INT), ("callsite_id", INT), ("alloc_ts", INT), ("free_ts", INT_OR_NULL),
                   ("size", INT), ("weight", INT))


def thin_series(points: list[Point], limit: int) -> list[Point]:
    """At most `limit` points: runs of neighbours merged, each keeping its first ts, its largest
    unreleased, its last end and allocated (the peak is never lost)."""
    if limit <= 0 or len(points) <= limit:
        return points
    per = -(-len(points) // limit)
    out = []
    for k in range(0, len(points), per):
        run = points[k:k + per]
        out.append((run[0][0], max(p[1] for p in run), run[-1][2], run[-1][3]))
    return out
