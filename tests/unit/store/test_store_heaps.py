"""store/select.py's heap choice (docs/profile.md, "Heaps") on profiles written here:
the default heap, --heap NAME and all, and that each read sees only the heap chosen."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import two_callsite_writer

from heapscope.model import Frame, Mapping, MappingId, ProcessInfo, Upid
from heapscope.store.peak_tops import peak_top, peak_tops, peak_totals
from heapscope.store.reader import open_profile
from heapscope.store.select import (
    UnknownHeapError,
    default_heap,
    heap_names,
    heap_peaks,
    resolve_heap,
    select_heap,
)
from heapscope.store.writer import ProfileWriter


def write(path: Path, heaps: dict[str, int]) -> Path:
    """One process, one callsite; per heap one dump of `size` bytes and a peak of the same."""
    w = ProfileWriter(path)
    w.add_process(ProcessInfo(Upid(1), 42, 1, "p", "p", "/p", 0, 1))
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1)])
    for name, size in heaps.items():
        w.add_dump(1, 0, 10, "exit", [(1, 1, size)], name)
        w.add_peak(1, 5, name, [(1, 1, size, 1, size)])
    w.commit()
    w.close()
    return path


def shown_total(path: Path, heap: str | None) -> tuple[str | None, int]:
    with open_profile(path) as prof:
        shown = select_heap(prof, heap)
        values = prof.callsite_values(1)
        peak = prof.peak_values(1)
        dumps = prof.dumps(1)
        assert len(dumps) == (len(heap_names(prof)) if shown is None else 1)
        assert peak is not None and sum(v.space for v in peak[1].values()) == sum(v.space for v in values.values())
        return shown, sum(v.space for v in values.values())


def test_libc_malloc_is_the_default_and_others_are_chosen(tmp_path: Path) -> None:
    db = write(tmp_path / "a.db", {"libc.malloc": 4096, "app.pool": 100000, "app.arena": 7})
    with open_profile(db) as prof:
        assert heap_names(prof) == ["libc.malloc", "app.arena", "app.pool"]
        assert default_heap(prof) == "libc.malloc"
        assert heap_peaks(prof) == [(1, "libc.malloc", 4096, 1), (1, "app.arena", 7, 1), (1, "app.pool", 100000, 1)]
    assert shown_total(db, None) == ("libc.malloc", 4096)
    assert shown_total(db, "app.pool") == ("app.pool", 100000)
    assert shown_total(db, "all") == (None, 4096 + 100000 + 7)


def test_without_libc_malloc_the_largest_peak_is_the_default(tmp_path: Path) -> None:
    # A heapprofd trace of, say, a Java heap and a custom one: the heap holding the most.
    db = write(tmp_path / "b.db", {"com.android.art": 50, "zz.big": 900, "aa.big": 900})
    with open_profile(db) as prof:
        assert default_heap(prof) == "aa.big"  # ties by name
    assert shown_total(db, None) == ("aa.big", 900)


def test_one_heap_and_no_heap(tmp_path: Path) -> None:
    db = write(tmp_path / "c.db", {"unknown": 12})
    with open_profile(db) as prof:
        assert default_heap(prof) == "unknown" and resolve_heap(prof, None) == "unknown"
    assert shown_total(db, None) == ("unknown", 12)
    empty = write(tmp_path / "d.db", {})
    with open_profile(empty) as prof:
        assert default_heap(prof) is None and select_heap(prof, None) is None


def test_unknown_heap_names_those_present(tmp_path: Path) -> None:
    db = write(tmp_path / "e.db", {"libc.malloc": 1, "app.pool": 2})
    with open_profile(db) as prof, pytest.raises(UnknownHeapError) as e:
        select_heap(prof, "nope")
    assert str(e.value).endswith("no heap named 'nope' (heaps: libc.malloc, app.pool; or all for every heap merged)")


def test_the_file_is_not_changed(tmp_path: Path) -> None:
    """The choice lives on the reading connection only: another reader sees every heap."""
    db = write(tmp_path / "f.db", {"libc.malloc": 1, "app.pool": 2})
    before = db.read_bytes()
    with open_profile(db) as prof:
        select_heap(prof, "app.pool")
        with open_profile(db) as other:
            assert len(other.dumps(1)) == 2
    assert db.read_bytes() == before


def test_a_python_program_shows_malloc_and_pymalloc_together(tmp_path: Path) -> None:
    """libc.malloc and python.pymalloc are disjoint (client/pymem.c books a request once): by default
    both, summed, at the peak too (each heap's own peak, at different times); a custom heap stays apart."""
    w = ProfileWriter(tmp_path / "py.db")
    w.add_process(ProcessInfo(Upid(1), 42, 1, "p", "p", "/p", 0, 1))
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 1)])
    for name, size, peak_ts in (("libc.malloc", 1000, 5), ("python.pymalloc", 30000, 7), ("app.pool", 500, 6)):
        w.add_dump(1, 0, 10, "exit", [(2 if name == "python.pymalloc" else 1, 1, size)], name)
        w.add_peak(1, peak_ts, name, [(1, 1, size, 1, size)])
    w.commit()
    w.close()
    db = tmp_path / "py.db"
    with open_profile(db) as prof:
        assert heap_names(prof) == ["libc.malloc", "python.pymalloc", "app.pool"]
        assert default_heap(prof) == "libc.malloc+python.pymalloc"
        assert select_heap(prof, None) == "libc.malloc+python.pymalloc"
        assert sum(v.space for v in prof.callsite_values(1).values()) == 31000
        assert len(prof.dumps(1)) == 2
        peak = prof.peak_values(1)
        assert peak is not None and sum(v.space for v in peak[1].values()) == 31000
        assert resolve_heap(prof, "python.pymalloc+libc.malloc") == "libc.malloc+python.pymalloc"
        assert select_heap(prof, "app.pool+libc.malloc") == "libc.malloc+app.pool"
        assert sum(v.space for v in prof.callsite_values(1).values()) == 1500
        with pytest.raises(UnknownHeapError, match="'nope'"):
            resolve_heap(prof, "libc.malloc+nope")
    assert shown_total(db, "python.pymalloc") == ("python.pymalloc", 30000)
    assert shown_total(db, "libc.malloc") == ("libc.malloc", 1000)


