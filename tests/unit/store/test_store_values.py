"""store: u64 columns keep all 64 bits; signed ones are clamped instead of failing the recording."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from heapscope.errors import ProfileError
from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.values import BadValue, i64_to_sql, req_int_from_sql, u64_from_sql, u64_to_sql
from heapscope.store.writer import ProfileWriter

U64_MAX = (1 << 64) - 1
EDGES = (0, 1, (1 << 63) - 1, 1 << 63, (1 << 63) + 1, U64_MAX)


@pytest.mark.parametrize("n", EDGES)
def test_u64_round_trip(n: int) -> None:
    stored = u64_to_sql(n)
    assert -(1 << 63) <= stored < (1 << 63)
    assert u64_from_sql(stored) == n


def test_signed_values_are_clamped() -> None:
    assert i64_to_sql(1 << 70) == (1 << 63) - 1
    assert i64_to_sql(-(1 << 70)) == -(1 << 63)
    assert i64_to_sql(-5) == -5


def test_wrong_types_are_bad_values() -> None:
    for bad in ("junk", b"\x00\x01", 1.5, 1e30):
        with pytest.raises(BadValue):
            req_int_from_sql(bad, "t.c")
    with pytest.raises(BadValue, match="NULL in t.c"):
        req_int_from_sql(None, "t.c")
    assert req_int_from_sql("42", "t.c") == 42


def test_every_u64_column_holds_the_largest_value(tmp_path: Path) -> None:
    # GIVEN a profile written with 2^64 - 1 in every u64 column (and a timestamp past int64)
    path = tmp_path / "big.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("ab", U64_MAX, U64_MAX, U64_MAX, U64_MAX, U64_MAX, "/lib/x.so"))])
    w.add_frames([(1, Frame(MappingId(1), U64_MAX, "f"))])
    w.add_callsites([(1, 0, None, 1)])
    info = ProcessInfo(Upid(1), pid=7, ppid=1, name="p", cmdline="p", exe="/p", uid=0, start_ts=1 << 64)
    w.add_process(info)
    w.set_process_flags(info, ProcessFlags(sampling_interval_bytes=U64_MAX, orig_sampling_interval_bytes=U64_MAX))
    w.add_dump(1, 0, 10, "exit", [(1, 1, 1 << 64)], "libc.malloc")
    w.add_stream([(1, U64_MAX, "malloc", 5, U64_MAX, U64_MAX, U64_MAX, 1),
                  (1, 0, "free", None, U64_MAX, None, None, None)])
    w.add_stats([("big", None, "info", "producer", 1 << 64, "")])
    w.close()
    # WHEN it is read back THEN every u64 comes back whole, signed values clamped
    with open_profile(path) as prof:
        (m,) = prof.mappings()
        assert (m.exact_offset, m.start_offset, m.start, m.end, m.load_bias) == (U64_MAX,) * 5
        assert prof.frames()[1].rel_pc == U64_MAX  # type: ignore[index]
        (p,) = prof.processes()
        assert p.flags is not None
        assert (p.flags.sampling_interval_bytes, p.flags.orig_sampling_interval_bytes) == (U64_MAX, U64_MAX)
        assert p.info.start_ts == (1 << 63) - 1
        e, free = prof.allocation_stream(1)
        assert (e.seq, e.address, e.size, e.sample_size) == (U64_MAX,) * 4
        assert (free.kind, free.ts, free.address, free.size) == ("free", None, U64_MAX, 0)
        assert prof.callsite_values(1)[1].space == (1 << 63) - 1  # type: ignore[index]
        assert prof.stats()[0].value == (1 << 63) - 1
    # AND plain SQL sees the int64 with the same bits, as trace_processor would
    db = sqlite3.connect(path)
    assert db.execute("SELECT rel_pc FROM stack_profile_frame").fetchone() == (-1,)
    db.close()


def test_a_huge_sum_is_one_line(tmp_path: Path) -> None:
    # GIVEN two rows whose sizes sum past int64
    path = tmp_path / "sum.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "x"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1)])
    w.add_process(ProcessInfo(Upid(1), pid=7, ppid=1, name="p", cmdline="p", exe="/p", uid=0, start_ts=0))
    w.add_dump(1, 0, 10, "exit", [(1, 1, (1 << 63) - 1), (1, 1, (1 << 63) - 1)], "libc.malloc")
    w.close()
    # WHEN the values are read THEN one ProfileError line, no OverflowError
    with open_profile(path) as prof, pytest.raises(ProfileError, match="overflow") as e:
        prof.callsite_values(1)
    assert "\n" not in str(e.value)


def test_callsites_out_of_range_are_clamped_and_stay_uncommitted(tmp_path: Path) -> None:
    # GIVEN callsite rows (written as they are when they fit) after one that SQLite cannot hold
    w = ProfileWriter(tmp_path / "cs.db")
    w.commit()
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2)])
    w.add_callsites([(3, 1, 1, 3), (1 << 64, 1 << 70, -(1 << 70), 4)])
    # THEN every row is there once, the huge values clamped (the first attempt undone)
    rows = w.db.execute("SELECT id, depth, parent_id, frame_id FROM stack_profile_callsite ORDER BY id").fetchall()
    top, bottom = (1 << 63) - 1, -(1 << 63)
    assert rows == [(1, 0, None, 1), (2, 1, 1, 2), (3, 1, 1, 3), (top, top, bottom, 4)]
    # AND nothing was committed behind the writer's back: a rollback drops them all
    w.rollback()
    assert w.db.execute("SELECT COUNT(*) FROM stack_profile_callsite").fetchone() == (0,)
    w.close()
