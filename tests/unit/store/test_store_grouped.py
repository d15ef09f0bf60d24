"""store/grouped.py grouped_rows (_rows.c): a query's rows grouped by process, read in C on a
connection of its own, equal to what the reader's connection reads, and None (the caller reads
them itself) whenever the other connection could read something else or a value is not as
`record` writes it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from store_support import two_callsite_writer

from heapscope.errors import ProfileError
from heapscope.model import CallsiteId
from heapscope.store.alloc_labels import select_label
from heapscope.store.grouped import grouped_rows
from heapscope.store.reader import open_profile
from heapscope.store.select import select_heap
from heapscope.store.series import memory_samples_by_heap, memory_samples_by_process
from heapscope.store.values import INT, INT_OR_NULL, TEXT

SAMPLE_SQL = "SELECT upid, heap_name, callsite_id, alloc_ts, free_ts, size, weight FROM heapscope_memory_sample"
SAMPLE_TYPES = [INT, TEXT, INT, INT, INT_OR_NULL, INT, INT]


def _profile(path: Path) -> Path:
    """Two processes' memory samples in three heaps, their rows interleaved, some not freed, and
    their lifetimes and sizes."""
    w = two_callsite_writer(path)
    for upid in (1, 2):
        # callsite, kind, lo_ns, hi_ns, size_lo, size_hi, count, size, real; callsite, lo, hi, count, size, real
        w.add_lifetime_values(upid, "libc.malloc", [1, "freed", 0, 1000, 64, 128, 3, 192, 190,
                                                    2, "freed", 1000, 2000, 64, 128, 1, 64, 64,
                                                    2, "held", 0, None, 64, 128, 2, 128, 100],
                              [1, 64, 128, 3, 192, 190, 2, 64, 128, 3, 192, 164, 2, 4096, 8192, upid, 4096, 4096])
    for k in range(3):
        for upid in (2, 1):  # a process's rows do not come together
            for heap in ("libc.malloc", "mmap", "héap"):
                w.add_dump(upid, 0, 10, "exit", [(1, 1, 64)], heap)
                w.add_memory(upid, heap, [5, 64, 64, 64],
                             [1 + k % 2, 10 * k + upid, None if k == 1 else 99 + k, 64 << k, k + 1,
                              2, 3, 30, 1 << 62, 1])
    w.add_label_sets(1, [(1, (("tenant", "acme"),))])
    w.commit()
    w.close()
    return path


def _read_here(db: sqlite3.Connection, sql: str, tagged: bool) -> dict[int, list[tuple[object, ...]]]:
    out: dict[int, list[tuple[object, ...]]] = {}
    for key, *rest in db.execute(sql):
        out.setdefault(key, []).append((rest[0], tuple(rest[1:])) if tagged else tuple(rest))
    return out


@pytest.mark.parametrize("tagged", [False, True])
def test_rows_grouped_in_c_equal_the_readers_own(tmp_path: Path, tagged: bool) -> None:
    with open_profile(_profile(tmp_path / "p.db")) as prof:
        got = grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES, tagged)
        want = _read_here(prof.sql_connection(), SAMPLE_SQL, tagged)
        assert got == want
        assert list(got) == [2, 1] and len(got[1]) == 18  # keys as first met, every row in SQLite's order
        first = got[1][1 if tagged else 0]
        assert [type(v) for v in first] == ([str, tuple] if tagged else [str, int, int, int, int, int])
        # the parameters bound as the sqlite3 module binds them
        where = " WHERE upid = ? AND heap_name = ? AND free_ts IS NOT ?"
        picked = grouped_rows(prof, SAMPLE_SQL + where, [1, "héap", None], SAMPLE_TYPES)
        assert picked is not None and len(picked[1]) == 5  # 6 rows, one not freed
        assert picked[1] == [r for r in want[1] if r[0] == "héap" and r[3] is not None] if not tagged else True


def test_the_heap_shown_is_what_the_other_connection_reads(tmp_path: Path) -> None:
    """The heap views of the reader's connection are made on the other one too: each heap
    choice reads, in C, exactly the rows the reader's connection reads."""
    with open_profile(_profile(tmp_path / "p.db")) as prof:
        for shown in ("mmap", "libc.malloc+héap", "all"):
            select_heap(prof, shown)
            got = grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES)
            assert got == _read_here(prof.sql_connection(), SAMPLE_SQL, False), shown
        assert got is not None and {r[0] for r in got[1]} == {"libc.malloc", "mmap", "héap"}