def test_the_mapped_heaps_join_the_default_sum(tmp_path: Path) -> None:
    """mmap and brk (client/maps.c: what the program maps itself, never malloc's own mappings) are
    disjoint from libc.malloc and python.pymalloc: by default all those present, summed, in that
    order; a custom heap stays apart, and --heap picks one of them alone."""
    w = ProfileWriter(tmp_path / "maps.db")
    w.add_process(ProcessInfo(Upid(1), 42, 1, "p", "p", "/p", 0, 1))
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 1)])
    for name, size in (("brk", 7000), ("app.pool", 500), ("mmap", 40000), ("libc.malloc", 1000)):
        w.add_dump(1, 0, 10, "exit", [(1, 1, size)], name)
        w.add_peak(1, 5, name, [(1, 1, size, 1, size)])
    w.commit()
    w.close()
    with open_profile(tmp_path / "maps.db") as prof:
        assert heap_names(prof) == ["libc.malloc", "mmap", "brk", "app.pool"]
        assert default_heap(prof) == "libc.malloc+mmap+brk"
        assert select_heap(prof, None) == "libc.malloc+mmap+brk"
        assert sum(v.space for v in prof.callsite_values(1).values()) == 48000
        assert select_heap(prof, "mmap") == "mmap"
        assert sum(v.space for v in prof.callsite_values(1).values()) == 40000


def _peak_view_steps(path: Path, processes: int) -> int:
    """SQLite's VM steps for reading the default heap's peak rows whole, on `processes` processes."""
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(cs, 0, None, 1) for cs in range(1, 21)])
    for upid in range(1, processes + 1):
        w.add_process(ProcessInfo(Upid(upid), 1000 + upid, 1, "p", "p", "/p", 0, 1))
        w.add_dump(upid, 0, 10, "exit", [(1, 1, 64)], "libc.malloc")
        w.add_dump(upid, 0, 10, "exit", [(1, 1, 4096)], "mmap")
        w.add_peak(upid, 5, "libc.malloc", [(cs, 1, 64, 1, 64) for cs in range(1, 21)])
        w.add_peak(upid, 7, "mmap", [(1, 1, 4096, 1, 4096)])
    w.commit()
    w.close()
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    with open_profile(path) as prof:
        assert select_heap(prof, None) == "libc.malloc+mmap"
        db = prof.sql_connection()
        db.set_progress_handler(step, 100)
        rows = db.execute("SELECT upid, ts, SUM(size) FROM heapscope_peak_allocation GROUP BY upid, ts").fetchall()
        db.set_progress_handler(None, 0)
    # each process's rows at the later of its two heaps' peaks, both heaps summed
    assert rows == [(upid, 7, 20 * 64 + 4096) for upid in range(1, processes + 1)], rows[:3]
    return steps[0]


def test_the_default_heaps_peak_rows_are_read_in_time_linear_in_the_rows(tmp_path: Path) -> None:
    """The view that puts several heaps' peak rows at one peak per process joined each process's
    peak by scanning every row once per process: a build's 113 processes took 1.05 s to read
    whole, 5x the table alone, and `record`'s summary and every view paid it. Twice the
    processes now cost about twice the work, not four times."""
    small = _peak_view_steps(tmp_path / "small.db", 100)
    large = _peak_view_steps(tmp_path / "large.db", 400)
    assert large < 6 * small, (small, large)


