"""Profiles of many hosts in one ClickHouse table: one row per callsite per dump, the stack as arrays.

    heapscope export prof.db --format clickhouse --to http://host:8123/profiles   (database `profiles`)
    heapscope export prof.db --format clickhouse --to chdb:/var/lib/heapscope/ch  (a local chDB directory)
    heapscope export prof.db --format clickhouse -o rows.sql                      (a script for clickhouse-client)

The layout follows Parca's columnar profile schema (pkg/profile/schema.go in
parca-dev/parca: one row per sample with its stack, the profile type columns,
labels and timestamp, sorted by profile type, labels, then time), adapted:

- the four views are four value columns of one row, not four rows with a
  `sample_type` column: a heapscope dump always has all four, so the stack is
  stored once and reading one view reads one column;
- the stack is the function names (leaf first) and their libraries, not ids
  into a stacktraces table: rows stand alone, queries need no joins, and
  ClickHouse's compression absorbs the repetition of stacks across dumps;
- host, pid and executable are columns (the views group by them) and other
  labels a Map, where Parca has dynamic label columns, which ClickHouse lacks;
- partitioned by day and ordered by (heap, host, timestamp), so one host's
  time range is one contiguous read; `profile_id` tells recordings apart.

Allocation labels (docs/labels.md): a callsite's samples under each label set are a row of
their own, the set's pairs added to the `labels` Map, and the rest a row without them.

Values are each callsite's totals at the dump (what `heapscope report` shows
for that dump), not deltas, so any one dump is a complete snapshot.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from heapscope.errors import HeapscopeError, UsageError
from heapscope.export._common import Frames, LabelParts, interval_of, pick_dumps, process_label, select_processes
from heapscope.fleet.pprof_source import wall_clock
from heapscope.model import CallsiteId
from heapscope.records import Record
from heapscope.store.reader import Profile, mapping_basename

DEFAULT_TABLE = "heapscope_samples"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BATCH = 20_000

COLUMNS = ("timestamp", "heap", "host", "pid", "executable", "labels", "profile_id", "dump", "reason", "period",
           "stack", "stack_libraries", "space", "objects", "alloc_space", "alloc_objects")


def schema(database: str, table: str = DEFAULT_TABLE) -> list[str]:
    """CREATE statements: the table and the views of docs/fleet.md."""
    t = f"{database}.{table}"
    latest = f"{t}_latest"
    views = ("sum(space) AS space, sum(objects) AS objects, sum(alloc_space) AS alloc_space,"
             " sum(alloc_objects) AS alloc_objects")
    return [
        f"CREATE DATABASE IF NOT EXISTS {database}",
        f"""CREATE TABLE IF NOT EXISTS {t} (
    timestamp DateTime64(9, 'UTC') CODEC(DoubleDelta, ZSTD),
    heap LowCardinality(String),
    host LowCardinality(String),
    pid UInt32,
    executable LowCardinality(String),
    labels Map(LowCardinality(String), String),
    profile_id LowCardinality(String),
    dump UInt32,
    reason LowCardinality(String),
    period UInt64,
    stack Array(String) CODEC(ZSTD),
    stack_libraries Array(LowCardinality(String)),
    space Int64,
    objects Int64,
    alloc_space Int64,
    alloc_objects Int64
) ENGINE = MergeTree
PARTITION BY toDate(timestamp)
ORDER BY (heap, host, timestamp, pid)""",
        # Each process's last dump (per recording): what `heapscope report` shows.
        f"""CREATE VIEW IF NOT EXISTS {latest} AS
SELECT * FROM {t}
WHERE (profile_id, host, pid, timestamp) IN
    (SELECT profile_id, host, pid, max(timestamp) FROM {t} GROUP BY profile_id, host, pid)""",
        # Top functions per process: self = callsites whose leaf is the function,
        # total = callsites with the function anywhere on the stack, once each.
        f"""CREATE VIEW IF NOT EXISTS {t}_top_functions AS
SELECT host, pid, executable, fn.1 AS function, fn.2 AS library,
    sum(space) AS total_space, sumIf(space, fn = (stack[1], stack_libraries[1])) AS self_space,
    sum(objects) AS total_objects, sumIf(objects, fn = (stack[1], stack_libraries[1])) AS self_objects,
    sum(alloc_space) AS total_alloc_space,
    sumIf(alloc_space, fn = (stack[1], stack_libraries[1])) AS self_alloc_space,
    sum(alloc_objects) AS total_alloc_objects,
    sumIf(alloc_objects, fn = (stack[1], stack_libraries[1])) AS self_alloc_objects