def test_a_temporary_table_named_is_read_by_the_reader(tmp_path: Path) -> None:
    """A temporary table exists only on the reader's connection: a query or view naming one
    (the label chosen, symbols added over the profile's) is left to the reader, which reads
    the same rows as before; one that names none still reads in C."""
    with open_profile(_profile(tmp_path / "p.db")) as prof:
        db = prof.sql_connection()
        db.execute("CREATE TEMP TABLE stack_profile_symbol AS SELECT * FROM main.stack_profile_symbol")
        assert grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES) is not None
        assert grouped_rows(prof, "SELECT id, name FROM stack_profile_symbol", [], [INT, TEXT]) is None
        select_label(prof, "tenant=acme")  # its views name its temporary table
        select_heap(prof, "libc.malloc")
        assert grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES) is None
        here = _read_here(db, SAMPLE_SQL, False)
        assert memory_samples_by_process(prof, [1, 2]) == {u: [r[1:] for r in rows] for u, rows in here.items()}
        assert {r[0] for rows in here.values() for r in rows} == {"libc.malloc"}
        select_label(prof, None)
        assert grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES) == here


@pytest.mark.parametrize(("column", "value"), [
    ("callsite_id", "'x7'"), ("free_ts", "1.5"), ("size", "X'00'"), ("weight", "'w'"), ("heap_name", "X'33'"),
    ("upid", "'one'"), ("heap_name", "CAST(X'ff' AS TEXT)"),
])
def test_a_value_not_as_written_leaves_the_rows_to_the_reader(tmp_path: Path, column: str, value: str) -> None:
    """A value of a type `record` does not write there (or text that is not UTF-8): None, and
    the readers that use grouped_rows still read what they read without it."""
    path = _profile(tmp_path / "p.db")
    with open_profile(path) as prof:
        ok = memory_samples_by_heap(prof, [1, 2])
    db = sqlite3.connect(path)
    db.execute(f"UPDATE heapscope_memory_sample SET {column} = {value} WHERE rowid = 5")
    db.commit()
    db.close()
    with open_profile(path) as prof:
        assert grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES) is None
        rows = sum(map(len, ok.values()))
        if column in ("heap_name", "upid") and value != "CAST(X'ff' AS TEXT)":
            got = memory_samples_by_heap(prof, [1, 2])
            if column == "upid":  # a process of no such upid: not one of those read
                assert sum(map(len, got.values())) == rows - 1
            else:  # a name that is not text matches no heap, as in the heap views
                assert sum(map(len, got.values())) == rows
                assert [h for part in got.values() for h, _ in part].count("") == 1
        else:  # damage: one line, as every reader's
            with pytest.raises(ProfileError, match="heapscope_memory_sample|decode"):
                memory_samples_by_heap(prof, [1, 2])


def test_column_types_must_match_the_query(tmp_path: Path) -> None:
    with open_profile(_profile(tmp_path / "p.db")) as prof, pytest.raises(ValueError, match="column types"):
        grouped_rows(prof, SAMPLE_SQL, [], SAMPLE_TYPES[:-1])


def test_lifetime_sums_read_in_c_or_by_the_reader_agree(tmp_path: Path) -> None:
    """life_sums_by_process reads its sums and size rows in C; with a label chosen (a temporary
    table its views name) the reader reads them: the same figures, equal to those of the
    lifetimes read whole."""
    from heapscope.store.lifetimes import life_sums, life_sums_by_process, read_lifetimes_by_process

    with open_profile(_profile(tmp_path / "p.db")) as prof:
        in_c = life_sums_by_process(prof, [1, 2], 1000)
        assert in_c == {u: life_sums(lives, 1000) for u, lives in read_lifetimes_by_process(prof, [1, 2]).items()}
        assert in_c[2].temporary == {1: 192}
        assert in_c[2].sizes[CallsiteId(2)] == {(64, 128): (3, 192, 164), (4096, 8192): (2, 4096, 4096)}
        select_label(prof, "tenant=acme")
        assert grouped_rows(prof, "SELECT upid, callsite_id FROM heapscope_callsite_size", [], [INT, INT]) is None
        assert life_sums_by_process(prof, [1, 2], 1000) == in_c  # the tables carry no labels


def _delta_rows(path: Path, rows: list[tuple[int, int, str, int, int, int, int | None]]) -> Path:
    """A profile whose delta rows are `rows`: (ts, upid, heap, callsite, count, size, real size)."""
    w = two_callsite_writer(path)
    w.commit()
    w.close()
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO heap_profile_allocation (ts, upid, heap_name, callsite_id, count, size, real_size)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    return path


