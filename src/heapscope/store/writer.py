"""Writes a profile database as the recording goes.

Every dump is committed when it is written, so a producer that dies later
loses nothing already dumped. Ids are assigned by the bookkeeping (its
interners and trie) and stored as they are.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from heapscope.errors import OutputError
from heapscope.model import Frame, Mapping, ProcessFlags, ProcessInfo

SCHEMA_VERSION = "1"


def schema_sql() -> str:
    return resources.files("heapscope.store").joinpath("schema.sql").read_text()


class ProfileWriter:
    """An open profile database being written."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            if self.path.is_dir():
                raise OutputError(f"{self.path} is a directory")
            if self.path.exists():
                self.path.unlink()
            self.db = sqlite3.connect(self.path)
            # The profile is rebuilt from scratch on every run: durability per
            # dump matters, fsync per dump does not.
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(schema_sql())
        except (OSError, sqlite3.Error) as e:
            raise OutputError(f"cannot write {self.path}: {e}") from e
        self.set_metadata("format", "heapscope-profile")
        self.set_metadata("schema_version", SCHEMA_VERSION)

    def set_metadata(self, key: str, value: object) -> None:
        self.db.execute("INSERT OR REPLACE INTO heapscope_metadata VALUES (?, ?)", (key, str(value)))

    def add_process(self, p: ProcessInfo) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO process (upid, pid, name, cmdline, start_ts, end_ts, parent_upid, uid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (p.upid, p.pid, p.name, p.cmdline, p.start_ts, p.end_ts, p.parent_upid, p.uid),
        )

    def set_process_flags(self, p: ProcessInfo, f: ProcessFlags) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO heapscope_process VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (p.upid, p.exe, p.ppid, int(f.from_startup), int(f.disconnected), int(f.buffer_overran),
             int(f.buffer_corrupted), int(f.rejected_concurrent), int(f.hit_guardrail),
             f.client_error, f.unwinder, f.sampling_interval_bytes, f.orig_sampling_interval_bytes),
        )

    def add_mappings(self, rows: Iterable[tuple[int, Mapping]]) -> None:
        self.db.executemany(
            'INSERT INTO stack_profile_mapping (id, build_id, exact_offset, start_offset, start, "end",'
            " load_bias, name) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((i, m.build_id, m.exact_offset, m.start_offset, m.start, m.end, m.load_bias, m.name)
             for i, m in rows),
        )

    def add_frames(self, rows: Iterable[tuple[int, Frame]]) -> None:
        self.db.executemany(
            "INSERT INTO stack_profile_frame (id, name, mapping, rel_pc) VALUES (?, ?, ?, ?)",
            ((i, f.name, f.mapping, f.rel_pc) for i, f in rows),
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

    def add_callsites(self, rows: Iterable[tuple[int, int, int | None, int]]) -> None:
        """Rows of (id, depth, parent_id, frame_id)."""
        self.db.executemany(
            "INSERT INTO stack_profile_callsite (id, depth, parent_id, frame_id) VALUES (?, ?, ?, ?)", rows
        )

    def add_dump(self, upid: int, ts_start: int, ts_end: int, reason: str,
                 rows: Iterable[tuple[int, int, int]], heap_name: str) -> None:
        """One dump: rows of (callsite_id, count, size) deltas since the previous one."""
        self.db.execute(
            "INSERT INTO heap_profile (ts, ts_end, dur, upid, heap_name, reason) VALUES (?, ?, ?, ?, ?, ?)",
            (ts_start, ts_end, max(0, ts_end - ts_start), upid, heap_name, reason),
        )
        self.db.executemany(
            "INSERT INTO heap_profile_allocation (ts, upid, heap_name, callsite_id, count, size)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            ((ts_end, upid, heap_name, c, n, s) for c, n, s in rows),
        )

    def add_stats(self, rows: Iterable[tuple[str, int | None, str, str, int, str]]) -> None:
        """Rows of (name, idx, severity, source, value, description)."""
        self.db.executemany("INSERT INTO stats VALUES (?, ?, ?, ?, ?, ?)", rows)

    def add_stream(self, rows: Iterable[tuple[int, int, str, int, int, int, int, int | None]]) -> None:
        """Rows of (upid, seq, kind, ts, address, size, sample_size, callsite_id)."""
        self.db.executemany("INSERT INTO heapscope_allocation_stream VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def commit(self) -> None:
        self.db.commit()

    def close(self) -> None:
        self.db.commit()
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.execute("PRAGMA journal_mode=DELETE")
        self.db.close()
