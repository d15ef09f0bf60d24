"""Each process's peak as `record`'s summary and its tests read it: the bytes held there and its
largest callsites, in SQL, without loading the peak rows whole (the views' peak_values does).

A build's summary ranks its ~110 processes by their peaks (peak_totals, one grouped read) and
names the largest stacks of the few it shows (peak_tops of those alone), right after make's exit.
"""

from __future__ import annotations

from collections.abc import Sequence

from heapscope.model import CallsiteId
from heapscope.store.values import I64_MAX, MAX_IN_LIST, int_from_sql, req_int_from_sql

TYPE_CHECKING = False  # typing.TYPE_CHECKING: the end of every recording imports this module
if TYPE_CHECKING:
    from heapscope.store.reader import Profile

_COL = "heapscope_peak_allocation."
Top = tuple[int, list[tuple[CallsiteId, int]]]  # (the bytes held, the largest (callsite, bytes))


def peak_callsites(profile: Profile, upid: int) -> tuple[int, list[tuple[CallsiteId, int]]] | None:
    """A process's peak: its ts and the unreleased bytes of each callsite there, largest first;
    None when the profile has no peak rows for it."""
    with profile.reading():
        rows = profile.sql_connection().execute(
            "SELECT ts, callsite_id, SUM(size) FROM heapscope_peak_allocation WHERE upid = ?"
            " GROUP BY ts, callsite_id ORDER BY 3 DESC, 2", (upid,)).fetchall()
        if not rows:
            return None
        ts = req_int_from_sql(rows[0][0], _COL + "ts")
        return ts, [(CallsiteId(req_int_from_sql(r[1], _COL + "callsite_id")), int_from_sql(r[2], _COL + "size"))
                    for r in rows if req_int_from_sql(r[0], _COL + "ts") == ts]


def peak_top(profile: Profile, upid: int, n: int) -> Top | None:
    """What peak_callsites says, in SQL: the bytes of the process's callsites with more than 0
    unreleased, and the `n` largest of them; None when the profile has no peak rows for it."""
    return peak_tops(profile, [upid], n).get(upid)


def peak_tops(profile: Profile, upids: Sequence[int], n: int) -> dict[int, Top]:
    """peak_top of each of `upids` that has peak rows, in one read (of their rows only, when
    they are few)."""
    if not upids:
        return {}
    if len(upids) > MAX_IN_LIST:
        tops = _read_tops(profile, n, None)
        return {u: tops[u] for u in upids if u in tops}
    return _read_tops(profile, n, upids)


def peak_totals(profile: Profile) -> dict[int, int]:
    """Each process's total as peak_top says it, for every process with peak rows, without
    ranking its callsites."""
    out: dict[int, int] = {}
    exact: list[int] = []
    with profile.reading():
        # A process's rows at one ts (as `record` writes them) are its peak; with no row below
        # 0, a callsite's rows of several heaps sum to more than 0 exactly when one of them
        # does: the sum of the rows above 0 is the total.
        for r in profile.sql_connection().execute(
                "SELECT upid, SUM(CASE WHEN size > 0 THEN size ELSE 0 END), MIN(size), MIN(ts), MAX(ts)"
                " FROM heapscope_peak_allocation GROUP BY upid"):
            upid = req_int_from_sql(r[0], _COL + "upid")
            if isinstance(r[2], int) and r[2] >= 0 and isinstance(r[3], int) and r[3] == r[4]:
                out[upid] = int_from_sql(r[1], _COL + "size")
            else:
                exact.append(upid)
    if exact:  # rows below 0, or at several ts: summed per callsite at the peak found
        out.update((upid, top[0]) for upid, top in peak_tops(profile, exact, 1).items())
    return out


