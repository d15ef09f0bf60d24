"""Reads a profile database: validation on open, then typed queries.

`open_profile()` is the one door: it turns every way a file can fail to be a
heapscope profile (missing, not SQLite, another SQLite database, truncated,
corrupt) into a ProfileError of one line that names the file. Queries made
later that hit a corrupt page are mapped the same way, so callers only ever
see ProfileError.

The connection is read-only (`mode=ro`); reading never changes a profile.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from heapscope.errors import ProfileError
from heapscope.model import CallsiteId, FrameId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.writer import SCHEMA_VERSION

PROFILE_FORMAT = "heapscope-profile"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_HEADER_SIZE = 100


@dataclass(frozen=True, slots=True)
class Process:
    """A process of the profile with the producer's outcome for it."""

    info: ProcessInfo
    flags: ProcessFlags | None  # None when the profile has no heapscope_process row


@dataclass(frozen=True, slots=True)
class Dump:
    """One `heap_profile` row: a snapshot of one process heap."""

    id: int
    ts: int  # window start (ns)
    ts_end: int  # the dump's timestamp = heap_profile_allocation.ts
    upid: Upid
    heap_name: str
    reason: str  # exit, end, periodic, signal, peak


@dataclass(frozen=True, slots=True)
class ViewValues:
    """The four views of one callsite at one timestamp."""

    space: int  # unreleased bytes: SUM(size)
    objects: int  # unreleased allocations: SUM(count)
    alloc_space: int  # allocated bytes: SUM(size) of the positive rows
    alloc_objects: int  # allocations: SUM(count) of the positive rows

    def get(self, view: str) -> int:
        """The value of `view`, one of heapscope.model.VIEWS."""
        return int(getattr(self, view))


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """What a report needs to know about a frame."""

    name: str  # '' when not symbolized
    mapping_name: str  # path of the mapping's file, or a pseudo name like [vdso]
    rel_pc: int

    @property
    def display_name(self) -> str:
        """The function name, or `<library>+0x<rel_pc>` when there is none."""
        return self.name or fallback_frame_name(self.mapping_name, self.rel_pc)


@dataclass(frozen=True, slots=True)
class Stat:
    """One `stats` row."""

    name: str
    idx: int | None  # upid for per-process stats
    severity: str  # info, data_loss, error
    source: str  # client, producer
    value: int
    description: str


def mapping_basename(mapping_name: str) -> str:
    """`libc.so.6` for `/usr/lib/x86_64-linux-gnu/libc.so.6`; pseudo names like `[vdso]` as they are."""
    if not mapping_name:
        return "[unknown]"
    return mapping_name.rsplit("/", 1)[-1] or mapping_name


def fallback_frame_name(mapping_name: str, rel_pc: int) -> str:
    """The name of a frame without a symbol: `libfoo.so+0x1a2b`.

    One spelling shared by the symbolizer (which stores it) and the views
    (which show it for frames nobody symbolized), so the two never disagree.
    """
    return f"{mapping_basename(mapping_name)}+0x{rel_pc:x}"


def open_profile(path: str | os.PathLike[str]) -> Profile:
    """Open and validate a heapscope profile, read-only. Raises ProfileError."""
    p = Path(path)
    _check_file(p)
    try:
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise ProfileError(f"{p}: cannot open: {e}") from e
    profile = Profile(p, db)
    try:
        profile._validate()
    except BaseException:
        db.close()
        raise
    return profile


def _check_file(p: Path) -> None:
    """The checks SQLite would do vaguely or not at all, with a clear line each."""
    try:
        if p.is_dir():
            raise ProfileError(f"{p}: is a directory, not a heapscope profile")
        with p.open("rb") as f:
            header = f.read(_SQLITE_HEADER_SIZE)
        size = p.stat().st_size
    except FileNotFoundError as e:
        raise ProfileError(f"{p}: no such file") from e
    except OSError as e:
        raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e
    if not header:
        raise ProfileError(f"{p}: empty file, not a heapscope profile")
    if not header.startswith(_SQLITE_MAGIC):
        raise ProfileError(f"{p}: not a heapscope profile (not an SQLite database)")
    if len(header) < _SQLITE_HEADER_SIZE:
        raise ProfileError(f"{p}: truncated ({size} bytes, shorter than the SQLite header)")
    # The header's page count is valid when its "version-valid-for" number
    # equals the change counter (SQLite file format, section 1.3.8). A profile
    # still being recorded in WAL mode may legitimately be ahead of its main
    # file, so the size check only applies without a -wal file beside it.
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    page_count = int.from_bytes(header[28:32], "big")
    valid_for = header[92:96]
    wal_exists = Path(f"{p}-wal").exists()
    if change_counter == valid_for and not wal_exists and size < page_size * page_count:
        raise ProfileError(f"{p}: truncated ({size} of {page_size * page_count} bytes)")


_T = TypeVar("_T")
_P = ParamSpec("_P")


