"""Reading how long sampled allocations lived and what sizes they asked for, per callsite.

The tables (heapscope_callsite_lifetime, heapscope_callsite_size: schema.sql) are written at
each process's final dump; a profile from before them has neither, and has_lifetimes() says so
(the views then say the profile has no lifetimes). The heap is the one the profile shows
(store/select.py select_heap shadows these tables too).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, TypeVar

from heapscope.model import CallsiteId
from heapscope.records import Record, TupleRecord, field
from heapscope.store.grouped import MOST_SUMMED, grouped_rows, summed_rows
from heapscope.store.reader import Profile
from heapscope.store.values import (
    INT,
    INT_OR_NULL,
    TEXT,
    int_from_sql,
    opt_int_from_sql,
    str_from_sql,
    upid_filter,
)

LIFETIME_TABLE = "heapscope_callsite_lifetime"
SIZE_TABLE = "heapscope_callsite_size"


class Cell(TupleRecord):
    """Samples, their sampled bytes and their asked-for bytes."""

    samples: int = 0
    size: int = 0
    real: int = 0

    def plus(self, other: Cell) -> Cell:
        return Cell(self.samples + other.samples, self.size + other.size, self.real + other.real)


K = TypeVar("K")


def add_cell(where: dict[K, Cell], key: K, c: Cell) -> None:
    """where[key] += c."""
    old = where.get(key)
    where[key] = c if old is None else old.plus(c)


class CallsiteLife(Record):
    """One callsite's lifetimes and sizes, cumulative over the processes read."""

    # (lo_ns, hi_ns, size_lo): freed after a lifetime in [lo_ns, hi_ns), one size class a cell
    # (the allocations are estimated per cell: heapscope/estimate.py wants one size)
    freed: dict[tuple[int, int | None, int], Cell] = field(default_factory=dict)
    held: dict[tuple[int, int | None, int], Cell] = field(default_factory=dict)  # still live at the end, by age
    unknown: dict[int, Cell] = field(default_factory=dict)  # size_lo: freed, lifetime not known
    heaptrack: dict[int, Cell] = field(default_factory=dict)  # size_lo: freed before its thread's next malloc
    sizes: dict[tuple[int, int], Cell] = field(default_factory=dict)  # (lo, hi) bytes asked for

    def merge(self, other: CallsiteLife) -> None:
        """Add `other`'s figures to these."""
        for k, c in other.freed.items():
            add_cell(self.freed, k, c)
        for k, c in other.held.items():
            add_cell(self.held, k, c)
        for s, c in other.sizes.items():
            add_cell(self.sizes, s, c)
        for z, c in other.unknown.items():
            add_cell(self.unknown, z, c)
        for z, c in other.heaptrack.items():
            add_cell(self.heaptrack, z, c)


def freed_within(life: CallsiteLife, threshold_ns: int) -> list[Cell]:
    """The cells of `life` freed within `threshold_ns` (a bucket's end at most that): its
    temporary allocations. FREED_WITHIN_SQL is the same rule for the rows of LIFETIME_TABLE."""
    return [c for (_lo, hi, _size), c in life.freed.items() if hi is not None and hi <= threshold_ns]


# freed_within in SQL, on LIFETIME_TABLE's rows; its one parameter is the threshold.
FREED_WITHIN_SQL = "kind = 'freed' AND hi_ns IS NOT NULL AND hi_ns <= ?"


class LifeSums(TupleRecord):
    """What a flamegraph shows of one process's lifetimes: per callsite the sampled bytes freed
    within a threshold (freed_within's cells, their sizes summed) and its size cells."""

    temporary: dict[CallsiteId, int]
    sizes: dict[CallsiteId, dict[tuple[int, int], Cell]]


def life_sums(lives: dict[CallsiteId, CallsiteLife], threshold_ns: int) -> LifeSums:
    """The LifeSums of lifetimes read whole (read_lifetimes_by_process): a callsite in `temporary`
    when it has a cell freed within the threshold, in `sizes` when it has a size cell."""
    temporary: dict[CallsiteId, int] = {}
    for cs, life in lives.items():
        cells = freed_within(life, threshold_ns)
        if cells:
            temporary[cs] = sum(c.size for c in cells)
    return LifeSums(temporary, {cs: life.sizes for cs, life in lives.items() if life.sizes})