def _read_tops(profile: Profile, n: int, upids: Sequence[int] | None) -> dict[int, Top]:
    """peak_top of every process, or of `upids` only (their rows grouped, the others' skipped)."""
    where, args = ("", ()) if upids is None else (f" WHERE upid IN ({', '.join('?' * len(upids))})", tuple(upids))
    with profile.reading():
        fast = _tops_of_rows_above_0(profile, n, where, args)
    if fast is not None:
        return fast
    # Per process: its peak's ts, the one of its largest (ts, callsite) sum; there, the
    # callsites with more than 0 and their sum (the window is taken before the cut to n).
    # A process whose peak holds nothing keeps its row, with no callsite. Rows at one ts
    # per process (as `record` writes them) need no search for the peak's ts: a build's
    # summary read them in 0.08 s instead of 0.17-0.22.
    if profile.peaks_at_one_ts():
        g, peak, on = (f"SELECT upid, callsite_id, SUM(size) AS size FROM heapscope_peak_allocation{where}"
                       " GROUP BY upid, callsite_id", "SELECT DISTINCT upid FROM g", "p.upid = g.upid")
    else:
        g, peak, on = (f"SELECT upid, ts, callsite_id, SUM(size) AS size FROM heapscope_peak_allocation{where}"
                       " GROUP BY upid, ts, callsite_id",
                       "SELECT upid, ts FROM (SELECT upid, ts, ROW_NUMBER() OVER"
                       " (PARTITION BY upid ORDER BY size DESC, callsite_id) AS r FROM g) WHERE r = 1",
                       "p.upid = g.upid AND p.ts = g.ts")
    out: dict[int, Top] = {}
    with profile.reading():
        rows = profile.sql_connection().execute(
            f"WITH g AS ({g}), peak AS ({peak}),"
            " held AS (SELECT g.upid, g.callsite_id, g.size, SUM(g.size) OVER (PARTITION BY g.upid) AS total,"
            " ROW_NUMBER() OVER (PARTITION BY g.upid ORDER BY g.size DESC, g.callsite_id) AS r"
            f" FROM g JOIN peak p ON {on} WHERE g.size > 0)"
            " SELECT p.upid, h.callsite_id, h.size, h.total FROM peak p"
            " LEFT JOIN held h ON h.upid = p.upid AND h.r <= ? ORDER BY p.upid, h.r", (*args, max(n, 1)))
        for r in rows:
            upid = req_int_from_sql(r[0], _COL + "upid")
            entry = out.get(upid)
            if entry is None:
                entry = out[upid] = (0 if r[3] is None else int_from_sql(r[3], _COL + "size"), [])
            if r[1] is not None and len(entry[1]) < n:
                entry[1].append((CallsiteId(req_int_from_sql(r[1], _COL + "callsite_id")),
                                 int_from_sql(r[2], _COL + "size")))
    return out


def _tops_of_rows_above_0(profile: Profile, n: int, where: str, args: tuple[int, ...]) -> dict[int, Top] | None:
    """_read_tops for the rows `record` writes (each process's at one ts, none below 0), from
    the rows above 0 alone: a callsite's sum is above 0 exactly when one of its rows is, so the
    ranking needs no GROUP BY of every row (a Python program's ~23k peak rows, of which ~6k
    hold bytes, took 35 ms that way after the target's exit; this, ~15). None when the rows
    are not of that kind, or a value is not an integer within int64: the SQL then sums them
    with SQLite's rules."""
    one_ts, below_0, processes = profile.peak_kind()
    if not one_ts or below_0:
        return None
    if where and 2 * len(args) < processes:
        return None  # a few processes of many (a build's summary): grouping their rows alone is cheaper
    held: dict[int, dict[int, int]] = {}
    # Each process once with no callsite (one whose peak holds nothing keeps its entry), then
    # its rows above 0.
    for upid, cs, size in profile.sql_connection().execute(
            f"SELECT DISTINCT upid, NULL, NULL FROM heapscope_peak_allocation{where} UNION ALL"
            f" SELECT upid, callsite_id, size FROM heapscope_peak_allocation{where}"
            f" {'AND' if where else 'WHERE'} size > 0", args * 2):
        if cs is None and size is None:
            if type(upid) is not int:
                return None
            held[upid] = {}
        elif type(cs) is not int or type(size) is not int:
            return None
        else:
            sums = held[upid]
            sums[cs] = sums.get(cs, 0) + size
    out: dict[int, Top] = {}
    for upid, sums in held.items():
        total = sum(sums.values())
        if total > I64_MAX:
            return None
        top = sorted(sums.items(), key=lambda item: (-item[1], item[0]))[:n]
        out[upid] = (total, [(CallsiteId(cs), size) for cs, size in top])
    return out