FROM {latest} ARRAY JOIN arrayDistinct(arrayZip(stack, stack_libraries)) AS fn
GROUP BY host, pid, executable, function, library""",
        f"""CREATE VIEW IF NOT EXISTS {t}_top_stacks AS
SELECT host, pid, executable, stack, stack_libraries, {views}
FROM {latest} GROUP BY host, pid, executable, stack, stack_libraries""",
        f"""CREATE VIEW IF NOT EXISTS {t}_by_process AS
SELECT host, pid, executable, labels, max(timestamp) AS timestamp, {views}
FROM {latest} GROUP BY host, pid, executable, labels""",
        f"""CREATE VIEW IF NOT EXISTS {t}_over_time AS
SELECT timestamp, host, pid, executable, {views}
FROM {t} GROUP BY timestamp, host, pid, executable ORDER BY timestamp""",
    ]


def rows(profile: Profile, *, host: str | None = None, labels: dict[str, str] | None = None,
         pid: int | None = None, dump: int | str | None = None) -> Iterator[dict[str, Any]]:
    """The table's rows for every dump (or dump `dump`: N, or "end", the last) of every process
    (or of `pid`). The rows are dumps: a process's peak is not one of them unless recorded as one."""
    from heapscope.store.select import ALL_HEAPS, heap_names, parse_dump, select_heap

    chosen = parse_dump(dump) if isinstance(dump, str) else dump  # as the command line gave it
    if chosen == "end":
        chosen = -1
    elif isinstance(chosen, str):  # peak
        raise UsageError(f"--dump {dump}: ClickHouse rows are the recorded dumps; choose end or a dump number"
                         " (record with --dump-at-max to have the peak among them)")
    host = host if host is not None else socket.gethostname()
    labels = dict(labels or {})
    to_unix = wall_clock(profile)
    meta = profile.metadata()
    profile_id = hashlib.sha1(
        "\0".join((meta.get("started_unix_ns", ""), meta.get("command", ""), os.path.basename(profile.path))).encode()
    ).hexdigest()[:16]
    frames = Frames(profile)
    stacks: dict[CallsiteId, tuple[list[str], list[str]]] = {}

    def stack(cs: CallsiteId) -> tuple[list[str], list[str]]:
        got = stacks.get(cs)
        if got is None:
            path = frames.path(cs)[::-1]  # leaf first, as pprof and Parca order locations
            names, libs = [], []
            for fid in path:
                info = frames.info.get(fid)
                names.append(info.display_name if info is not None else f"[frame {fid}]")
                libs.append(mapping_basename(info.mapping_name) if info is not None else "[unknown]")
            got = stacks[cs] = (names, libs)
        return got

    # Custom heaps: one heap at a time (callsite_values sums the heaps a profile shows); each
    # row names its heap, and dump numbers count the dumps of that heap.
    heaps = heap_names(profile)
    for heap in heaps or [ALL_HEAPS]:
        if len(heaps) > 1:
            select_heap(profile, heap)
        yield from _heap_rows(profile, pid, chosen, host, labels, profile_id, to_unix, stack)
    if len(heaps) > 1:
        select_heap(profile, ALL_HEAPS)


def _heap_rows(profile: Profile, pid: int | None, dump: int | None, host: str, labels: dict[str, str],
               profile_id: str, to_unix: Callable[[int], int],
               stack: Callable[[CallsiteId], tuple[list[str], list[str]]]) -> Iterator[dict[str, Any]]:
    for p in select_processes(profile, pid):
        period = interval_of(profile, p)
        exe = p.info.exe or p.info.name
        for n, d in _numbered(pick_dumps(profile.dumps(p.info.upid), dump, process_label(p)),
                              profile.dumps(p.info.upid)):
            ts = to_unix(d.ts_end)
            stamp = _datetime64(ts)
            split = LabelParts(profile, p.info.upid, "dump", d.ts_end)
            for cs, whole in sorted(profile.callsite_values(p.info.upid, d.ts_end).items()):
                # A row per allocation label set (its pairs in the labels Map, docs/labels.md), and
                # one for the rest.
                for pairs, v in split.parts(cs, whole):
                    if not (v.space or v.objects or v.alloc_space or v.alloc_objects):
                        continue
                    names, libs = stack(cs)
                    yield {"timestamp": stamp, "heap": d.heap_name, "host": host, "pid": p.info.pid,
                           "executable": exe, "labels": {**labels, **dict(pairs)} if pairs else labels,
                           "profile_id": profile_id, "dump": n,
                           "reason": d.reason, "period": period, "stack": names, "stack_libraries": libs,
                           "space": v.space, "objects": v.objects, "alloc_space": v.alloc_space,
                           "alloc_objects": v.alloc_objects}