_REFERENCE = ("SELECT ts, {keys}, SUM(size), SUM(count), SUM(CASE WHEN size > 0 THEN size ELSE 0 END),"
              " SUM(CASE WHEN count > 0 THEN count ELSE 0 END), SUM(real_size),"
              " SUM(CASE WHEN count > 0 THEN real_size END) FROM heap_profile_allocation WHERE upid = ?"
              " GROUP BY ts, {keys} ORDER BY ts, {keys}")


def test_delta_rows_summed_in_c_are_sqlites_group_by() -> None:
    """dump_sums (_rows.c summed) gives the rows and the order of SQLite's GROUP BY: frees
    (negative rows) netted, NULL real sizes skipped and a group of NULLs only None, heap names
    in byte order, callsites and times as integers; iter_dump_values reads the same."""
    import random
    import tempfile

    from heapscope.store.grouped import dump_sums

    rng = random.Random(3)
    heaps = ["libc.malloc", "mmap", "m", "", "é", "brk"]
    rows = []
    for _ in range(3000):
        count = rng.choice([1, 2, -1, -2])
        size = count * rng.choice([16, 4096, 1 << 40])
        real = rng.choice([None, abs(size) - 1 if count > 0 else -(abs(size) - 1)])
        rows.append((rng.choice([10, 20, 30, -5]), rng.choice([1, 2]), rng.choice(heaps), rng.randint(1, 40),
                     count, size, real))
    with tempfile.TemporaryDirectory() as tmp:
        path = _delta_rows(Path(tmp) / "p.db", rows)
        with open_profile(path) as prof:
            db = prof.sql_connection()
            for upid in (1, 2):
                for by_heap, keys in ((False, "callsite_id"), (True, "heap_name, callsite_id")):
                    want = db.execute(_REFERENCE.format(keys=keys), (upid,)).fetchall()
                    assert dump_sums(prof, upid, by_heap, True) == want, (upid, by_heap)
                on_file = db.execute(_REFERENCE.format(keys="callsite_id"), (upid,)).fetchall()
                assert [(d.ts, d.callsite, *d.values) for d in prof.iter_dump_values(upid)] == on_file
                assert [r[1] for r in prof.iter_dump_values_by_heap(upid)] == \
                    [r[1] for r in db.execute(_REFERENCE.format(keys="heap_name, callsite_id"), (upid,))]


def test_sums_past_64_bits_or_many_groups_are_left_to_sqlite(tmp_path: Path) -> None:
    """A sum past 64 bits gives None (SQLite's SUM fails there too, and the reader says so in one
    line); so do more groups than asked for (a day of dumps is read a chunk at a time), more
    distinct key texts than C keeps, and a key text that is not UTF-8."""
    from heapscope.store.grouped import dump_sums, summed_rows

    big = _delta_rows(tmp_path / "big.db", [(10, 1, "libc.malloc", 1, 1, 2**62, None)] * 2)
    with open_profile(big) as prof:
        assert dump_sums(prof, 1, False, True) is None
        with pytest.raises(ProfileError, match="overflow"):
            list(prof.iter_dump_values(1))
    many = _delta_rows(tmp_path / "many.db", [(ts, 1, f"heap{ts % 70}", 1, 1, 16, 16) for ts in range(200)])
    with open_profile(many) as prof:
        sql = "SELECT ts, size FROM heap_profile_allocation"
        assert summed_rows(prof, sql, [], [INT, INT_OR_NULL], 1, 200) is not None
        assert summed_rows(prof, sql, [], [INT, INT_OR_NULL], 1, 199) is None
        assert dump_sums(prof, 1, True, True) is None  # 70 heap names
        assert len(list(prof.iter_dump_values_by_heap(1))) == 200
    bad = _delta_rows(tmp_path / "bad.db", [(10, 1, "libc.malloc", 1, 1, 16, 16)] * 2)
    db = sqlite3.connect(bad)
    db.execute("UPDATE heap_profile_allocation SET heap_name = CAST(X'ff' AS TEXT) WHERE rowid = 1")
    db.commit()
    db.close()
    with open_profile(bad) as prof:  # a heap name that is not UTF-8: one line, as before
        assert dump_sums(prof, 1, True, True) is None
        with pytest.raises(ProfileError):
            list(prof.iter_dump_values_by_heap(1))
