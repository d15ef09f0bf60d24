"""store.reader: what it reads from a known profile, and the one-line errors for bad files."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from heapscope.errors import ProfileError
from heapscope.model import CallsiteId, Frame, FrameId, Mapping, MappingId
from heapscope.store.files import read_only_uri
from heapscope.store.peak_tops import peak_callsites, peak_top, peak_tops, peak_totals
from heapscope.store.reader import DumpValues, ViewValues, fallback_frame_name, mapping_basename, open_profile
from heapscope.store.writer import ProfileWriter

# Leaf callsites of the known profile (tests/unit/conftest.py draws the tree).
SITE_A, SITE_B, SITE_C, SITE_D, SITE_E = 4, 6, 7, 8, 3


def test_processes_dumps_and_flags(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        procs = prof.processes()
        assert [(p.info.upid, p.info.pid, p.info.name) for p in procs] == [
            (1, 100, "prog"), (2, 200, "child"), (3, 300, "idle")]
        prog, child, _ = procs
        assert prog.info.cmdline == "prog --run fast" and prog.info.exe == "/usr/bin/prog"
        assert prog.flags is not None and prog.flags.sampling_interval_bytes == 4096
        assert child.flags is not None and child.flags.buffer_overran and child.flags.client_error == "ring full"
        assert child.info.parent_upid == 1 and child.info.end_ts == 1600
        assert [(d.ts_end, d.reason) for d in prof.dumps(1)] == [(1000, "periodic"), (2000, "exit")]
        assert prof.dumps(3) == [] and prof.last_dump_ts(3) is None
        assert prof.metadata()["format"] == "heapscope-profile"
        assert [(s.name, s.value) for s in prof.stats(2)] == [("dropped_records", 3), ("unwinding_errors", 0)]
        assert len(prof.stats()) == 3


def test_callsite_values_default_to_the_last_dump(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        assert prof.callsite_values(1) == {
            SITE_A: ViewValues(space=110, objects=2, alloc_space=150, alloc_objects=3),
            SITE_B: ViewValues(space=0, objects=0, alloc_space=30, alloc_objects=1),
            SITE_C: ViewValues(space=8, objects=1, alloc_space=8, alloc_objects=1),
            SITE_D: ViewValues(space=300, objects=3, alloc_space=300, alloc_objects=3),
            SITE_E: ViewValues(space=16, objects=1, alloc_space=16, alloc_objects=1),
        }
        # At the first dump, only its rows count.
        assert prof.callsite_values(1, 1000) == {
            SITE_A: ViewValues(100, 2, 100, 2),
            SITE_B: ViewValues(30, 1, 30, 1),
            SITE_C: ViewValues(8, 1, 8, 1),
        }
        assert prof.callsite_values(2) == {SITE_B: ViewValues(4096, 4, 4096, 4)}
        assert prof.callsite_values(3) == {}


def test_callsite_and_frame_lookups(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        cs = prof.callsites()
        assert cs[CallsiteId(1)] == (None, 1) and cs[CallsiteId(SITE_A)] == (3, 4)
        frames = prof.frames()
        assert frames[FrameId(4)].name == "malloc" and frames[FrameId(4)].mapping_name.endswith("libc.so.6")
        assert frames[FrameId(5)].display_name == "prog+0x1a2b"


def test_names() -> None:
    assert mapping_basename("/a/b/libfoo.so") == "libfoo.so"
    assert mapping_basename("[vdso]") == "[vdso]"
    assert mapping_basename("") == "[unknown]"
    assert fallback_frame_name("/a/libfoo.so", 0x1A2B) == "libfoo.so+0x1a2b"


def test_the_connection_is_read_only(known_profile: Path) -> None:
    with open_profile(known_profile) as prof, pytest.raises(sqlite3.OperationalError, match="readonly"):
        prof.sql_connection().execute("DELETE FROM process")


@pytest.mark.parametrize("name", ["a b.db", "q?x=1.db", "h#frag.db", "p%41.db", "ünï.db", "é\udcff.db", "c:o;l,on.db"])
def test_a_profile_opens_whatever_its_name_holds(known_profile: Path, tmp_path: Path, name: str) -> None:
    """The URI SQLite opens is made without pathlib: `?`, `#` and `%` escaped, any byte of the
    name (one that is not UTF-8 too) written %HH, through a symbolic link the file it names."""
    d = tmp_path / "dir ?#%"
    d.mkdir()
    dst = d / name
    shutil.copy(known_profile, dst)
    assert read_only_uri(dst) == f"{dst.resolve().as_uri()}?mode=ro".replace("file:///", "file:/", 1)
    (tmp_path / "link").symlink_to(d)
    for path in (dst, str(tmp_path / "link" / name)):
        with open_profile(path) as prof:
            assert [p.info.pid for p in prof.processes()] == [100, 200, 300]
            assert prof.path == str(path)


# --- files that are not readable profiles: one line naming the file each ---

def _error_of(path: Path) -> str:
    with pytest.raises(ProfileError) as e:
        open_profile(path).close()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path))
    return msg


def test_missing_file(tmp_path: Path) -> None:
    assert _error_of(tmp_path / "nope.db").endswith(": no such file")


def test_directory(tmp_path: Path) -> None:
    assert "is a directory" in _error_of(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.db"
    p.write_bytes(b"")
    assert "empty file" in _error_of(p)


def test_not_sqlite(tmp_path: Path) -> None:
    p = tmp_path / "text.db"
    p.write_text("hello, I am a text file and not a database at all\n" * 10)
    assert _error_of(p).endswith("not a heapscope profile (not an SQLite database)")


def test_other_sqlite_database(tmp_path: Path) -> None:
    p = tmp_path / "other.db"
    with sqlite3.connect(p) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    assert _error_of(p).endswith("not a heapscope profile (no heapscope_metadata table)")


def test_empty_sqlite_database(tmp_path: Path) -> None:
    p = tmp_path / "blank.db"
    sqlite3.connect(p).close()  # creates a 0-byte file
    assert "empty" in _error_of(p)


def test_metadata_without_our_format(tmp_path: Path) -> None:
    p = tmp_path / "meta.db"
    with sqlite3.connect(p) as db:
        db.execute("CREATE TABLE heapscope_metadata (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO heapscope_metadata VALUES ('format', 'something-else')")
    db.close()
    assert "not a heapscope profile (no format=heapscope-profile metadata)" in _error_of(p)


def test_newer_schema_version(tmp_path: Path) -> None:
    p = tmp_path / "future.db"
    w = ProfileWriter(p)
    w.set_metadata("schema_version", "99")
    w.close()
    assert "schema version 99 is not supported" in _error_of(p)


def test_truncated(known_profile: Path, tmp_path: Path) -> None:
    p = tmp_path / "cut.db"
    data = known_profile.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    assert "truncated" in _error_of(p)


def test_truncated_inside_the_header(known_profile: Path, tmp_path: Path) -> None:
    p = tmp_path / "cut.db"
    p.write_bytes(known_profile.read_bytes()[:40])
    assert "truncated" in _error_of(p)


def test_corrupt_pages_fail_with_one_line(known_profile: Path, tmp_path: Path) -> None:
    # GIVEN a profile whose every page after the first is overwritten with garbage
    p = tmp_path / "corrupt.db"
    shutil.copy(known_profile, p)
    data = bytearray(p.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for i in range(page_size, len(data)):
        data[i] = (i * 7 + 13) & 0xFF
    p.write_bytes(bytes(data))
    # WHEN it is opened and read THEN one ProfileError names the file
    with pytest.raises(ProfileError) as e, open_profile(p) as prof:
        prof.processes()
        prof.callsite_values(1)
        prof.frames()
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)


def test_a_value_of_the_wrong_type_is_one_line(known_profile: Path) -> None:
    # GIVEN a profile whose callsite table holds text where an id belongs
    db = sqlite3.connect(known_profile)
    db.execute("UPDATE stack_profile_callsite SET parent_id = 'junk' WHERE id = 2")
    db.commit()
    db.close()
    # WHEN the callsites are read THEN one ProfileError names the file
    with open_profile(known_profile) as prof, pytest.raises(ProfileError) as e:
        prof.callsites()
    assert str(e.value) == (
        f"{known_profile}: corrupt profile (unexpected value 'junk' in stack_profile_callsite.parent_id)")


def test_stack_frames_and_peak_top_agree_with_the_whole_tables(tmp_path: Path) -> None:
    # GIVEN a profile whose peak has a freed (negative) callsite, a tie, and a chain deeper than asked
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("ab12", 0, 0, 0x1000, 0x9000, 0, "/usr/lib/libx.so"))])
    w.add_frames([(i, Frame(MappingId(1), 0x100 * i, f"f{i}" if i % 2 else "")) for i in range(1, 8)])
    w.add_callsites([(i, i - 1, i - 1 if i > 1 else None, i) for i in range(1, 8)]
                    + [(9, 1, 1, 99)])  # frame 99 is not in the profile
    w.add_peak(1, 50, "libc.malloc", [(7, 1, 64, 1, 64), (3, 1, 64, 1, 64), (9, 2, 128, 2, 128),
                                      (5, 0, -16, 1, 16), (2, 0, 0, 1, 8)])
    w.add_peak(1, 40, "libc.malloc", [(4, 1, 1, 1, 1)])  # another ts: not this peak's
    # and a process whose peak rows all have one ts (record's case), in two heaps sharing a callsite
    w.add_peak(3, 70, "libc.malloc", [(7, 1, 64, 1, 64), (3, 1, 32, 1, 32), (5, 0, -16, 1, 16)])
    w.add_peak(3, 70, "python.pymalloc", [(3, 2, 48, 2, 48), (2, 1, 8, 1, 8)])
    w.close()
    with open_profile(path) as prof:
        # WHEN the summary's queries read it
        total, top = peak_top(prof, 1, 3) or (0, [])
        # THEN they say what the whole-table readers say
        ts, rows = peak_callsites(prof, 1) or (0, [])
        assert ts == 50 and total == sum(s for _, s in rows if s > 0) == 256
        assert top == [(cs, s) for cs, s in rows if s > 0][:3] == [(9, 128), (3, 64), (7, 64)]
        assert peak_top(prof, 2, 3) is None
        ts3, rows3 = peak_callsites(prof, 3) or (0, [])
        assert ts3 == 70 and peak_top(prof, 3, 2) == (sum(s for _, s in rows3 if s > 0), [(3, 80), (7, 64)])
        assert peak_top(prof, 3, 0) == (152, [])
        # AND the totals alone, and the tops of a few processes, say the same (rows below 0, peaks
        # at two ts, a callsite in two heaps: the exact sums)
        assert peak_totals(prof) == {1: 256, 3: 152}
        assert peak_tops(prof, [3, 2], 2) == {3: (152, [(3, 80), (7, 64)])}
        callsites, frames = prof.callsites(), prof.frames()
        walked = [info.display_name if info else "?" for info in prof.stack_frames(CallsiteId(7), 5)]
        expected: list[str] = []
        node: int | None = 7
        while node is not None and len(expected) < 5:
            expected.append(frames[callsites[CallsiteId(node)][1]].display_name)
            node = callsites[CallsiteId(node)][0]
        assert walked == expected == ["f7", "libx.so+0x600", "f5", "libx.so+0x400", "f3"]
        assert [info.name if info else "?" for info in prof.stack_frames(CallsiteId(9), 5)] == ["?", "f1"]
        assert prof.stack_frames(CallsiteId(12345), 5) == []


def test_callsites_as_record_writes_them_and_otherwise(tmp_path: Path) -> None:
    # GIVEN the same tree written parents first (as `record` does) and with a parent after its
    # child, a profile with a dangling parent, and one with a parent cycle
    def written(name: str, rows: list[tuple[int, int, int | None, int]]) -> Path:
        path = tmp_path / name
        w = ProfileWriter(path)
        w.add_mappings([(1, Mapping("ab", 0, 0, 0x1000, 0x2000, 0, "/x"))])
        w.add_frames([(i, Frame(MappingId(1), i, f"f{i}")) for i in range(1, 5)])
        w.add_callsites(rows)
        w.close()
        return path

    plain = written("plain.db", [(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3), (4, 1, 1, 4)])
    late = written("late.db", [(5, 0, None, 1), (2, 1, 5, 2), (3, 2, 2, 3), (4, 1, 5, 4)])
    dangling = written("dangling.db", [(1, 0, None, 1), (3, 1, 2, 3)])
    cycle = written("cycle.db", [(1, 0, 3, 1), (2, 1, 1, 2), (3, 2, 2, 3)])
    # WHEN each is read
    with open_profile(plain) as prof:
        got_plain = prof.callsites()
    with open_profile(late) as prof:
        got_late = prof.callsites()
    with open_profile(dangling) as prof:
        got_dangling = prof.callsites()
    # THEN both kinds of rows read as they are, a dangling parent is kept, a cycle is damage
    assert got_plain == {1: (None, 1), 2: (1, 2), 3: (2, 3), 4: (1, 4)}
    assert got_late == {5: (None, 1), 2: (5, 2), 3: (2, 3), 4: (5, 4)}
    assert got_dangling == {1: (None, 1), 3: (2, 3)}
    with open_profile(cycle) as prof, pytest.raises(ProfileError, match="parent cycle"):
        prof.callsites()


def test_peak_and_dump_values_read_column_wise_and_row_by_row_agree(tmp_path: Path) -> None:
    # GIVEN a profile with two dumps and a peak, as `record` writes them (real sizes in some rows only)
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.add_dump(1, 0, 10, "periodic", [(2, 3, 300, 90), (3, 1, 64), (2, -1, -100, -30)], "libc.malloc")
    w.add_dump(1, 10, 20, "exit", [(3, 2, 128, 40)], "libc.malloc")
    w.add_peak(1, 15, "libc.malloc", [(2, 2, 200, 3, 300, 60, 90), (3, 1, 64, 1, 64)])
    w.close()

    def read() -> tuple[tuple[int, dict[CallsiteId, ViewValues]] | None, list[DumpValues]]:
        with open_profile(path) as prof:
            return prof.peak_values(1), prof.dump_values(1)

    # WHEN it is read, and again once a value is text and another NULL (not as `record` writes
    # them: the row-by-row conversions read those)
    plain = read()
    db = sqlite3.connect(path)
    db.execute("UPDATE heapscope_peak_allocation SET size = '64' WHERE callsite_id = 3")
    db.execute("UPDATE heap_profile_allocation SET size = '128' WHERE callsite_id = 3 AND ts = 20")
    db.commit()
    db.close()
    checked = read()
    # THEN both readings say the same, and what was written, also read a row at a time
    assert plain == checked
    with open_profile(path) as prof:
        assert list(prof.iter_dump_values(1, chunk=1)) == checked[1] and prof.dump_stamps(1) == [10, 20]
        # AND read per heap (the flamegraph's one pass for all heaps), the same rows with their heap
        by_heap = [(d.ts, "libc.malloc", d) for d in checked[1]]
        assert list(prof.iter_dump_values_by_heap(1)) == list(prof.iter_dump_values_by_heap(1, chunk=1)) == by_heap
        assert sorted(prof.dump_stamps_by_heap(1)) == [("libc.malloc", 10), ("libc.malloc", 20)]
        at_end = prof.callsite_values(1)
    db = sqlite3.connect(path)
    db.execute("UPDATE heap_profile_allocation SET size = '300' WHERE callsite_id = 2 AND size = 300")
    db.commit()
    db.close()
    with open_profile(path) as prof:
        assert prof.callsite_values(1) == at_end == {2: ViewValues(200, 2, 300, 3, 60, 90),
                                                     3: ViewValues(192, 3, 192, 3, 40, 40)}
    peak, dumps = plain
    assert peak == (15, {2: ViewValues(200, 2, 300, 3, 60, 90), 3: ViewValues(64, 1, 64, 1, None, None)})
    assert [(d.ts, d.callsite, d.values) for d in dumps] == [
        (10, 2, ViewValues(200, 2, 300, 3, 60, 90)), (10, 3, ViewValues(64, 1, 64, 1, None, None)),
        (20, 3, ViewValues(128, 2, 128, 2, 40, 40))]


def test_a_peak_on_two_heaps_is_summed_per_callsite(tmp_path: Path) -> None:
    # GIVEN a process whose peak is on two heaps that share a callsite, and one on one heap
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.add_peak(1, 15, "libc.malloc", [(2, 2, 200, 3, 300), (3, 1, 64, 1, 64)])
    w.add_peak(1, 15, "python.pymalloc", [(3, 2, 32, 4, 64)])
    w.add_peak(2, 25, "libc.malloc", [(5, 1, 8, 1, 8)])
    w.close()
    # WHEN their peaks are read, the lone process first and then both
    with open_profile(path) as prof:
        lone, first, second = prof.peak_values(2), prof.peak_values(1), prof.peak_values(2)
    # THEN the shared callsite's values are summed over the heaps
    assert first == (15, {2: ViewValues(200, 2, 300, 3, None, None), 3: ViewValues(96, 3, 128, 5, None, None)})
    assert lone == second == (25, {5: ViewValues(8, 1, 8, 1, None, None)})