def _numbered(chosen: Sequence[Any], every: Sequence[Any]) -> Iterator[tuple[int, Any]]:
    """(1-based number among all of the process's dumps, dump) for the chosen dumps."""
    ids = {d.id: i + 1 for i, d in enumerate(every)}
    for d in chosen:
        yield ids[d.id], d


# --- destinations ---------------------------------------------------------------------


class Destination(Record, frozen=True):
    """A parsed --to URL."""

    url: str
    kind: str  # "server" or "chdb"
    database: str
    table: str
    host: str = ""
    port: int = 0
    secure: bool = False
    username: str = ""
    password: str = ""
    path: str = ""  # chdb: the data directory


def parse_destination(url: str) -> Destination:
    """`http[s]://[user[:password]@]host[:port]/database[/table]` or `chdb:DIR[#database[.table]]`."""
    from urllib.parse import unquote, urlsplit

    if url.startswith("chdb:"):
        rest, _, where = url[len("chdb:"):].partition("#")
        rest = rest[2:] if rest.startswith("//") else rest
        if not rest:
            raise UsageError(f"--to {url!r}: chdb: needs a directory, e.g. chdb:/var/tmp/heapscope-ch")
        database, _, table = where.partition(".")
        return _checked(Destination(url, "chdb", database or "heapscope", table or DEFAULT_TABLE, path=rest))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UsageError(f"--to {url!r}: {e}") from e
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"--to {url!r}: expected http://HOST:8123/DATABASE or chdb:DIR")
    if not parts.hostname:
        raise UsageError(f"--to {url!r}: no host")
    segs = [s for s in parts.path.split("/") if s]
    if len(segs) > 2:
        raise UsageError(f"--to {url!r}: the path is /DATABASE or /DATABASE/TABLE")
    database = segs[0] if segs else "heapscope"
    table = segs[1] if len(segs) > 1 else DEFAULT_TABLE
    return _checked(Destination(
        url, "server", database, table, host=parts.hostname,
        port=port or (8443 if parts.scheme == "https" else 8123), secure=parts.scheme == "https",
        username=unquote(parts.username or os.environ.get("CLICKHOUSE_USER", "default")),
        password=unquote(parts.password or os.environ.get("CLICKHOUSE_PASSWORD", ""))))


def _checked(d: Destination) -> Destination:
    for what, name in (("database", d.database), ("table", d.table)):
        if not _IDENT.match(name):
            raise UsageError(f"--to {d.url!r}: {what} name {name!r} is not a plain identifier")
    return d