def life_sums_by_process(profile: Profile, upids: Collection[int], threshold_ns: int) -> dict[int, LifeSums]:
    """The LifeSums of each of `upids` (keyed by upid), of the heap the profile shows: the
    temporary bytes summed before they come to Python, with the size rows (a build's ~380k
    lifetime and size rows, each made a Cell of a CallsiteLife, took ~1.7 s a heap). Tables
    holding values of types other than those written are read whole through the checks
    (read_lifetimes_by_process)."""
    if not upids or not has_lifetimes(profile):
        return {}
    wanted = set(upids)
    where, args = upid_filter(wanted)
    db = profile.sql_connection()
    out: dict[int, LifeSums] = {}
    with profile.reading():
        if not profile.as_written(LIFETIME_TABLE, _TEMPORARY_COLUMNS, where, args):
            return {u: life_sums(lives, threshold_ns) for u, lives in _read(profile, upids, True).items()}
        freed = f"FROM {LIFETIME_TABLE}{where} {'AND' if where else 'WHERE'} {FREED_WITHIN_SQL}"
        temporary_sql = f"SELECT upid, callsite_id, SUM(size) {freed} GROUP BY upid, callsite_id"
        sizes_sql = f"SELECT {', '.join(c for c, _ in _SIZE_COLUMNS)} FROM {SIZE_TABLE}{where}"
        # Summed and read in C when they can be, the size rows' types checked there: a build's
        # ~90k sums (SQLite's GROUP BY of ~150k rows) and ~130k size rows took ~0.5 s a heap.
        summed = summed_rows(profile, f"SELECT upid, callsite_id, size {freed}", [*args, threshold_ns],
                             [INT, INT, INT_OR_NULL], 2, MOST_SUMMED)
        temporary = None if summed is None else {
            upid: [(cs, size) for _, cs, size in rows] for upid, rows in groupby(summed, itemgetter(0))}
        sizes = None if temporary is None else grouped_rows(profile, sizes_sql, args, [t for _, t in _SIZE_COLUMNS])
        if temporary is None or sizes is None:
            if not profile.as_written(SIZE_TABLE, _SIZE_COLUMNS, where, args):
                return {u: life_sums(lives, threshold_ns) for u, lives in _read(profile, upids, True).items()}
            temporary, sizes = {}, {}
            for upid, cs, size in db.execute(temporary_sql, [*args, threshold_ns]):
                temporary.setdefault(upid, []).append((cs, size))
            for upid, *row in db.execute(sizes_sql, args):
                sizes.setdefault(upid, []).append(tuple(row))
        for upid, pairs in temporary.items():
            if upid in wanted:
                out[upid] = LifeSums(dict(pairs), {})
        for upid, rows in sizes.items():
            if upid not in wanted:
                continue
            sums = out.get(upid)
            if sums is None:
                sums = out[upid] = LifeSums({}, {})
            by_callsite: dict[Any, dict[tuple[int, int], Cell]] = sums.sizes
            for cs, lo, hi, count, size, real in rows:
                cells = by_callsite.get(cs)
                if cells is None:
                    cells = by_callsite[cs] = {}
                old = cells.get((lo, hi))
                cell = _cell(Cell, (count, size, real))
                cells[(lo, hi)] = cell if old is None else old.plus(cell)
    return out


def merged_life_sums(parts: Sequence[dict[int, LifeSums]]) -> dict[int, LifeSums]:
    """life_sums_by_process of several heaps (each part one heap's, disjoint rows) added up: what
    it reads of a sum of those heaps. What one part alone has is shared, not copied (the readers
    do not change it)."""
    out: dict[int, LifeSums] = {}
    for part in parts:
        for upid, sums in part.items():
            into = out.get(upid)
            if into is None:
                out[upid] = LifeSums(dict(sums.temporary), dict(sums.sizes))
                continue
            for cs, size in sums.temporary.items():
                into.temporary[cs] = into.temporary.get(cs, 0) + size
            for cs, cells in sums.sizes.items():
                have = into.sizes.get(cs)
                if have is None:
                    into.sizes[cs] = cells
                    continue
                both = dict(have)
                for key, c in cells.items():
                    add_cell(both, key, c)
                into.sizes[cs] = both
    return out


def has_lifetimes(profile: Profile) -> bool:
    """Whether the profile has the lifetime tables (profiles from before them do not)."""
    db = profile.sql_connection()
    with profile.reading():
        names = {str(r[0]) for r in db.execute(
            "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name IN (?, ?)",
            (LIFETIME_TABLE, SIZE_TABLE))}
    return names == {LIFETIME_TABLE, SIZE_TABLE}


def read_lifetimes(profile: Profile, upids: Collection[int]) -> dict[CallsiteId, CallsiteLife]:
    """Each callsite's lifetimes and sizes over the processes `upids`, of the heap the profile
    shows; empty when the profile has no lifetime tables (has_lifetimes)."""
    return _read(profile, upids, by_process=False).get(0, {})


def read_lifetimes_by_process(profile: Profile, upids: Collection[int]
                              ) -> dict[int, dict[CallsiteId, CallsiteLife]]:
    """The same, each process's apart (keyed by upid), in one pass over the tables: a pass per
    process read a build's ~250k rows once for each of its ~110 processes."""
    return _read(profile, upids, by_process=True)


# Per table, the columns read and the SQL types each may hold as written (_read takes the values
# as they come when Profile.as_written says so; else each goes through values.py's checks).
_LIFETIME_COLUMNS = (("upid", INT), ("callsite_id", INT), ("kind", TEXT), ("lo_ns", INT), ("hi_ns", INT_OR_NULL),
                     ("size_lo", INT), ("count", INT), ("size", INT), ("real_size", INT))
