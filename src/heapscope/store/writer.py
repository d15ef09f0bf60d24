"""Writes a profile database as the recording goes, and symbols into one later.

Every dump is committed when it is written, so a producer that dies later
loses nothing already dumped. Ids are assigned by the bookkeeping (its
interners and trie) and stored as they are. Integers are converted once, on
the way in (store/values.py): u64 columns keep all 64 bits, signed ones are
clamped, so no value can fail the recording with an OverflowError.

Files are created as store/files.py says: 0600, never through a link, an
existing profile replaced only with `force`, anything else never.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain

from heapscope.errors import OutputError
from heapscope.model import Frame, Mapping, ProcessFlags, ProcessInfo
from heapscope.store.files import PROFILE, PROFILE_FORMAT, check_replaceable, create_private, remove_file
from heapscope.store.names import SIDECARS, WRITTEN_SIDECARS
from heapscope.store.values import (
    MAX_IN_LIST,
    BadValue,
    i64_to_sql,
    opt_i64_to_sql,
    opt_u64_to_sql,
    req_int_from_sql,
    req_u64_from_sql,
    str_from_sql,
    u64_to_sql,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

SCHEMA_VERSION = "1"
# Host parameters per statement: SQLite's smallest default limit (999 before 3.32;
# https://www.sqlite.org/limits.html, "Maximum Number Of Host Parameters").
_MAX_VARIABLES = 999


def schema_sql() -> str:
    # Beside this module in the source tree and in every install (meson's install_subdir);
    # importlib.resources would cost every `record` ~10 ms of imports.
    with open(os.path.join(os.path.dirname(__file__), "schema.sql"), encoding="utf-8") as f:
        return f.read()


class ProfileWriter:
    """An open profile database being written."""

    def __init__(self, path: str | os.PathLike[str], *, force: bool = False, connect: bool = True,
                 created: bool = False) -> None:
        """Checks and creates the files; with `connect` False, the database and its schema are
        made on first use (`record`: after its target's handshake). `created`: they
        were, empty, by heapscope.launch.create_output (`record`, before its target's start).
        `path` is kept as a str: pathlib is ~3 ms of imports that `record` does without."""
        self.path = os.fspath(path)
        if not created:
            if check_replaceable(self.path, force, PROFILE):
                remove_file(self.path)
            # The database and the SQLite files beside it are all created here,
            # O_EXCL and 0600, so that none of them can be a planted link.
            for suffix in SIDECARS:
                _remove_stale(f"{self.path}{suffix}")
            os.close(create_private(self.path))
            for suffix in WRITTEN_SIDECARS:
                os.close(create_private(f"{self.path}{suffix}"))
        self._db: sqlite3.Connection | None = None
        if connect:
            self._connect()

    @property
    def connected(self) -> bool:
        """Whether the database is open (written to once): reading it then creates nothing."""
        return self._db is not None

    @property
    def db(self) -> sqlite3.Connection:
        return self._db if self._db is not None else self._connect()

    def _connect(self) -> sqlite3.Connection:
        try:
            # One thread at a time, not always the one that opened it: `heapscope live`
            # opens the profile on the main thread and records on another.
            db = sqlite3.connect(self.path, check_same_thread=False)
            # The profile is rebuilt from scratch on every run: what a dump committed must
            # survive heapscope's own end (a crash, a kill), which the kernel's page cache
            # gives; a disk flush per checkpoint does not add to that, and cost `record` a
            # wait on the disk at its start (the schema: 6 fdatasync) and at its end (the
            # final dump's checkpoint: 3 more, 10-25 ms of wall on this machine's disk).
            # https://www.sqlite.org/pragma.html#pragma_synchronous: with OFF, a committed
            # transaction is safe when the application crashes, not when the OS does.
            db.execute("PRAGMA synchronous=OFF")
            db.execute("PRAGMA journal_mode=WAL")
            # One transaction: each CREATE on its own was a commit of its own (0.3 ms more).
            db.executescript(f"BEGIN;\n{schema_sql()}\nCOMMIT;")
        except sqlite3.Error as e:
            raise OutputError(f"cannot write {self.path}: {e}") from e
        self._db = db
        self.set_metadata("format", PROFILE_FORMAT)
        self.set_metadata("schema_version", SCHEMA_VERSION)
        return db

    def set_metadata(self, key: str, value: object) -> None:
        self.db.execute("INSERT OR REPLACE INTO heapscope_metadata VALUES (?, ?)", (key, str(value)))

    def add_process(self, p: ProcessInfo) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO process (upid, pid, name, cmdline, start_ts, end_ts, parent_upid, uid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (i64_to_sql(p.upid), i64_to_sql(p.pid), p.name, p.cmdline, i64_to_sql(p.start_ts),
             opt_i64_to_sql(p.end_ts), opt_i64_to_sql(p.parent_upid), i64_to_sql(p.uid)),
        )

    def set_process_flags(self, p: ProcessInfo, f: ProcessFlags) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO heapscope_process VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (i64_to_sql(p.upid), p.exe, i64_to_sql(p.ppid), int(f.from_startup), int(f.disconnected),
             int(f.buffer_overran), int(f.buffer_corrupted), int(f.rejected_concurrent), int(f.hit_guardrail),
             f.client_error, f.unwinder, u64_to_sql(f.sampling_interval_bytes),
             u64_to_sql(f.orig_sampling_interval_bytes)),
        )

    def add_mappings(self, rows: Iterable[tuple[int, Mapping]]) -> None:
        self.db.executemany(
            'INSERT INTO stack_profile_mapping (id, build_id, exact_offset, start_offset, start, "end",'
            " load_bias, name) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((i64_to_sql(i), m.build_id, u64_to_sql(m.exact_offset), u64_to_sql(m.start_offset),
              u64_to_sql(m.start), u64_to_sql(m.end), u64_to_sql(m.load_bias), m.name)
             for i, m in rows),
        )

    def add_frames(self, rows: Iterable[tuple[int, Frame]]) -> None:
        self.db.executemany(
            "INSERT INTO stack_profile_frame (id, name, mapping, rel_pc) VALUES (?, ?, ?, ?)",
            ((i64_to_sql(i), f.name, i64_to_sql(f.mapping), u64_to_sql(f.rel_pc)) for i, f in rows),
        )

    def add_symbols(self, rows: Iterable[tuple[int, int, str, str | None, int | None, int]]) -> None:
        """stack_profile_symbol rows of (id, symbol_set_id, name, source_file, line_number, inlined)."""
        self.db.executemany(
            "INSERT INTO stack_profile_symbol (id, symbol_set_id, name, source_file, line_number, inlined)"
            " VALUES (?, ?, ?, ?, ?, ?)", rows)

    def set_frame_symbols(self, rows: Iterable[tuple[str, int, int]]) -> None:
        """Rows of (name, symbol_set_id, frame_id): a frame's symbolized name and its symbol rows."""
        self.db.executemany("UPDATE stack_profile_frame SET name = ?, symbol_set_id = ? WHERE id = ?", rows)

    def set_deobfuscated_names(self, rows: Iterable[tuple[str, int]]) -> None:
        """Rows of (deobfuscated_name, frame_id), for Java frames named through a ProGuard/R8 map."""
        self.db.executemany("UPDATE stack_profile_frame SET deobfuscated_name = ? WHERE id = ?", rows)

    def add_python_symbols(self, rows: Iterable[tuple[int, str, str, int | None]]) -> None:
        """Python frames (already in stack_profile_frame): one symbol row each, with the
        frame's file and line, and type 'python' (Perfetto's frame table has the column)."""
        rows = list(rows)
        if not rows:
            return
        (next_id,) = self.db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM stack_profile_symbol").fetchone()
        sid = int(next_id)
        syms, updates = [], []
        for k, (fid, name, file, line) in enumerate(rows):
            syms.append((i64_to_sql(sid + k), i64_to_sql(sid + k), name, file, opt_i64_to_sql(line), 0))
            updates.append((i64_to_sql(sid + k), i64_to_sql(fid)))
        self.db.executemany("INSERT INTO stack_profile_symbol (id, symbol_set_id, name, source_file, line_number,"
                            " inlined) VALUES (?, ?, ?, ?, ?, ?)", syms)
        self.db.executemany("UPDATE stack_profile_frame SET symbol_set_id = ?, type = 'python' WHERE id = ?", updates)

    def add_callsites(self, rows: Iterable[tuple[int, int, int | None, int]]) -> None:
        """Rows of (id, depth, parent_id, frame_id)."""
        self.add_callsites_flat(list(chain.from_iterable(rows)))

    def add_callsites_flat(self, values: Sequence[int | None]) -> None:
        """add_callsites' rows in one flat sequence: id, depth, parent_id, frame_id, the next id, ...
        (bookkeeping._native.Trie.take_new_flat)."""
        # The producer's ids are counters, always in range: bound as they are (a compiler's
        # final dump has ~100k rows; converting each value cost a third of writing them).
        self._insert_flat(
            "stack_profile_callsite (id, depth, parent_id, frame_id)", (), values, 4,
            lambda r: (i64_to_sql(r[0]), i64_to_sql(r[1]), opt_i64_to_sql(r[2]), i64_to_sql(r[3])))

    def add_dump(self, upid: int, ts_start: int, ts_end: int, reason: str,
                 rows: Iterable[tuple[int, ...]], heap_name: str) -> None:
        """One dump: rows of (callsite_id, count, size[, real_size]) deltas since the previous one."""
        self.add_dump_values(upid, ts_start, ts_end, reason, _flat(rows, 4), heap_name)

    def add_dump_values(self, upid: int, ts_start: int, ts_end: int, reason: str,
                        values: Sequence[int | None], heap_name: str) -> None:
        """add_dump's rows in one flat sequence: callsite_id, count, size, real_size, the next
        callsite_id, ... (ProcessHeap.dump_values)."""
        ts_start, ts_end, upid = i64_to_sql(ts_start), i64_to_sql(ts_end), i64_to_sql(upid)
        self.db.execute(
            "INSERT INTO heap_profile (ts, ts_end, dur, upid, heap_name, reason) VALUES (?, ?, ?, ?, ?, ?)",
            (ts_start, ts_end, i64_to_sql(max(0, ts_end - ts_start)), upid, heap_name, reason),
        )
        # The tracker's rows (bookkeeping/rows.py DUMP_ROW) are in range but for a callsite id
        # of 2^63 or more: bound as they are, as add_callsites' (a compiler's final dump has
        # ~20k rows).
        self._insert_flat(
            "heap_profile_allocation (ts, upid, heap_name, callsite_id, count, size, real_size)",
            (ts_end, upid, heap_name), values, 4,
            lambda r: (*r[:3], *(None if v is None else i64_to_sql(v) for v in r[3:])))

    def add_peak(self, upid: int, ts: int, heap_name: str,
                 rows: Iterable[tuple[int, ...]]) -> None:
        """A process's peak, reached at ts: rows of (callsite_id, count, size, alloc_count, alloc_size
        [, real_size, alloc_real_size])."""
        self.add_peak_values(upid, ts, heap_name, _flat(rows, 7))

    def add_peak_values(self, upid: int, ts: int, heap_name: str, values: Sequence[int | None]) -> None:
        """add_peak's rows in one flat sequence of 7 values a row (ProcessHeap.peak_values)."""
        self._insert_flat(
            "heapscope_peak_allocation"
            " (ts, upid, heap_name, callsite_id, count, size, alloc_count, alloc_size, real_size, alloc_real_size)",
            (ts, upid, heap_name), values, 7,
            lambda r: (i64_to_sql(r[0]), i64_to_sql(r[1]), r[2], *(opt_i64_to_sql(v) for v in r[3:])))

    def add_memory(self, upid: int, heap_name: str, series: Sequence[int],
                   samples: Sequence[int | None]) -> None:
        """A heap's memory over time and its kept samples (ProcessHeap.memory_values: flat rows
        of 4 and of 5 values)."""
        self._insert_flat(
            "heapscope_memory_series (upid, heap_name, ts, unreleased, unreleased_end, allocated)",
            (upid, heap_name), series, 4, lambda r: (*r[:2], *(i64_to_sql(v) for v in r[2:])))
        self._insert_flat(
            "heapscope_memory_sample (upid, heap_name, callsite_id, alloc_ts, free_ts, size, weight)",
            (upid, heap_name), samples, 5, lambda r: (*r[:2], *(opt_i64_to_sql(v) for v in r[2:])))

    def add_label_sets(self, upid: int, sets: Sequence[tuple[int, tuple[tuple[str, str], ...]]]) -> None:
        """Allocation label sets of a process: (label_set_id, its (key, value) pairs), a row per pair."""
        self.db.executemany("INSERT INTO heapscope_label (upid, label_set_id, key, value) VALUES (?, ?, ?, ?)",
                            [(upid, i, k, v) for i, pairs in sets for k, v in pairs])

    def rename_label_set(self, upid: int, label_set: int, pairs: tuple[tuple[str, str], ...]) -> None:
        """A label set written before its pairs were known, given them (producer/labels.py)."""
        self.db.execute("DELETE FROM heapscope_label WHERE upid = ? AND label_set_id = ?", (upid, label_set))
        self.add_label_sets(upid, [(label_set, pairs)])

    def add_label_dump(self, upid: int, ts: int, heap_name: str, values: Sequence[int]) -> None:
        """One dump's rows per (callsite, label set), flat: callsite_id, label_set_id, count, size,
        real_size, ... (bookkeeping/rows.py LABEL_DUMP_ROW)."""
        self._insert_flat(
            "heapscope_label_allocation (ts, upid, heap_name, callsite_id, label_set_id, count, size,"
            " real_size)", (i64_to_sql(ts), upid, heap_name), values, 5,
            lambda r: (*r[:3], *(i64_to_sql(v) for v in r[3:])))

    def add_label_peak(self, upid: int, ts: int, heap_name: str, values: Sequence[int]) -> None:
        """The rows per (callsite, label set) at the process's peak, flat (LABEL_PEAK_ROW)."""
        self._insert_flat(
            "heapscope_label_peak_allocation (ts, upid, heap_name, callsite_id, label_set_id, count,"
            " size, alloc_count, alloc_size, real_size, alloc_real_size)", (i64_to_sql(ts), upid, heap_name),
            values, 8, lambda r: (*r[:3], *(i64_to_sql(v) for v in r[3:])))

    def add_lifetime_values(self, upid: int, heap_name: str, lifetimes: Sequence[int | str | None],
                            sizes: Sequence[int]) -> None:
        """A process heap's lifetimes and sizes, cumulative, at its final dump: each table's rows in
        one flat sequence (ProcessHeap.lifetime_values: 9 and 6 values a row)."""
        # Many rows per statement, as the dumps' rows (a compiler's ~37k rows one by one, each
        # value converted in Python, were a fifth of its producer's CPU).
        head = (i64_to_sql(upid), heap_name)
        self._insert_flat(
            "heapscope_callsite_lifetime (upid, heap_name, callsite_id, kind, lo_ns, hi_ns, size_lo,"
            " size_hi, count, size, real_size)", head, lifetimes, 9,
            lambda r: (*r[:2], i64_to_sql(r[2]), r[3], *(opt_i64_to_sql(v) for v in r[4:])))
        self._insert_flat(
            "heapscope_callsite_size (upid, heap_name, callsite_id, lo, hi, count, size, real_size)",
            head, sizes, 6, lambda r: (*r[:2], *(opt_i64_to_sql(v) for v in r[2:])))

    def _insert_flat(self, into: str, head: tuple[Any, ...], values: Sequence[Any], width: int,
                     convert: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> None:
        """INSERT INTO `into` (table (columns)) of rows `head` + `width` values each, taken in
        order from the flat `values`: many rows per statement (a row per statement cost twice
        as much in binding and stepping: benchmarks/cc1plus_producer.py), the same rows in the
        same order. Values are bound as they are; from the statement where one does not fit
        SQLite's int64 on, every row goes through `convert` (store/values.py)."""
        n, odd = divmod(len(values), width)
        if odd:
            raise ValueError(f"{len(values)} values are not rows of {width}")
        if not n:
            return
        # OR FAIL: a statement that stops at a bad row keeps the rows before it, so SQLite
        # keeps no statement journal (a copy of every page a statement changes, in a temp
        # file: a fifth of the cost of a compiler's callsites). A failed write is rolled back
        # whole by its caller anyway (session/core.py).
        insert = f"INSERT OR FAIL INTO {into}"
        h = len(head)
        per = (_MAX_VARIABLES - h) // width
        # The head is bound once per statement, as ?1..?h; each plain ? after it takes the next
        # number (https://www.sqlite.org/lang_expr.html#parameters). Only the head is numbered:
        # a bind looks numbered names up one by one.
        row = "(" + ", ".join([f"?{i + 1}" for i in range(h)] + ["?"] * width) + ")"
        many = f"{insert} VALUES {', '.join([row] * per)}"
        done = 0  # rows written
        execute = self.db.execute
        try:
            while done < n:
                k = min(per, n - done)
                part = values[done * width:(done + k) * width]
                execute(many if k == per else f"{insert} VALUES {', '.join([row] * k)}",
                        [*head, *part] if h else part)
                done += k
        except OverflowError:  # raised binding the statement, before any of its rows was written
            one = "(" + ", ".join(["?"] * (h + width)) + ")"
            self.db.executemany(f"{insert} VALUES {one}",
                                (convert((*head, *values[k * width:(k + 1) * width])) for k in range(done, n)))

    def add_packages(self, packages: Iterable[tuple[str, str]]) -> None:
        """(file path, its Debian package or '') of the files with nameless frames."""
        self.db.executemany("INSERT OR REPLACE INTO heapscope_mapping_package (name, package) VALUES (?, ?)",
                            packages)

    def add_stats(self, rows: Iterable[tuple[str, int | None, str, str, int, str]]) -> None:
        """Rows of (name, idx, severity, source, value, description)."""
        self.db.executemany(
            "INSERT INTO stats VALUES (?, ?, ?, ?, ?, ?)",
            ((n, opt_i64_to_sql(i), sev, src, i64_to_sql(v), d) for n, i, sev, src, v, d in rows),
        )

    def add_stream(self, rows: Iterable[tuple[int, int, str, int | None, int, int | None, int | None, int | None]]
                   ) -> None:
        """Rows of (upid, seq, kind, ts, address, size, sample_size, callsite_id); a free has no sizes."""
        self.db.executemany(
            "INSERT INTO heapscope_allocation_stream VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((i64_to_sql(u), u64_to_sql(q), k, opt_i64_to_sql(t), u64_to_sql(a), opt_u64_to_sql(s),
              opt_u64_to_sql(ss), opt_i64_to_sql(c)) for u, q, k, t, a, s, ss, c in rows),
        )

    def symbols(self) -> SymbolWriter:
        """The symbolizer's view of this profile (it writes symbols through it)."""
        return SymbolWriter(self.db, self.path)

    def commit(self) -> None:
        self.db.commit()

    def rollback(self) -> None:
        """Drop what was added since the last commit (a write that failed half way)."""
        self.db.rollback()

    def close(self) -> None:
        self.db.commit()
        # The last checkpoint copies the log into the file without an fsync (synchronous=OFF
        # since _connect): the profile is then a file like any other a command writes (cp, a
        # compiler's output), and `record` does not wait for the disk (measured: 35-60 ms of
        # wall on this machine's disk).
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.execute("PRAGMA journal_mode=DELETE")
        self.db.close()


def _flat(rows: Iterable[tuple[int, ...]], width: int) -> list[int | None]:
    """Rows of `width` values (fewer: the last ones NULL), one after another in one list."""
    rows = rows if isinstance(rows, list) else list(rows)
    if all(len(r) == width for r in rows):
        return list(chain.from_iterable(rows))
    pad = (None,) * width
    return list(chain.from_iterable((*r, *pad[len(r):]) if len(r) < width else r[:width] for r in rows))


def _remove_stale(path: str) -> None:
    """A leftover SQLite file beside the profile being replaced (or one planted there): unlink it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(f"{path}: cannot check: {e.strerror or e}") from e
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise OutputError(f"{path}: is in the way of the profile's SQLite files and is not a regular file")
    remove_file(path)


class SymbolWriter:
    """What the symbolizer reads and writes: frames without symbols, mappings, symbol rows."""

    def __init__(self, db: sqlite3.Connection, path: str | os.PathLike[str] | None = None) -> None:
        self.db = db
        self.path = path

    def mappings(self, ids: Iterable[int] | None = None) -> dict[int, tuple[str, str]]:
        """mapping id -> (path, build id in lower case), of the mappings `ids` (None: all). A
        recording symbolizes as its processes end, each time the frames of a few mappings
        among a build's ~1,100."""
        if ids is None:
            rows = self._rows("SELECT id, name, build_id FROM stack_profile_mapping")
        else:
            rows = []
            wanted = [i64_to_sql(i) for i in ids]
            for at in range(0, len(wanted), MAX_IN_LIST):
                chunk = wanted[at:at + MAX_IN_LIST]
                rows += self._rows(f"SELECT id, name, build_id FROM stack_profile_mapping"
                                   f" WHERE id IN ({', '.join('?' * len(chunk))})", tuple(chunk))
        return {req_int_from_sql(r[0], "stack_profile_mapping.id"): (str_from_sql(r[1]), str_from_sql(r[2]).lower())
                for r in rows}

    def unsymbolized_frames(self, after: int = 0, upto: int | None = None) -> list[tuple[int, int, int, str]]:
        """(frame id, mapping id, rel_pc, name) of every frame without a symbol set (of id in (after, upto])."""
        where = "symbol_set_id IS NULL" + (" AND id > ?" if after else "")
        where += " AND id <= ?" if upto is not None else ""
        args = ((after,) if after else ()) + ((upto,) if upto is not None else ())
        return [(req_int_from_sql(r[0], "stack_profile_frame.id"),
                 req_int_from_sql(r[1], "stack_profile_frame.mapping"),
                 req_u64_from_sql(r[2], "stack_profile_frame.rel_pc"), str_from_sql(r[3]))
                for r in self._rows(f"SELECT id, mapping, rel_pc, name FROM stack_profile_frame WHERE {where}"
                                    " ORDER BY id", args)]

    def last_frame_id(self) -> int:
        """The highest frame id, 0 without frames."""
        return req_int_from_sql(self._rows("SELECT COALESCE(MAX(id), 0) FROM stack_profile_frame")[0][0],
                                "stack_profile_frame.id")

    def any_unsymbolized(self) -> bool:
        """Whether a frame has no symbol set (unsymbolized_frames() is not empty), without reading them."""
        return bool(self._rows("SELECT EXISTS (SELECT 1 FROM stack_profile_frame WHERE symbol_set_id IS NULL)")[0][0])

    def next_symbol_id(self) -> int:
        rows = self._rows("SELECT COALESCE(MAX(id) + 1, 0) FROM stack_profile_symbol")
        return req_int_from_sql(rows[0][0], "stack_profile_symbol.id")

    def write_symbols(self, symbols: Iterable[tuple[int, int, str, str | None, int | None, int]],
                      frames: Iterable[tuple[str, int | None, int]]) -> None:
        """Rows of stack_profile_symbol (id, set id, name, file, line, inlined) and of frame
        updates (name, symbol set id, frame id); committed together."""
        try:
            self.db.executemany(
                "INSERT INTO stack_profile_symbol (id, symbol_set_id, name, source_file, line_number, inlined)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                ((i64_to_sql(i), i64_to_sql(s), n, f, opt_i64_to_sql(ln), inl) for i, s, n, f, ln, inl in symbols))
            self.db.executemany("UPDATE stack_profile_frame SET name = ?, symbol_set_id = ? WHERE id = ?",
                                ((n, opt_i64_to_sql(s), i64_to_sql(f)) for n, s, f in frames))
            self.db.commit()
        except sqlite3.Error as e:
            raise OutputError(f"{self.path or 'profile'}: cannot write symbols: {e}") from e

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise OutputError(f"{self.path or 'profile'}: cannot read for symbolizing: {e}") from e


@contextmanager
def symbolize_in_place(path: Path) -> Iterator[SymbolWriter]:
    """A SymbolWriter on a private copy of the profile at `path`, renamed over it at the end.

    The copy has an unpredictable name (mkstemp, beside the profile), so no
    fixed name (and no SQLite journal of a fixed name) exists while writing,
    and the profile is replaced whole or not at all. `path` must be a
    regular file, not a link. A damaged value met while reading is an
    OutputError naming the file.
    """
    try:
        src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        why = "is a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise OutputError(f"{path}: cannot symbolize in place: {why}") from e
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{path}: cannot symbolize in place: not a regular file")
        import tempfile  # here, with shutil below: `record` never symbolizes in place (start-up cost)
        from pathlib import Path

        directory = path.parent if str(path.parent) else Path(".")
        try:
            fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as e:
            raise OutputError(f"{path}: cannot symbolize in place: {e.strerror or e}") from e
    except BaseException:
        os.close(src)
        raise
    tmp = tmp_name
    try:
        import shutil

        with os.fdopen(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            shutil.copyfileobj(fin, fout)
            os.fchmod(fout.fileno(), stat.S_IMODE(st.st_mode) & 0o666)
            if os.geteuid() == 0:
                os.fchown(fout.fileno(), st.st_uid, st.st_gid)
        db = sqlite3.connect(tmp)
        try:
            yield SymbolWriter(db, path)
            db.commit()
        except BadValue as e:
            raise OutputError(f"{path}: corrupt profile ({e})") from e
        finally:
            db.close()
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"{path}: cannot symbolize in place: {e.strerror or e}") from e
    finally:
        for name in (tmp, f"{tmp}-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