class Writer:
    """Runs the schema and inserts rows in JSONEachRow batches, into chDB or a server."""

    def __init__(self, dest: Destination, *, timeout: float = 30.0) -> None:
        self.dest = dest
        self._session: Any = None
        self._client: Any = None
        try:
            if dest.kind == "chdb":
                try:
                    from chdb import session
                except ModuleNotFoundError as e:
                    raise UsageError("--to chdb: needs chdb: pip install 'heapscope[clickhouse]'") from e
                self._session = session.Session(dest.path)  # type: ignore[no-untyped-call,unused-ignore]  # typed only when chdb is installed
            else:
                try:
                    import clickhouse_connect
                except ModuleNotFoundError as e:
                    raise UsageError("--to http://...: needs clickhouse-connect: pip install 'heapscope[fleet]'") from e
                _quiet_driver()
                self._client = clickhouse_connect.get_client(
                    host=dest.host, port=dest.port, username=dest.username, password=dest.password,
                    secure=dest.secure, connect_timeout=timeout, send_receive_timeout=timeout)
        except HeapscopeError:
            raise
        except Exception as e:
            raise HeapscopeError(f"ClickHouse {_where(dest)}: {_first_line(e)}") from e

    def execute(self, sql: str) -> None:
        try:
            if self._session is not None:
                self._session.query(sql)
            else:
                self._client.command(sql)
        except Exception as e:
            raise HeapscopeError(f"ClickHouse {_where(self.dest)}: {_first_line(e)}") from e

    def create(self) -> None:
        for sql in schema(self.dest.database, self.dest.table):
            self.execute(sql)

    def insert(self, batch: Sequence[dict[str, Any]]) -> None:
        if not batch:
            return
        body = "\n".join(json.dumps(r, separators=(",", ":")) for r in batch)
        table = f"{self.dest.database}.{self.dest.table}"
        try:
            if self._session is not None:
                # Data inline in the query goes through the SQL parser (3x slower, measured
                # in benchmarks/fleet.py); a file in the chDB directory the user named does not.
                staged = Path(self.dest.path) / f".heapscope-insert-{os.getpid()}.json"
                # O_EXCL|O_NOFOLLOW: never write through (nor later remove) a file or symlink planted there
                fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        f.write(body)
                    cols = ", ".join(COLUMNS)
                    self._session.query(f"INSERT INTO {table} ({cols}) SELECT {cols}"
                                        f" FROM file('{_sql_string(str(staged.resolve()))}', JSONEachRow)")
                finally:
                    staged.unlink(missing_ok=True)
            else:
                self._client.raw_insert(table, column_names=list(COLUMNS), insert_block=body.encode(),
                                        fmt="JSONEachRow")
        except Exception as e:
            raise HeapscopeError(f"ClickHouse {_where(self.dest)}: insert failed: {_first_line(e)}") from e

    def query(self, sql: str) -> list[list[Any]]:
        """Rows of a SELECT (used by tests and the benchmark)."""
        try:
            if self._session is not None:
                out = self._session.query(sql, "JSONCompact").bytes()
                return list(json.loads(out)["data"]) if out else []
            return [list(r) for r in self._client.query(sql).result_rows]
        except Exception as e:
            raise HeapscopeError(f"ClickHouse {_where(self.dest)}: {_first_line(e)}") from e

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write(profile: Profile, dest: Destination | str, *, host: str | None = None,
          labels: dict[str, str] | None = None, pid: int | None = None, dump: int | str | None = None) -> int:
    """Create the table and views if needed and insert the profile's rows; returns the row count."""
    dest = parse_destination(dest) if isinstance(dest, str) else dest
    count = 0
    with Writer(dest) as w:
        w.create()
        batch: list[dict[str, Any]] = []
        for r in rows(profile, host=host, labels=labels, pid=pid, dump=dump):
            batch.append(r)
            if len(batch) >= _BATCH:
                w.insert(batch)
                count += len(batch)
                batch = []
        w.insert(batch)
        count += len(batch)
    return count


def write_script(profile: Profile, out: BinaryIO, *, database: str = "heapscope", table: str = DEFAULT_TABLE,
                 host: str | None = None, labels: dict[str, str] | None = None, pid: int | None = None,
                 dump: int | str | None = None) -> int:
    """The same as a SQL script (`clickhouse-client --multiquery < FILE`); returns the row count."""
    for sql in schema(database, table):
        out.write((sql + ";\n").encode())
    count = 0
    batch: list[str] = []

    def flush() -> None:
        if batch:
            out.write(f"INSERT INTO {database}.{table} FORMAT JSONEachRow\n".encode())
            out.write(("\n".join(batch) + "\n;\n").encode())
            batch.clear()

    for r in rows(profile, host=host, labels=labels, pid=pid, dump=dump):
        batch.append(json.dumps(r, separators=(",", ":")))
        count += 1
        if len(batch) >= _BATCH:
            flush()
    flush()
    return count


def _datetime64(unix_ns: int) -> str:
    """'YYYY-MM-DD hh:mm:ss.nnnnnnnnn' (UTC): the one text form every ClickHouse input format parses alike."""
    sec, ns = divmod(max(0, unix_ns), 1_000_000_000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec)) + f".{ns:09d}"


def _sql_string(text: str) -> str:
    """`text` inside a single-quoted ClickHouse string literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _where(dest: Destination) -> str:
    return dest.path if dest.kind == "chdb" else f"{dest.host}:{dest.port}"


def _first_line(e: BaseException) -> str:
    """What went wrong, short: drivers wrap the socket error in layers of text."""
    text = str(e)
    for needle, said in (("Connection refused", "cannot connect (connection refused)"),
                         ("Name or service not known", "cannot resolve host"),
                         ("timed out", "no answer in time")):
        if needle in text:
            return said
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else type(e).__name__


def _quiet_driver() -> None:
    """clickhouse-connect logs its errors too; heapscope says each failure once, in one line."""
    import logging

    log = logging.getLogger("clickhouse_connect")
    log.addHandler(logging.NullHandler())
    log.propagate = False
