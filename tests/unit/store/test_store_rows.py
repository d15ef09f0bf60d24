"""store: rows written many per statement are the rows, in the order, one per statement would write."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from heapscope.store.writer import ProfileWriter, schema_sql

N = 1000  # more than one statement's worth of every table (store/writer.py _MAX_VARIABLES), and a remainder


def _callsites(n: int) -> list[tuple[int, int, int | None, int]]:
    return [(i, i % 7, None if i % 7 == 0 else i - 1, 1 + i % 13) for i in range(1, n + 1)]


def _reference(path: Path, callsites: list[tuple[int, int, int | None, int]],
               dumps: list[tuple[int, str, list[tuple[int, ...]]]],
               peak: list[tuple[int, ...]]) -> None:
    """The same rows, one INSERT per row, straight through sqlite3."""
    db = sqlite3.connect(path)
    db.executescript(schema_sql())
    db.executemany("INSERT INTO stack_profile_callsite (id, depth, parent_id, frame_id) VALUES (?, ?, ?, ?)",
                   callsites)
    for ts, heap, rows in dumps:
        db.execute("INSERT INTO heap_profile (ts, ts_end, dur, upid, heap_name, reason) VALUES (?, ?, ?, ?, ?, ?)",
                   (0, ts, ts, 1, heap, "exit"))
        db.executemany("INSERT INTO heap_profile_allocation (ts, upid, heap_name, callsite_id, count, size,"
                       " real_size) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [(ts, 1, heap, *r, *(None,) * (4 - len(r))) for r in rows])
    db.executemany("INSERT INTO heapscope_peak_allocation (ts, upid, heap_name, callsite_id, count, size,"
                   " alloc_count, alloc_size, real_size, alloc_real_size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [(5, 1, "libc.malloc", *r) for r in peak])
    db.commit()
    db.close()


def _tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                for t in ("stack_profile_callsite", "heap_profile", "heap_profile_allocation",
                          "heapscope_peak_allocation")}
    finally:
        db.close()


def test_many_rows_per_statement_write_the_rows_one_per_statement_would(tmp_path: Path) -> None:
    # GIVEN callsites in several batches (one flat, as the producer gives them), dumps of 4- and
    # 3-value rows (real_size NULL) on two heaps, and a peak: each more rows than a statement holds
    callsites = _callsites(N)
    dumps: list[tuple[int, str, list[tuple[int, ...]]]] = [
        (10, "libc.malloc", [(1 + i % N, i, -i, 3 * i) for i in range(N + 3)]),
        (10, "app.pool", [(1 + i % N, 1, 64) for i in range(N // 2)]),
        (20, "libc.malloc", [(N, -1, -(1 << 40), -(1 << 40))]),
    ]
    peak: list[tuple[int, ...]] = [(1 + i, i, 2 * i, i + 1, 2 * i + 2, 3 * i, 3 * i + 3) for i in range(N - 1)]
    w = ProfileWriter(tmp_path / "many.db")
    w.add_callsites(callsites[:10])
    w.add_callsites_flat([v for row in callsites[10:N - 1] for v in row])
    w.add_callsites(iter(callsites[N - 1:]))
    for ts, heap, rows in dumps:
        w.add_dump(1, 0, ts, "exit", rows, heap)
    w.add_peak(1, 5, "libc.malloc", peak)
    w.close()
    _reference(tmp_path / "one.db", callsites, dumps, peak)
    # THEN every table holds the same rows in the same order (ids included)
    got, want = _tables(tmp_path / "many.db"), _tables(tmp_path / "one.db")
    assert {t: len(r) for t, r in got.items()} == {"stack_profile_callsite": N, "heap_profile": 3,
                                                      "heap_profile_allocation": N + 3 + N // 2 + 1,
                                                      "heapscope_peak_allocation": N - 1}
    assert got == want


def test_a_value_past_int64_in_a_later_statement_is_clamped_and_no_row_written_twice(tmp_path: Path) -> None:
    # GIVEN dump rows past a statement's worth, one of them (in the third statement) past int64
    w = ProfileWriter(tmp_path / "big.db")
    w.commit()
    rows = [(1 + i, 1, 16 * i, 16 * i) for i in range(N)]
    rows[600] = (601, 1, 1 << 64, 5)
    w.add_dump(1, 0, 10, "exit", rows, "libc.malloc")
    # THEN every row is there once, in order, the huge value clamped
    got = w.db.execute("SELECT callsite_id, count, size, real_size FROM heap_profile_allocation ORDER BY id").fetchall()
    assert got == [*rows[:600], (601, 1, (1 << 63) - 1, 5), *rows[601:]]
    # AND nothing was committed behind the writer's back
    w.rollback()
    assert w.db.execute("SELECT COUNT(*) FROM heap_profile_allocation").fetchone() == (0,)
    w.close()


def test_values_that_are_not_whole_rows_are_refused(tmp_path: Path) -> None:
    w = ProfileWriter(tmp_path / "odd.db")
    with pytest.raises(ValueError, match="not rows of 4"):
        w.add_callsites_flat([1, 0, None])
    assert w.db.execute("SELECT COUNT(*) FROM stack_profile_callsite").fetchone() == (0,)
    w.close()


def test_a_row_that_breaks_a_constraint_fails_the_write_and_the_rollback_drops_it_whole(tmp_path: Path) -> None:
    # GIVEN callsites past a statement's worth, one of them (in the second statement) a repeated id
    w = ProfileWriter(tmp_path / "dup.db")
    w.commit()
    rows = _callsites(N)
    rows[400] = rows[399]
    # WHEN they are written THEN the write fails with SQLite's own error
    with pytest.raises(sqlite3.IntegrityError):
        w.add_callsites(rows)
    # AND the caller's rollback (the session's, on any failed write) leaves none of them
    w.rollback()
    assert w.db.execute("SELECT COUNT(*) FROM stack_profile_callsite").fetchone() == (0,)
    w.close()