_SIZE_COLUMNS = (("upid", INT), ("callsite_id", INT), ("lo", INT), ("hi", INT), ("count", INT), ("size", INT),
                 ("real_size", INT))
# Those the temporary bytes are summed from (life_sums_by_process): only these are checked first.
_TEMPORARY_COLUMNS = (("upid", INT), ("callsite_id", INT), ("kind", TEXT), ("hi_ns", INT_OR_NULL), ("size", INT))

# upid, callsite_id, kind, lo_ns, hi_ns, size_lo, count, size, real_size
_LifetimeRow = tuple[int, int, str, int, int | None, int, int, int, int]
_SizeRow = tuple[int, int, int, int, int, int, int]  # upid, callsite_id, lo, hi, count, size, real_size


def _read(profile: Profile, upids: Collection[int], by_process: bool) -> dict[int, dict[CallsiteId, CallsiteLife]]:
    """The lifetimes of `upids`, keyed by upid (by_process) or all under 0."""
    if not upids or not has_lifetimes(profile):
        return {}
    wanted = set(upids)
    where, args = upid_filter(wanted)
    out: dict[int, dict[Any, CallsiteLife]] = {}  # by callsite id, a CallsiteId
    db = profile.sql_connection()

    def life_of(upid: int, cs: int) -> CallsiteLife:
        lives = out.get(upid if by_process else 0)
        if lives is None:
            lives = out[upid if by_process else 0] = {}
        life = lives.get(cs)  # by the int: a CallsiteId is one
        if life is None:  # every field given: no defaults to fill in (records.py), ~100k of them
            life = lives[cs] = CallsiteLife({}, {}, {}, {}, {})
        return life

    with profile.reading():
        rows: Iterable[_LifetimeRow] = db.execute(
            f"SELECT {', '.join(c for c, _ in _LIFETIME_COLUMNS)} FROM {LIFETIME_TABLE}{where}", args)
        if not profile.as_written(LIFETIME_TABLE, _LIFETIME_COLUMNS, where, args):
            rows = (_checked_lifetime_row(r) for r in rows)
        cells: dict[Any, Cell]  # the kind's cells: keyed by (lo_ns, hi_ns, size_lo) or by size_lo
        key: Any
        for upid, cs, kind, lo_ns, hi_ns, size_lo, count, size, real in rows:
            if upid not in wanted:
                continue
            life = life_of(upid, cs)
            if kind == "freed":
                cells, key = life.freed, (lo_ns, hi_ns, size_lo)
            elif kind == "held":
                cells, key = life.held, (lo_ns, hi_ns, size_lo)
            elif kind == "unknown":
                cells, key = life.unknown, size_lo
            elif kind == "heaptrack":
                cells, key = life.heaptrack, size_lo
            else:
                continue
            old = cells.get(key)
            cell = _cell(Cell, (count, size, real))
            cells[key] = cell if old is None else old.plus(cell)
        sizes: Iterable[_SizeRow] = db.execute(
            f"SELECT {', '.join(c for c, _ in _SIZE_COLUMNS)} FROM {SIZE_TABLE}{where}", args)
        if not profile.as_written(SIZE_TABLE, _SIZE_COLUMNS, where, args):
            sizes = (_checked_size_row(r) for r in sizes)
        for upid, cs, lo, hi, count, size, real in sizes:
            if upid not in wanted:
                continue
            life = life_of(upid, cs)
            old = life.sizes.get((lo, hi))
            cell = _cell(Cell, (count, size, real))
            life.sizes[(lo, hi)] = cell if old is None else old.plus(cell)
    return out


# A Cell made from its three values without the keyword defaults' handling (half the time).
_cell = tuple.__new__


def _checked_lifetime_row(r: tuple[object, ...]) -> _LifetimeRow:
    """A lifetime row through values.py's checks: ProfileError (BadValue) on damage, NULL counts as 0."""
    col = LIFETIME_TABLE + "."
    return (int_from_sql(r[0], col + "upid"), int_from_sql(r[1], col + "callsite_id"), str_from_sql(r[2]),
            int_from_sql(r[3], col + "lo_ns"), opt_int_from_sql(r[4], col + "hi_ns"),
            int_from_sql(r[5], col + "size_lo"), int_from_sql(r[6], col + "count"), int_from_sql(r[7], col + "size"),
            int_from_sql(r[8], col + "real_size"))


def _checked_size_row(r: tuple[object, ...]) -> _SizeRow:
    col = SIZE_TABLE + "."
    return (int_from_sql(r[0], col + "upid"), int_from_sql(r[1], col + "callsite_id"),
            int_from_sql(r[2], col + "lo"), int_from_sql(r[3], col + "hi"), int_from_sql(r[4], col + "count"),
            int_from_sql(r[5], col + "size"), int_from_sql(r[6], col + "real_size"))