@contextmanager
def _profile_errors(path: Path) -> Iterator[None]:
    """Map failures met mid-read (corrupt pages, values of the wrong type) to one ProfileError line."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise ProfileError(f"{path}: {_describe(e)}") from e
    except _BadValue as e:
        raise ProfileError(f"{path}: corrupt profile ({e})") from e


def _reads(method: Callable[Concatenate[Profile, _P], _T]) -> Callable[Concatenate[Profile, _P], _T]:
    """Decorate a Profile query so that its row conversions fail as ProfileError too."""

    @functools.wraps(method)
    def wrapper(self: Profile, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with _profile_errors(self.path):
            return method(self, *args, **kwargs)

    return wrapper


class Profile:
    """A validated, read-only profile database. Close it, or use it as a context manager."""

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self.db = db
        self._frames: dict[FrameId, FrameInfo] | None = None
        self._callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]] | None = None

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        with _profile_errors(self.path):
            return self.db.execute(sql, params).fetchall()

    def _validate(self) -> None:
        try:
            tables = {str(r[0]) for r in self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        except sqlite3.DatabaseError as e:
            raise ProfileError(f"{self.path}: {_describe(e)}") from e
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

    @_reads
    def metadata(self) -> dict[str, str]:
        """The `heapscope_metadata` key/value pairs."""
        return {str(k): str(v) for k, v in self._rows("SELECT key, value FROM heapscope_metadata")}

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
            info = ProcessInfo(
                upid=Upid(_int(r[0])), pid=_int(r[1]), ppid=_int(r[10]), name=_str(r[2]),
                cmdline=_str(r[3]), exe=_str(r[9]), uid=_int(r[7]), start_ts=_int(r[4]),
                end_ts=None if r[5] is None else _int(r[5]),
                parent_upid=None if r[6] is None else Upid(_int(r[6])),
            )
            flags = None
            if r[8] is not None:
                flags = ProcessFlags(
                    from_startup=bool(r[11]), disconnected=bool(r[12]), buffer_overran=bool(r[13]),
                    buffer_corrupted=bool(r[14]), rejected_concurrent=bool(r[15]),
                    hit_guardrail=bool(r[16]), client_error=_str(r[17]), unwinder=_str(r[18]),
                    sampling_interval_bytes=_int(r[19]), orig_sampling_interval_bytes=_int(r[20]),
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
        return [Dump(_int(r[0]), _int(r[1]), _int(r[2]), Upid(_int(r[3])), _str(r[4]), _str(r[5]))
                for r in rows]

    @_reads
    def last_dump_ts(self, upid: int) -> int | None:
        """The timestamp of the process's last dump, None when it has none."""
        rows = self._rows("SELECT MAX(ts_end) FROM heap_profile WHERE upid = ?", (upid,))
        return None if rows[0][0] is None else _int(rows[0][0])

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
            "SELECT callsite_id, SUM(size), SUM(count),"
            " SUM(CASE WHEN size > 0 THEN size ELSE 0 END),"
            " SUM(CASE WHEN count > 0 THEN count ELSE 0 END)"
            " FROM heap_profile_allocation WHERE upid = ? AND ts <= ? GROUP BY callsite_id",
            (upid, ts),
        )
        return {CallsiteId(_int(r[0])): ViewValues(_int(r[1]), _int(r[2]), _int(r[3]), _int(r[4]))
                for r in rows}

    @_reads
    def callsites(self) -> dict[CallsiteId, tuple[CallsiteId | None, FrameId]]:
        """callsite id -> (parent id or None for a root, frame id); read once, then cached."""
        if self._callsites is None:
            rows = self._rows("SELECT id, parent_id, frame_id FROM stack_profile_callsite")
            self._callsites = {
                CallsiteId(_int(r[0])): (
                    None if r[1] is None else CallsiteId(_int(r[1])), FrameId(_int(r[2])))
                for r in rows
            }
        return self._callsites

    @_reads
    def frames(self) -> dict[FrameId, FrameInfo]:
        """frame id -> (function name, mapping name, rel_pc); read once, then cached."""
        if self._frames is None:
            rows = self._rows(
                "SELECT f.id, f.name, m.name, f.rel_pc FROM stack_profile_frame f"
                " LEFT JOIN stack_profile_mapping m ON m.id = f.mapping"
            )
            self._frames = {FrameId(_int(r[0])): FrameInfo(_str(r[1]), _str(r[2]), _int(r[3])) for r in rows}
        return self._frames

    @_reads
    def stats(self, upid: int | None = None) -> list[Stat]:
        """`stats` rows: all of them, or those of one process (idx = upid)."""
        sql = "SELECT name, idx, severity, source, value, description FROM stats"
        params: tuple[object, ...] = ()
        if upid is not None:
            sql += " WHERE idx = ?"
            params = (upid,)
        rows = self._rows(sql + " ORDER BY rowid", params)
        return [Stat(_str(r[0]), None if r[1] is None else _int(r[1]), _str(r[2]), _str(r[3]),
                     _int(r[4]), _str(r[5])) for r in rows]


_REQUIRED_TABLES = frozenset({
    "heapscope_metadata", "process", "heapscope_process", "stats", "stack_profile_mapping",
    "stack_profile_frame", "stack_profile_callsite", "heap_profile_allocation", "heap_profile",
})


class _BadValue(ValueError):
    """A column holds a value of the wrong type: the profile is damaged."""


def _describe(e: sqlite3.DatabaseError) -> str:
    msg = str(e)
    if "not a database" in msg:
        return "not a heapscope profile (not an SQLite database)"
    if "malformed" in msg or "corrupt" in msg:
        return f"corrupt profile ({msg})"
    return f"cannot read profile ({msg})"


def _int(v: object) -> int:
    """An INTEGER column; NULL reads as 0 (older or partial rows)."""
    if v is None:
        return 0
    if isinstance(v, int | float | str):
        try:
            return int(v)
        except ValueError:
            pass
    raise _BadValue(f"unexpected value {v!r} in an integer column")


def _str(v: object) -> str:
    return "" if v is None else str(v)
