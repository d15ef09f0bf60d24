"""store/writer.py: how a new profile's schema is written."""

from __future__ import annotations

import os
from pathlib import Path

from heapscope.store.writer import ProfileWriter

_WAL_HEADER, _FRAME_HEADER = 32, 24


def test_a_new_profiles_schema_is_written_in_one_transaction(tmp_path: Path) -> None:
    # WHEN a profile is created (its schema written, before any dump)
    w = ProfileWriter(tmp_path / "p.db")
    db = w.db
    try:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        frames = (os.path.getsize(tmp_path / "p.db-wal") - _WAL_HEADER) // (page + _FRAME_HEADER)
    finally:
        w.close()
    # THEN the write-ahead log holds each page of it about once: one commit for all of its tables
    # and the metadata's (a commit a CREATE rewrote the schema's pages each time: 62 frames for 28 pages)
    assert pages > 20
    assert frames <= pages + 4