def test_the_summarys_peak_read_follows_the_heap_shown(tmp_path: Path) -> None:
    """peak_top reads the peak of the heap shown, whichever was shown before (it kept every
    process's peak, and a later select_heap had to drop it, as it drops the other values read)."""
    path = write(tmp_path / "p.db", {"libc.malloc": 1000, "app.pool": 300})
    with open_profile(path) as prof:
        assert select_heap(prof, "libc.malloc") == "libc.malloc"
        assert peak_top(prof, 1, 3) == (1000, [(1, 1000)])
        assert select_heap(prof, "app.pool") == "app.pool"
        assert peak_top(prof, 1, 3) == (300, [(1, 300)])


def _two_heaps(path: Path, mmap_peak_ts: int) -> Path:
    """Two processes, libc.malloc and mmap, each process's libc.malloc peak at ts 5."""
    w = two_callsite_writer(path)
    for upid in (1, 2):
        w.add_dump(upid, 0, 10, "exit", [(1, 1, 100)], "libc.malloc")
        w.add_dump(upid, 0, 10, "exit", [(2, 1, 4096)], "mmap")
        w.add_peak(upid, 5, "libc.malloc", [(1, 1, 100 * upid, 1, 100 * upid)])
        w.add_peak(upid, mmap_peak_ts, "mmap", [(2, 1, 4096, 1, 4096)])
    w.commit()
    w.close()
    return path


def test_peaks_at_one_ts_are_read_without_lining_them_up(tmp_path: Path) -> None:
    """`record` writes each process's heaps at its one peak: the default sum then reads the peak
    rows through the heap filter alone (the view that moves every row to its process's latest
    peak cost a build's summary 55 ms). Rows at several peaks still get that view; both read
    the same sums, and the file's answer is kept across heap switches."""
    for mmap_ts, lined_up in ((5, False), (7, True)):
        path = _two_heaps(tmp_path / f"p{mmap_ts}.db", mmap_ts)
        with open_profile(path) as prof:
            assert select_heap(prof, None) == "libc.malloc+mmap"
            assert prof.peaks_at_one_ts() is (not lined_up)
            db = prof.sql_connection()
            view = db.execute("SELECT sql FROM temp.sqlite_master WHERE name = 'heapscope_peak_allocation'"
                              ).fetchone()
            assert (view is not None) is lined_up, view
            assert peak_top(prof, 1, 3) == (4196, [(2, 4096), (1, 100)])
            assert peak_top(prof, 2, 3) == (4296, [(2, 4096), (1, 200)])
            assert peak_totals(prof) == {1: 4196, 2: 4296}
            assert peak_tops(prof, [2], 1) == {2: (4296, [(2, 4096)])}
            peak = prof.peak_values(2)
            assert peak is not None and peak[0] == mmap_ts
            assert select_heap(prof, "mmap") == "mmap"
            assert peak_top(prof, 2, 3) == (4096, [(2, 4096)])
            assert prof.peaks_at_one_ts() is (not lined_up)


def test_a_peak_read_finds_its_ts_when_a_process_has_several(tmp_path: Path) -> None:
    """peak_top reads rows at one ts per process (as `record` writes them) without looking for
    the peak's ts; rows at several ts (a profile not written by `record`) still give the ts of
    the largest (ts, callsite) sum, and only its rows."""
    w = ProfileWriter(tmp_path / "p.db")
    w.add_process(ProcessInfo(Upid(1), 42, 1, "p", "p", "/p", 0, 1))
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 1)])
    w.add_dump(1, 0, 10, "exit", [(1, 1, 64)], "libc.malloc")
    w.add_peak(1, 5, "libc.malloc", [(1, 1, 300, 1, 300), (2, 1, 100, 1, 100)])
    w.add_peak(1, 8, "libc.malloc", [(2, 1, 500, 1, 500)])
    w.commit()
    w.close()
    with open_profile(tmp_path / "p.db") as prof:
        assert not prof.peaks_at_one_ts()
        assert peak_top(prof, 1, 3) == (500, [(2, 500)])
        assert peak_totals(prof) == {1: 500}


