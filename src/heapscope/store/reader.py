"""Reads a profile database: validation on open, then typed queries.

`open_profile()` is the one door: it turns every way a file can fail to be a
heapscope profile (missing, not a regular file, not SQLite, another SQLite
database, truncated, corrupt) into a ProfileError of one line that names the
file. It never blocks: the file is opened O_NONBLOCK and checked to be a
regular file before SQLite sees it, so a FIFO or a device is refused at once.

Every query returns typed records, converted once here (store/values.py):
u64 columns come back unsigned, a NULL where the schema forbids one, text in
an integer column or a corrupt page met mid-read are one ProfileError line,
and the callsite tree is checked for parent cycles before anyone walks it.
Exporters, views and commands use these queries, never SQL of their own;
`heapscope sql` goes through store/sql.py.

The connection is read-only (`mode=ro`); reading never changes a profile.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

from heapscope.errors import ProfileError
from heapscope.model import CallsiteId, FrameId, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.checks import check_file, describe, profile_errors
from heapscope.store.convert import new_dump_values, plain_values, view_values
from heapscope.store.files import PROFILE_FORMAT, read_only_uri
from heapscope.store.grouped import dump_sums, dump_terms
from heapscope.store.rows import (
    AllocationDelta,
    Dump,
    DumpValues,
    FrameInfo,
    Mapping,
    PathFrame,
    Process,
    Stat,
    StreamEvent,
    SymbolLine,
    ViewValues,
    fallback_frame_name,
    mapping_basename,
)
from heapscope.store.tree import check_tree, plain_callsites, read_callsites
from heapscope.store.values import (
    all_as_written,
    int_from_sql,
    opt_int_from_sql,
    req_int_from_sql,
    req_str_from_sql,
    req_u64_from_sql,
    str_from_sql,
    u64_from_sql,
)
from heapscope.store.writer import SCHEMA_VERSION

TYPE_CHECKING = False  # typing.TYPE_CHECKING: record's summary reads through here (docs/README.md)
if TYPE_CHECKING:
    from typing import Concatenate, ParamSpec, TypeVar

    _T = TypeVar("_T")
    _P = ParamSpec("_P")

__all__ = [
    "PROFILE_FORMAT", "AllocationDelta", "Dump", "DumpValues", "FrameInfo", "Mapping", "PathFrame", "Process",
    "Profile", "Stat", "StreamEvent", "SymbolLine", "ViewValues", "fallback_frame_name", "mapping_basename",
    "open_profile",
]


def open_profile(path: str | os.PathLike[str]) -> Profile:
    """Open and validate a heapscope profile, read-only. Raises ProfileError."""
    p = os.fspath(path)
    check_file(p)
    try:
        uri = read_only_uri(p)
        db = sqlite3.connect(uri, uri=True)
    except (sqlite3.Error, OSError, ValueError) as e:
        raise ProfileError(f"{p}: cannot open: {e}") from e
    profile = Profile(p, db, uri)
    try:
        profile._validate()
    except BaseException:
        db.close()
        raise
    return profile


def _reads(method: Callable[Concatenate[Profile, _P], _T]) -> Callable[Concatenate[Profile, _P], _T]:
    """Decorate a Profile query so that its row conversions fail as ProfileError too."""

    @functools.wraps(method)
    def wrapper(self: Profile, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with profile_errors(self.path):
            return method(self, *args, **kwargs)

    return wrapper


class Profile:
    """A validated, read-only profile database. Close it, or use it as a context manager."""

    def __init__(self, path: str, db: sqlite3.Connection, uri: str = "") -> None:
        # uri: what `db` opened, for the reads in C on connections of their own (callsites(),
        # store/grouped.py)
        self.path, self._db, self.uri = path, db, uri
        self._frames: dict[FrameId, FrameInfo] | None = None
        self._symbols: dict[FrameId, list[SymbolLine]] | None = None
        self._python: set[FrameId] | None = None
        self._callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]] | None = None
        self._tables: dict[str, bool] = {}
        self._mappings: list[Mapping] | None = None
        # The fold's callsites over the profile's ({id: (parent, frame)} and their depths,
        # overlay_callsites), and whether SQL sees them too (callsites_in_sql)
        self._overlay: dict[CallsiteId, tuple[CallsiteId | None, FrameId]] | None = None
        self._overlay_depths: list[int] = []
        self._overlay_in_sql = False
        # Per-process values read in one pass for every process (a query per process scanned
        # the whole table each time: a 148-process build read its peak rows 296 times).
        # They depend on the heap shown: forget_values() drops them (store.select.select_heap).
        self._peak_raw: dict[object, list[tuple[object, ...]]] | None = None
        self._peaks: dict[int, tuple[int, dict[CallsiteId, ViewValues]]] | None = None
        self._stats: dict[int | None, list[Stat]] | None = None
        # Whether each process's peak rows have one ts, whatever their heap (peaks_at_one_ts):
        # a fact of the file, kept across heap switches.
        self._peak_kind: tuple[bool, bool, int] | None = None
        self._as_written: dict[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], bool] = {}  # as_written

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        with profile_errors(self.path):
            return self._db.execute(sql, params).fetchall()

    def _iter(self, sql: str, params: Sequence[object] = ()) -> Iterator[tuple[object, ...]]:
        with profile_errors(self.path):
            yield from self._db.execute(sql, params)

    def _validate(self) -> None:
        try:
            tables = {str(r[0]) for r in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        except sqlite3.DatabaseError as e:
            journal = f"{self.path}-journal"
            if "readonly database" in str(e) and os.path.lexists(journal):  # a hot journal to replay
                raise ProfileError(f"{self.path}: {journal} is the journal of a write that did not finish,"
                                   " which a read-only reader cannot replay (open the profile once with sqlite3,"
                                   " or remove the journal if it is not the profile's)") from e
            raise ProfileError(f"{self.path}: {describe(e)}") from e
        except UnicodeDecodeError as e:  # SQLite's own message quotes a name that is not UTF-8
            raise ProfileError(f"{self.path}: corrupt profile (its schema is not valid UTF-8)") from e
        if not tables:
            raise ProfileError(f"{self.path}: not a heapscope profile (an empty SQLite database)")
        if "heapscope_metadata" not in tables:
            raise ProfileError(f"{self.path}: not a heapscope profile (no heapscope_metadata table)")
        meta = self.metadata()
        if meta.get("format") != PROFILE_FORMAT:
            raise ProfileError(f"{self.path}: not a heapscope profile (no format={PROFILE_FORMAT} metadata)")
        version = meta.get("schema_version", "")
        if version != SCHEMA_VERSION:
            raise ProfileError(
                f"{self.path}: profile schema version {version or '(none)'} is not supported"
                f" (this heapscope reads version {SCHEMA_VERSION})"
            )
        missing = sorted(_REQUIRED_TABLES - tables)
        if missing:
            raise ProfileError(
                f"{self.path}: damaged heapscope profile (missing tables: {', '.join(missing)})")
        # Touch every table's root page once, so a profile whose schema pages
        # survived but whose data pages did not fails here rather than halfway
        # through a report.
        for table in sorted(_REQUIRED_TABLES):
            self._rows(f"SELECT 1 FROM {table} LIMIT 1")

    def sql_connection(self) -> sqlite3.Connection:
        """The connection itself, for store/sql.py, store/select.py's heap views, store/series.py,
        store/lifetimes.py, store/grouped.py, store/paths.py and store/peak_tops.py only."""
        return self._db

    def forget_values(self) -> None:
        """Drop what was read of the heap tables, after the heap shown changed (select_heap)."""
        self._peak_raw = None
        self._peaks = None

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """A block whose failures (SQLite errors, values of the wrong type) become one ProfileError
        line, as every query here does: for the few statements made on sql_connection()."""
        return profile_errors(self.path)

    @_reads
    def heap_names(self) -> list[str]:
        """The distinct heap names of heap_profile, as stored (any text, NULs included), unordered.
        A name that is not text (a number, a blob: damage) is shown as text; NULL is no heap."""
        return sorted({str_from_sql(r[0]) for r in self._rows("SELECT DISTINCT heap_name FROM main.heap_profile")
                       if r[0] is not None})

    @_reads
    def heap_peaks(self) -> list[tuple[int, str, int, int]]:
        """(upid, heap name, bytes, allocations) summed over each process heap's rows of
        heapscope_peak_allocation; empty for a profile from before that table."""
        if not self._has_table("heapscope_peak_allocation"):
            return []
        col = "heapscope_peak_allocation."
        return [(req_int_from_sql(r[0], col + "upid"), str_from_sql(r[1]), int_from_sql(r[2], col + "size"),
                 int_from_sql(r[3], col + "count"))
                for r in self._rows("SELECT upid, heap_name, SUM(size), SUM(count) FROM main.heapscope_peak_allocation"
                                    " GROUP BY upid, heap_name ORDER BY upid, heap_name")]

    @_reads
    def metadata(self) -> dict[str, str]:
        """The `heapscope_metadata` key/value pairs."""
        return {str_from_sql(k): str_from_sql(v) for k, v in self._rows("SELECT key, value FROM heapscope_metadata")}

    @_reads
    def interval(self) -> int:
        """The profile's sampling interval in bytes (its `interval` metadata), 1 when absent or unreadable."""
        try:
            return max(1, int(self.metadata().get("interval", "1")))
        except ValueError:
            return 1

    @_reads
    def processes(self) -> list[Process]:
        """All processes, by upid, each with its heapscope_process flags when present."""
        rows = self._rows(
            "SELECT p.upid, p.pid, p.name, p.cmdline, p.start_ts, p.end_ts, p.parent_upid, p.uid,"
            " h.upid, h.exe, h.ppid, h.from_startup, h.disconnected, h.buffer_overran,"
            " h.buffer_corrupted, h.rejected_concurrent, h.hit_guardrail, h.client_error,"
            " h.unwinder, h.sampling_interval_bytes, h.orig_sampling_interval_bytes"
            " FROM process p LEFT JOIN heapscope_process h ON h.upid = p.upid ORDER BY p.upid"
        )
        out = []
        for r in rows:
            parent = opt_int_from_sql(r[6], "process.parent_upid")
            info = ProcessInfo(
                upid=Upid(req_int_from_sql(r[0], "process.upid")), pid=req_int_from_sql(r[1], "process.pid"),
                ppid=int_from_sql(r[10], "heapscope_process.ppid"), name=str_from_sql(r[2]),
                cmdline=str_from_sql(r[3]), exe=str_from_sql(r[9]), uid=int_from_sql(r[7], "process.uid"),
                start_ts=int_from_sql(r[4], "process.start_ts"),
                end_ts=opt_int_from_sql(r[5], "process.end_ts"),
                parent_upid=None if parent is None else Upid(parent),
            )
            flags = None
            if r[8] is not None:
                flags = ProcessFlags(
                    from_startup=bool(int_from_sql(r[11])), disconnected=bool(int_from_sql(r[12])),
                    buffer_overran=bool(int_from_sql(r[13])), buffer_corrupted=bool(int_from_sql(r[14])),
                    rejected_concurrent=bool(int_from_sql(r[15])), hit_guardrail=bool(int_from_sql(r[16])),
                    client_error=str_from_sql(r[17]), unwinder=str_from_sql(r[18]),
                    sampling_interval_bytes=u64_from_sql(r[19], "heapscope_process.sampling_interval_bytes"),
                    orig_sampling_interval_bytes=u64_from_sql(
                        r[20], "heapscope_process.orig_sampling_interval_bytes"),
                )
            out.append(Process(info, flags))
        return out

    @_reads
    def dumps(self, upid: int) -> list[Dump]:
        """The `heap_profile` rows of one process, oldest first."""
        rows = self._rows(
            "SELECT id, ts, ts_end, upid, heap_name, reason FROM heap_profile WHERE upid = ?"
            " ORDER BY ts_end, id",
            (upid,),
        )
        return [Dump(req_int_from_sql(r[0], "heap_profile.id"), req_int_from_sql(r[1], "heap_profile.ts"),
                     req_int_from_sql(r[2], "heap_profile.ts_end"), Upid(req_int_from_sql(r[3], "heap_profile.upid")),
                     str_from_sql(r[4]), str_from_sql(r[5]))
                for r in rows]

    @_reads
    def last_dump_ts(self, upid: int) -> int | None:
        """The timestamp of the process's last dump, None when it has none."""
        rows = self._rows("SELECT MAX(ts_end) FROM heap_profile WHERE upid = ?", (upid,))
        return opt_int_from_sql(rows[0][0], "heap_profile.ts_end")

    @_reads
    def callsite_values(self, upid: int, ts: int | None = None) -> dict[CallsiteId, ViewValues]:
        """Each callsite's four views at `ts` (default: the last dump), all heaps merged.

        A callsite's value at T sums the delta rows of every dump up to T, as
        Perfetto's experimental_flamegraph does. Callsites without rows are absent.
        """
        if ts is None:
            ts = self.last_dump_ts(upid)
            if ts is None:
                return {}
        rows = self._rows(
            f"SELECT callsite_id, {self._view_sums()}"
            " FROM heap_profile_allocation WHERE upid = ? AND ts <= ? GROUP BY callsite_id",
            (upid, ts),
        )
        plain = plain_values(rows, (0,), 1)
        if plain is not None:
            (callsites,), values = plain
            return dict(zip(callsites, values, strict=True))
        return {CallsiteId(req_int_from_sql(r[0], _ALLOC_CALLSITE)): view_values(r, 1) for r in rows}

    @_reads
    def peak_values(self, upid: int) -> tuple[int, dict[CallsiteId, ViewValues]] | None:
        """The process's peak (heapscope_peak_allocation): its timestamp and each callsite's four
        views there, all heaps merged; None when the profile has no peak rows for it."""
        got = self._peaks.get(upid) if self._peaks is not None else None
        if got is None:
            # The first process asked for is read alone (diff, one --pid); from the second
            # on, every process's rows in one pass (report, flamegraph).
            rows = self._peak_rows().get(upid) if self._peaks is not None else self._peak_rows_of(upid)
            if rows is None:
                if self._peaks is None:
                    self._peaks = {}
                return None
            col = "heapscope_peak_allocation."
            plain = plain_values(rows, (0, 7), 1)
            if plain is not None:
                (callsites, stamps), values = plain
                by_callsite = dict(zip(callsites, values, strict=True))
                got = max(stamps), by_callsite
            else:
                ts = max(req_int_from_sql(r[7], col + "ts") for r in rows)
                got = ts, {CallsiteId(req_int_from_sql(r[0], col + "callsite_id")): view_values(r, 1)
                           for r in rows}
            if self._peaks is None:
                self._peaks = {}
            self._peaks[upid] = got
        return got

    def _peak_rows_of(self, upid: int) -> list[tuple[object, ...]] | None:
        """_peak_rows()[upid], read alone (a scan of the table, no rows of other processes)."""
        if self._peak_raw is not None:
            return self._peak_raw.get(upid)
        if not self._has_table("heapscope_peak_allocation"):
            return None
        rows = self._rows(self._peak_sql(" WHERE upid = ?"), (upid,))
        return rows or None

    @_reads
    def peak_rows_by_heap(self) -> list[tuple[object, ...]]:
        """Every peak row as stored, unconverted: callsite, the four values and two real sizes,
        ts, upid and heap name (store/peaks_by_heap.py sums them per heap set)."""
        if not self._has_table("heapscope_peak_allocation"):
            return []
        return self._rows(self._peak_sql(summed=False, heap=True))

    def _peak_sql(self, where: str = "", summed: bool = True, heap: bool = False) -> str:
        has_real = self._has_column("heapscope_peak_allocation", "real_size")
        if not summed:
            return ("SELECT callsite_id, size, count, alloc_size, alloc_count"
                    + (", real_size, alloc_real_size" if has_real else ", NULL, NULL")
                    + ", ts, upid" + (", heap_name" if heap else "") + " FROM heapscope_peak_allocation" + where)
        real = ", SUM(real_size), SUM(alloc_real_size)" if has_real else ", NULL, NULL"
        return ("SELECT callsite_id, SUM(size), SUM(count), SUM(alloc_size), SUM(alloc_count)" + real +
                ", MAX(ts), upid FROM heapscope_peak_allocation" + where +
                " GROUP BY upid, callsite_id ORDER BY upid, callsite_id")

    def _peak_rows(self) -> dict[object, list[tuple[object, ...]]]:
        """The peak rows of every process summed per callsite, as read: one pass over the table
        (it has no index by upid), each process's rows converted when it is asked for."""
        if self._peak_raw is not None:
            return self._peak_raw
        by_upid: dict[object, list[tuple[object, ...]]] = {}
        if self._has_table("heapscope_peak_allocation"):
            once = self._peak_rows_once()
            if once is not None:
                by_upid = once
            else:
                for r in self._rows(self._peak_sql()):
                    rows = by_upid.get(r[8])
                    if rows is None:
                        rows = by_upid[r[8]] = []
                    rows.append(r)
        self._peak_raw = by_upid
        return by_upid

    def _peak_rows_once(self) -> dict[object, list[tuple[object, ...]]] | None:
        """_peak_rows() when no process has two rows of one callsite (one heap, as most profiles
        have): the rows as they are, ordered here (nearly in order already), for SQLite's GROUP
        BY sorted and summed them for nothing (a build's 93k rows: 0.19 -> 0.11 s). None when
        some process has, or an id cannot be ordered (text among them: damage), for the sums."""
        rows = self._rows(self._peak_sql(summed=False))
        try:
            rows.sort(key=itemgetter(0))
            rows.sort(key=itemgetter(8))
        except TypeError:
            return None
        by_upid: dict[object, list[tuple[object, ...]]] = {}
        for upid, group in itertools.groupby(rows, itemgetter(8)):
            by_upid[upid] = members = list(group)
            if len(set(map(itemgetter(0), members))) != len(members):
                return None
        return by_upid

    @_reads
    def peak_sums(self) -> dict[int, int]:
        """upid -> the bytes unreleased at its peak (the sum of peak_values' space), for every
        process in one query; processes without peak rows are absent."""
        if not self._has_table("heapscope_peak_allocation"):
            return {}
        col = "heapscope_peak_allocation."
        return {req_int_from_sql(r[0], col + "upid"): int_from_sql(r[1], col + "size") for r in self._rows(
            "SELECT upid, SUM(size) FROM heapscope_peak_allocation GROUP BY upid")}

    @_reads
    def end_sums(self) -> dict[int, tuple[int, int, int]]:
        """upid -> (space, alloc_space, alloc_objects) summed over its callsites at its last dump,
        what callsite_values(upid) adds up to, for every process in one query."""
        rows = self._rows(
            "SELECT a.upid, SUM(a.size), SUM(CASE WHEN a.size > 0 THEN a.size ELSE 0 END),"
            " SUM(CASE WHEN a.count > 0 THEN a.count ELSE 0 END)"
            " FROM heap_profile_allocation a JOIN (SELECT upid, MAX(ts_end) AS last FROM heap_profile GROUP BY upid) d"
            " ON d.upid = a.upid AND a.ts <= d.last GROUP BY a.upid")
        col = "heap_profile_allocation."
        return {req_int_from_sql(r[0], col + "upid"): (int_from_sql(r[1], col + "size"),
                                                      int_from_sql(r[2], col + "size"),
                                                      int_from_sql(r[3], col + "count")) for r in rows}

    def _view_sums(self) -> str:
        """The six sums of heap_profile_allocation rows that make a callsite's ViewValues (the
        real sizes NULL for older profiles)."""
        return ", ".join(f"SUM({t})" for t in dump_terms(self._has_column("heap_profile_allocation", "real_size")))

    def _has_column(self, table: str, column: str) -> bool:
        key = f"{table}.{column}"
        got = self._tables.get(key)
        if got is None:
            got = self._tables[key] = any(
                str(r[1]) == column for r in self._rows(f"PRAGMA table_info({table})"))
        return got

    @_reads
    def peaks_at_one_ts(self) -> bool:
        """Whether each process's peak rows, whatever their heap, have one ts (`record` writes one
        peak per process; heaps that share it share it)."""
        return self.peak_kind()[0]

    def peak_kind(self) -> tuple[bool, bool, int]:
        """(peaks_at_one_ts; whether a peak row holds fewer than 0 bytes or a value that is not an
        integer, as `record` never writes; how many processes have peak rows): one scan of the
        rows (~20-35 ms for a build's), then kept."""
        if self._peak_kind is None:
            rows = self._rows("SELECT MIN(ts) != MAX(ts), MIN(size) FROM main.heapscope_peak_allocation"
                              " GROUP BY upid") if self._has_table("heapscope_peak_allocation") else []
            self._peak_kind = (not any(r[0] for r in rows),
                               any(r[1] is not None and not (type(r[1]) is int and r[1] >= 0) for r in rows), len(rows))
        return self._peak_kind

    def as_written(self, table: str, columns: tuple[tuple[str, tuple[str, ...]], ...], where: str = "",
                   args: Sequence[object] = (), source: str | None = None) -> bool:
        """values.all_as_written of the rows `where` picks from `source` (default `table`, as
        shown): yes at once when every row of the file's `table` is, which is checked once and
        kept (a page reading a table once per heap scanned it whole each time: a build's lifetimes
        and sizes, ~0.2 s a heap); else the rows picked are checked."""
        whole = self._as_written.get((table, columns))
        if whole is None:
            whole = self._as_written[(table, columns)] = all_as_written(self._db, f"main.{table}", columns)
        return whole or all_as_written(self._db, source or table, columns, where, args)

    def _has_table(self, name: str) -> bool:
        got = self._tables.get(name)
        if got is None:
            got = self._tables[name] = bool(self._rows(
                "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (name,)))
        return got

    @_reads
    def dump_values(self, upid: int) -> list[DumpValues]:
        """The delta rows of a process summed per (dump timestamp, callsite), by timestamp."""
        return list(self.iter_dump_values(upid))

    def iter_dump_values(self, upid: int, chunk: int = 1 << 16) -> Iterator[DumpValues]:
        """dump_values(upid), read and converted `chunk` rows at a time: a day of dumps every second
        (1.7 M rows of one process) goes through without being held at once."""
        with profile_errors(self.path):
            for rows in self._dump_chunks(upid, False, chunk):
                plain = plain_values(rows, (0, 1), 2)
                if plain is not None:
                    (stamps, callsites), values = plain
                    yield from map(new_dump_values, zip(stamps, callsites, values, strict=True))
                    continue
                yield from [DumpValues(
                    r[0] if type(r[0]) is int else req_int_from_sql(r[0], "heap_profile_allocation.ts"),
                    CallsiteId(r[1] if type(r[1]) is int else req_int_from_sql(r[1], _ALLOC_CALLSITE)),
                    view_values(r, 2)) for r in rows]

    def iter_dump_values_by_heap(self, upid: int, chunk: int = 1 << 16) -> Iterator[tuple[int, str, DumpValues]]:
        """iter_dump_values(upid) summed per heap too: (ts, heap name, its DumpValues), by
        timestamp. A page of several heaps reads a process's rows once for all of them (a build's
        ~195k rows were read once for each heap and once for their sum). A heap name that is not
        text reads as "", which no heap is named (the heap views' `heap_name IN` passes it by)."""
        with profile_errors(self.path):
            for rows in self._dump_chunks(upid, True, chunk):
                heaps = [r[1] if type(r[1]) is str else "" for r in rows]
                plain = plain_values(rows, (0, 2), 3)
                if plain is not None:
                    (stamps, callsites), values = plain
                    yield from zip(stamps, heaps, map(new_dump_values, zip(stamps, callsites, values, strict=True)),
                                   strict=True)
                    continue
                for r, heap in zip(rows, heaps, strict=True):
                    ts = r[0] if type(r[0]) is int else req_int_from_sql(r[0], "heap_profile_allocation.ts")
                    cs = CallsiteId(r[2] if type(r[2]) is int else req_int_from_sql(r[2], _ALLOC_CALLSITE))
                    yield ts, heap, DumpValues(ts, cs, view_values(r, 3))

    def _dump_chunks(self, upid: int, by_heap: bool, chunk: int) -> Iterator[list[tuple[object, ...]]]:
        """A process's delta rows summed per (ts, callsite), or (ts, heap name, callsite) `by_heap`,
        and the six sums after them: summed in C when it can (store/grouped.py), else by SQLite,
        `chunk` rows at a time."""
        real = self._has_column("heap_profile_allocation", "real_size")
        summed = dump_sums(self, upid, by_heap, real)
        if summed is not None:
            yield summed
            return
        keys = "ts, heap_name, callsite_id" if by_heap else "ts, callsite_id"
        cursor = self._db.execute(f"SELECT {keys}, {self._view_sums()} FROM heap_profile_allocation"
                                  f" WHERE upid = ? GROUP BY {keys} ORDER BY ts", (upid,))
        while rows := cursor.fetchmany(chunk):
            yield rows

    @_reads
    def dump_stamps(self, upid: int) -> list[int]:
        """The distinct timestamps of a process's delta rows, ascending (read from the index)."""
        return [req_int_from_sql(r[0], "heap_profile_allocation.ts") for r in self._rows(
            "SELECT DISTINCT ts FROM heap_profile_allocation WHERE upid = ? ORDER BY ts", (upid,))]

    @_reads
    def dump_stamps_by_heap(self, upid: int) -> list[tuple[str, int]]:
        """dump_stamps(upid) per heap: each (heap name, timestamp) of its delta rows once (a
        name that is not text as "", as iter_dump_values_by_heap reads it)."""
        return [(r[0] if isinstance(r[0], str) else "", req_int_from_sql(r[1], "heap_profile_allocation.ts"))
                for r in self._rows("SELECT DISTINCT heap_name, ts FROM heap_profile_allocation WHERE upid = ?",
                                    (upid,))]

    @_reads
    def allocation_deltas(self, upid: int, heap_name: str, after: int, upto: int) -> list[AllocationDelta]:
        """The delta rows of one process heap with `after < ts <= upto`."""
        rows = self._rows(
            "SELECT callsite_id, count, size FROM heap_profile_allocation"
            " WHERE upid = ? AND heap_name = ? AND ts > ? AND ts <= ?",
            (upid, heap_name, after, upto),
        )
        return [AllocationDelta(CallsiteId(req_int_from_sql(r[0], _ALLOC_CALLSITE)),
                                req_int_from_sql(r[1], "heap_profile_allocation.count"),
                                req_int_from_sql(r[2], "heap_profile_allocation.size")) for r in rows]

    @_reads
    def used_callsites(self, upids: Sequence[int]) -> list[CallsiteId]:
        """The callsites that have delta rows in any of `upids`, each once."""
        if not upids:
            return []
        marks = ",".join("?" * len(upids))
        rows = self._rows(
            f"SELECT DISTINCT callsite_id FROM heap_profile_allocation WHERE upid IN ({marks})", list(upids))
        return [CallsiteId(req_int_from_sql(r[0], _ALLOC_CALLSITE)) for r in rows]

    @_reads
    def callsites(self) -> dict[CallsiteId, tuple[CallsiteId | None, FrameId]]:
        """callsite id -> (parent id or None for a root, frame id); read once, checked, then cached.

        A parent that does not exist makes its child a root. A parent cycle or
        a chain deeper than MAX_CALLSITE_DEPTH is damage: ProfileError.
        """
        if self._callsites is None:
            sql = "SELECT id, parent_id, frame_id FROM main.stack_profile_callsite ORDER BY id"
            plain = read_callsites(self.uri) if self.uri else None  # None: read and checked here
            rows = self._rows(sql) if plain is None else []
            plain = plain_callsites(rows) if plain is None else plain
            if plain is None:
                plain = {}
                for r in rows:
                    parent = opt_int_from_sql(r[1], "stack_profile_callsite.parent_id")
                    plain[CallsiteId(req_int_from_sql(r[0], "stack_profile_callsite.id"))] = (
                        None if parent is None else CallsiteId(parent),
                        FrameId(req_int_from_sql(r[2], "stack_profile_callsite.frame_id")))
                check_tree(plain)
            if self._overlay:  # the fold's rows, given before the first read
                plain.update(self._overlay)
            self._callsites = plain
        return self._callsites

    def overlay_callsites(self, moved: dict[CallsiteId, tuple[CallsiteId | None, FrameId]],
                          depths: list[int]) -> None:
        """Every later read sees `moved` ({id: (parent, frame)}, of `depths` in the same order)
        in place of the profile's callsites of the same ids: view/wrappers.py's fold, which gives
        only the callsites it moves (a quarter of a compiler build's 450k) and never a cycle.
        callsites() has them at once; SQL, which few reads need, once callsites_in_sql() writes them."""
        self.drop_callsite_overlay()
        self._overlay, self._overlay_depths = moved, depths
        if self._callsites is not None:  # the fold read them: the rows go over them in place
            self._callsites.update(moved)

    def callsites_in_sql(self) -> None:
        """Make `stack_profile_callsite` (unqualified) in SQL on this connection read as
        callsites() does: a temp view of the overlay's rows over the profile's (store/paths.py,
        stack_frames). Written on the first call after overlay_callsites."""
        if not self._overlay or self._overlay_in_sql:
            return
        with profile_errors(self.path):
            self._db.execute(f"CREATE TABLE {CALLSITE_OVERLAY} (id INTEGER PRIMARY KEY, depth INTEGER NOT NULL,"
                             " parent_id INTEGER, frame_id INTEGER NOT NULL)")
            self._db.executemany(f"INSERT INTO {CALLSITE_OVERLAY} VALUES (?, ?, ?, ?)",
                                 ((cs, depth, parent, frame) for (cs, (parent, frame)), depth
                                  in zip(self._overlay.items(), self._overlay_depths, strict=True)))
            self._db.execute(
                "CREATE TEMP VIEW stack_profile_callsite AS SELECT id, depth, parent_id, frame_id"
                f" FROM {CALLSITE_OVERLAY} UNION ALL SELECT id, depth, parent_id, frame_id"
                f" FROM main.stack_profile_callsite WHERE id NOT IN (SELECT id FROM {CALLSITE_OVERLAY})")
        self._overlay_in_sql = True

    def drop_callsite_overlay(self) -> None:
        """Read the profile's own callsites again (no overlay; the cached tree forgotten)."""
        if self._overlay_in_sql:
            with profile_errors(self.path):
                self._db.execute("DROP VIEW IF EXISTS temp.stack_profile_callsite")
                self._db.execute(f"DROP TABLE IF EXISTS {CALLSITE_OVERLAY}")
        if self._overlay is not None:
            self._callsites = None
        self._overlay, self._overlay_depths, self._overlay_in_sql = None, [], False

    @_reads
    def frames(self) -> dict[FrameId, FrameInfo]:
        """frame id -> (function name, mapping name, rel_pc, mapping id); read once, then cached."""
        if self._frames is None:
            rows = self._rows(
                "SELECT f.id, f.name, m.name, f.rel_pc, f.mapping FROM stack_profile_frame f"
                " LEFT JOIN stack_profile_mapping m ON m.id = f.mapping ORDER BY f.id"
            )
            self._frames = {
                FrameId(req_int_from_sql(r[0], "stack_profile_frame.id")): FrameInfo(
                    str_from_sql(r[1]), str_from_sql(r[2]), req_u64_from_sql(r[3], "stack_profile_frame.rel_pc"),
                    MappingId(req_int_from_sql(r[4], "stack_profile_frame.mapping")))
                for r in rows}
        return self._frames

    @_reads
    def python_frames(self) -> set[FrameId]:
        """Frames of Python code (stack_profile_frame.type = 'python'), as the producer wrote them."""
        if self._python is None:  # asked once per process tree built
            self._python = {FrameId(req_int_from_sql(r[0], "stack_profile_frame.id"))
                            for r in self._rows("SELECT id FROM stack_profile_frame WHERE type = 'python'")}
        return self._python

    @_reads
    def frame_symbols(self) -> dict[FrameId, list[SymbolLine]]:
        """The symbol rows of each symbolized frame, in Perfetto's order (innermost function first)."""
        if self._symbols is not None:
            return self._symbols
        out: dict[FrameId, list[SymbolLine]] = {}
        for fid, name, file, line in self._rows(
                "SELECT f.id, s.name, s.source_file, s.line_number FROM stack_profile_frame f"
                " JOIN stack_profile_symbol s ON s.symbol_set_id = f.symbol_set_id"
                " WHERE f.symbol_set_id IS NOT NULL ORDER BY f.id, s.id"):
            out.setdefault(FrameId(req_int_from_sql(fid, "stack_profile_frame.id")), []).append(SymbolLine(
                str_from_sql(name), str_from_sql(file), int_from_sql(line, "stack_profile_symbol.line_number")))
        self._symbols = out
        return out

    @_reads
    def frame_sources(self) -> dict[FrameId, tuple[str, int | None]]:
        """frame id -> (source file, line) of the frame's own function: the outermost row of its
        symbol set (the innermost rows are functions inlined into it), when that names a file."""
        out: dict[FrameId, tuple[str, int | None]] = {}
        for fid, lines in self.frame_symbols().items():
            own = lines[-1]
            if own.source_file:
                out[fid] = (own.source_file, own.line_number or None)
        return out

    @_reads
    def mappings(self) -> list[Mapping]:
        """Every mapping, by id, u64 values unsigned; read once (chrome-json's export wants them
        at every dump of every process: 1.5 s of a build's 3 s)."""
        if self._mappings is None:
            self._mappings = self._read_mappings()
        return list(self._mappings)

    def _read_mappings(self) -> list[Mapping]:
        rows = self._rows(
            'SELECT m.id, m.build_id, m.exact_offset, m.start_offset, m.start, m."end", m.load_bias, m.name,'
            " COALESCE(MIN(f.name != ''), 0),"
            " COALESCE(MAX(f.symbol_set_id IS NOT NULL), 0)"
            " FROM stack_profile_mapping m LEFT JOIN stack_profile_frame f ON f.mapping = m.id"
            " GROUP BY m.id ORDER BY m.id")
        col = "stack_profile_mapping."
        return [Mapping(MappingId(req_int_from_sql(r[0], col + "id")), str_from_sql(r[1]),
                        u64_from_sql(r[2], col + "exact_offset"), u64_from_sql(r[3], col + "start_offset"),
                        u64_from_sql(r[4], col + "start"), u64_from_sql(r[5], col + "end"),
                        u64_from_sql(r[6], col + "load_bias"), str_from_sql(r[7]),
                        bool(int_from_sql(r[8])), bool(int_from_sql(r[9]))) for r in rows]

    @_reads
    def allocation_stream(self, upid: int) -> list[StreamEvent]:
        """A process's heapscope_allocation_stream, in sequence order (empty without --stream-allocations)."""
        col = "heapscope_allocation_stream."
        return [StreamEvent(req_str_from_sql(r[0], col + "kind"), opt_int_from_sql(r[1], col + "ts"),
                            req_u64_from_sql(r[2], col + "address"), u64_from_sql(r[3], col + "size"),
                            CallsiteId(int_from_sql(r[4], col + "callsite_id")), req_u64_from_sql(r[5], col + "seq"),
                            u64_from_sql(r[6], col + "sample_size"))
                for r in self._rows(
                    "SELECT kind, ts, address, size, callsite_id, seq, sample_size FROM heapscope_allocation_stream"
                    " WHERE upid = ? ORDER BY seq", (upid,))]

    @_reads
    def stack_frames(self, cs: CallsiteId, limit: int) -> list[FrameInfo | None]:
        """The frames of callsite `cs`, innermost first, at most `limit` of them (None: a frame
        that is not in the profile), read row by row: what a few stacks need without
        loading the callsite table. Ends at a root, a missing callsite or a repeat."""
        self.callsites_in_sql()
        out: list[FrameInfo | None] = []
        seen: set[int] = set()
        node: int | None = int(cs)
        while node is not None and len(out) < limit and node not in seen:
            seen.add(node)
            rows = self._rows(
                "SELECT c.parent_id, f.id, f.name, m.name, f.rel_pc, f.mapping FROM stack_profile_callsite c"
                " LEFT JOIN stack_profile_frame f ON f.id = c.frame_id"
                " LEFT JOIN stack_profile_mapping m ON m.id = f.mapping WHERE c.id = ?", (node,))
            if not rows:
                break
            r = rows[0]
            node = opt_int_from_sql(r[0], "stack_profile_callsite.parent_id")
            out.append(None if r[1] is None else FrameInfo(
                str_from_sql(r[2]), str_from_sql(r[3]), req_u64_from_sql(r[4], "stack_profile_frame.rel_pc"),
                MappingId(req_int_from_sql(r[5], "stack_profile_frame.mapping"))))
        return out

    @_reads
    def packages(self) -> dict[str, str]:
        """file path -> its Debian package ('' none) as `record` found them for the files it left
        with nameless frames (heapscope_mapping_package); {} in a profile without the table."""
        if not self._has_table("heapscope_mapping_package"):
            return {}
        return {str_from_sql(r[0]): str_from_sql(r[1])
                for r in self._rows("SELECT name, package FROM heapscope_mapping_package")}

    @_reads
    def python_upids(self) -> set[int]:
        """The processes whose client walked Python frames (the `python_frames` stat is 1,
        producer/stats.py): one read of the stats for every process."""
        return {req_int_from_sql(r[0], "stats.idx") for r in self._rows(
            "SELECT DISTINCT idx FROM stats WHERE name = 'python_frames' AND value = 1 AND idx IS NOT NULL")}

    def check(self) -> None:
        """Read every row through the typed queries: ProfileError at the first damaged value,
        for commands that change a profile and must not build on a damaged one."""
        self.metadata()
        for p in self.processes():
            self.dumps(p.info.upid)
            self.dump_values(p.info.upid)
            self.allocation_stream(p.info.upid)
        self.callsites()
        self.frames()
        self.frame_symbols()
        self.mappings()
        self.stats()

    @_reads
    def stats(self, upid: int | None = None) -> list[Stat]:
        """`stats` rows: all of them, or those of one process (idx = upid)."""
        if self._stats is None:
            # Read once for every process: commands ask per process, and stats has no index.
            rows = self._rows("SELECT name, idx, severity, source, value, description FROM stats ORDER BY rowid")
            every = [Stat(req_str_from_sql(r[0], "stats.name"), opt_int_from_sql(r[1], "stats.idx"),
                          req_str_from_sql(r[2], "stats.severity"), req_str_from_sql(r[3], "stats.source"),
                          req_int_from_sql(r[4], "stats.value"), str_from_sql(r[5])) for r in rows]
            by_idx: dict[int | None, list[Stat]] = {None: every}
            for st in every:
                if st.idx is not None:
                    by_idx.setdefault(st.idx, []).append(st)
            self._stats = by_idx
        return list(self._stats.get(upid, []))


_ALLOC_CALLSITE = "heap_profile_allocation.callsite_id"
CALLSITE_OVERLAY = "temp.heapscope_callsite_overlay"

_REQUIRED_TABLES = frozenset({
    "heapscope_metadata", "process", "heapscope_process", "stats", "stack_profile_mapping",
    "stack_profile_frame", "stack_profile_callsite", "heap_profile_allocation", "heap_profile",
    "stack_profile_symbol", "heapscope_allocation_stream",
})