def test_peak_totals_and_tops_of_more_processes_than_one_statement_names(tmp_path: Path) -> None:
    """peak_totals sums the rows of processes whose peaks it cannot read as they are (rows at two
    ts here) in one more read, and peak_tops reads the tops of many processes: past the processes
    one `upid IN (...)` names, both read every process's rows, with the same answers."""
    w = ProfileWriter(tmp_path / "p.db")
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 1)])
    n = 1200
    for upid in range(1, n + 1):
        w.add_process(ProcessInfo(Upid(upid), 100 + upid, 1, "p", "p", "/p", 0, 1))
        w.add_dump(upid, 0, 10, "exit", [(1, 1, 64)], "libc.malloc")
        w.add_peak(upid, 5, "libc.malloc", [(1, 1, upid, 1, upid), (2, 1, 7, 1, 7)])
        w.add_peak(upid, 8, "libc.malloc", [(2, 1, 2 * upid, 1, 2 * upid)])
    w.commit()
    w.close()
    with open_profile(tmp_path / "p.db") as prof:
        # each process's peak is at ts 8 (2 x upid > upid + 7 from upid 8 on), else at 5
        want = {u: 2 * u if 2 * u > max(u, 7) else u + 7 for u in range(1, n + 1)}
        assert peak_totals(prof) == want
        tops = peak_tops(prof, list(range(1, n + 1)), 1)
        assert tops == {u: peak_top(prof, u, 1) for u in range(1, n + 1)}
        assert tops[n] == (2 * n, [(2, 2 * n)])


def _peaks_of(path: Path, peaks: dict[int, list[tuple[str, int, int]]]) -> Path:
    """Processes whose peak rows are (heap, callsite, bytes held), all at ts 5."""
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(cs, 0, None, 1) for cs in range(1, 6)])
    for upid, rows in peaks.items():
        w.add_process(ProcessInfo(Upid(upid), 100 + upid, 1, "p", "p", "/p", 0, 1))
        for heap in sorted({h for h, _, _ in rows}):
            w.add_dump(upid, 0, 10, "exit", [(1, 1, 64)], heap)
            w.add_peak(upid, 5, heap, [(cs, 1 if size else 0, size, 1, max(size, 1)) for h, cs, size in rows
                                       if h == heap])
    w.commit()
    w.close()
    return path


def _statements(prof: object) -> list[str]:
    seen: list[str] = []
    prof.sql_connection().set_trace_callback(seen.append)  # type: ignore[attr-defined]
    return seen


def test_the_tops_of_peaks_as_record_writes_them_are_summed_from_their_rows_above_0(tmp_path: Path) -> None:
    """Rows as `record` writes them (one ts a process, none below 0): a callsite's sum is above
    0 exactly when one of its rows is, so the tops come from those rows alone, without SQLite
    grouping every row (a Python program's summary paid 35 ms for it after the target's exit)."""
    peaks = {
        # two heaps sharing callsites; callsite 3 freed by the peak
        1: [("libc.malloc", 1, 100), ("python.pymalloc", 1, 50), ("python.pymalloc", 2, 400), ("libc.malloc", 3, 0),
            ("python.pymalloc", 4, 150)],
        2: [("libc.malloc", 1, 0), ("libc.malloc", 2, 0)],  # holds nothing at its peak
        3: [("libc.malloc", 5, 70), ("libc.malloc", 2, 70), ("libc.malloc", 4, 70)],  # a tie: by callsite
    }
    want = {1: (700, [(2, 400), (1, 150), (4, 150)]), 2: (0, []), 3: (210, [(2, 70), (4, 70), (5, 70)])}
    path = _peaks_of(tmp_path / "p.db", peaks)
    with open_profile(path) as prof:
        assert select_heap(prof, None) == "libc.malloc+python.pymalloc"
        seen = _statements(prof)
        for n in (1, 2, 64):
            seen.clear()
            cut = {u: (total, top[:n]) for u, (total, top) in want.items()}
            assert peak_tops(prof, [1, 2, 3], n) == cut
            assert peak_tops(prof, [3, 1], n) == {u: cut[u] for u in (1, 3)}
            assert not [s for s in seen if "GROUP BY upid, callsite_id" in s], seen
            # one process of three: SQLite groups its rows alone, with the same answer
            assert peak_top(prof, 2, n) == cut[2]
            assert peak_top(prof, 1, n) == cut[1]
        assert peak_top(prof, 9, 3) is None
        assert select_heap(prof, "python.pymalloc") == "python.pymalloc"
        assert peak_tops(prof, [1, 2, 3], 2) == {1: (600, [(2, 400), (4, 150)])}


def test_peak_rows_below_0_are_summed_by_sqlite(tmp_path: Path) -> None:
    """A file with a peak row below 0 (not one `record` wrote) is summed as SQLite sums it: the
    callsite's rows together, its sum kept only above 0."""
    path = _peaks_of(tmp_path / "p.db", {1: [("a", 1, 100), ("b", 1, -40), ("a", 2, 30), ("b", 3, -5)]})
    with open_profile(path) as prof:
        select_heap(prof, "all")
        assert prof.peak_kind() == (True, True, 1)
        assert peak_top(prof, 1, 3) == (90, [(1, 60), (2, 30)])
