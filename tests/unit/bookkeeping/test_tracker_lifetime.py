"""The tracker's lifetimes and sizes (bookkeeping/tracker_lifetime.c) through the Tracker API.

Each test plays the ring reader: mallocs and frees with their timestamps (the client's clock),
then reads LIFETIME_ROW rows per callsite, and the rows the producer writes (ProcessHeap).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from heapscope.bookkeeping.dump import ProcessHeap
from heapscope.bookkeeping.rows import LIFETIME_ROW, LT_FREED, LT_HEAPTRACK, LT_HELD, LT_SIZE, LT_UNKNOWN
from heapscope.model import LIFETIME_BOUNDS

pytestmark = pytest.mark.timeout(60)

S1, S2, S3 = 0x1111, 0x2222, 0x3333
A, B, C = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000
NOW = 5_000_000_000
MS = 1_000_000


def rows(t: Any) -> dict[tuple[int, int, int], tuple[int, int, int]]:
    """(callsite, kind, bucket) -> (count, size, real size); each key once."""
    out = {}
    for cs, kind, bucket, count, size, real in LIFETIME_ROW.iter_unpack(t.lifetimes()):
        assert (cs, kind, bucket) not in out
        out[(cs, kind, bucket)] = (count, size, real)
    return out


def bucket_of(ns: int) -> int:
    return sum(1 for b in LIFETIME_BOUNDS if b <= ns)


def lb(life: int, size: int) -> int:
    """A FREED/HELD/UNKNOWN/HEAPTRACK row's bucket: lifetime bucket << 8 | size bucket."""
    return life << 8 | size


def test_lifetime_buckets_are_the_bounds_of_the_model(native_mod: ModuleType) -> None:
    # GIVEN for each bound, an allocation freed 1 ns before it and one freed at it
    t = native_mod.Tracker()
    seq = 0
    for i, b in enumerate(LIFETIME_BOUNDS):
        for life, stack in ((b - 1, 2 * i + 1), (b, 2 * i + 2)):
            t.malloc(seq + 1, A, 8, 8, stack, 100, NOW, 1)
            t.free(seq + 2, A, NOW, 100 + life)
            t.set_callsite(stack, stack)
            seq += 2
    got = {cs: bucket >> 8 for cs, kind, bucket, *_ in LIFETIME_ROW.iter_unpack(t.lifetimes()) if kind == LT_FREED}
    # THEN the first is in bucket i (which ends at the bound), the second in bucket i + 1
    for i in range(len(LIFETIME_BOUNDS)):
        assert (got[2 * i + 1], got[2 * i + 2]) == (i, i + 1), LIFETIME_BOUNDS[i]
    assert bucket_of(LIFETIME_BOUNDS[-1]) == len(LIFETIME_BOUNDS)


def test_freed_held_sizes_and_heaptrack_per_callsite(native_mod: ModuleType) -> None:
    # GIVEN on thread 7: A (100 B) freed 2.5 ms later with no malloc of its thread between,
    # B (3000 B asked, sampled 4096) freed 3 ms later after another malloc (C), C never freed
    t = native_mod.Tracker()
    t.malloc(1, A, 100, 100, S1, 10 * MS, NOW, 7)
    t.free(2, A, NOW, 12 * MS + MS // 2)
    t.malloc(3, B, 3000, 4096, S1, 20 * MS, NOW, 7)
    t.malloc(4, C, 70000, 70000, S2, 21 * MS, NOW, 7)
    t.free(5, B, NOW, 23 * MS)
    t.set_callsite(S1, 1)
    t.set_callsite(S2, 2)
    r = rows(t)
    # THEN callsite 1 has both lifetimes in [2 ms, 5 ms), A as heaptrack's temporary (not B),
    # and sizes 100 -> bucket 6 ([64, 128)), 3000 -> bucket 11 ([2048, 4096))
    two_ms = bucket_of(2 * MS)
    assert r[(1, LT_FREED, lb(two_ms, 6))] == (1, 100, 100)  # one size class a row
    assert r[(1, LT_FREED, lb(two_ms, 11))] == (1, 4096, 3000)
    assert r[(1, LT_HEAPTRACK, lb(0, 6))] == (1, 100, 100)
    assert r[(1, LT_SIZE, 6)] == (1, 100, 100)
    assert r[(1, LT_SIZE, 11)] == (1, 4096, 3000)
    # C is still held, aged from its malloc to the latest ts seen (23 ms): 2 ms
    assert r[(2, LT_HELD, lb(two_ms, 16))] == (1, 70000, 70000)
    assert r[(2, LT_SIZE, 16)] == (1, 70000, 70000)
    assert len(r) == 7


def test_heaptrack_is_per_thread(native_mod: ModuleType) -> None:
    # GIVEN thread 1 mallocs A, thread 2 mallocs B, then A and B are freed
    t = native_mod.Tracker()
    t.malloc(1, A, 8, 8, S1, 1, NOW, 1)
    t.malloc(2, B, 8, 8, S1, 2, NOW, 2)
    t.free(3, A, NOW, 3)
    t.free(4, B, NOW, 4)
    t.set_callsite(S1, 1)
    # THEN both are temporary by heaptrack's definition: no malloc of their own thread came between
    assert rows(t)[(1, LT_HEAPTRACK, lb(0, 3))] == (2, 16, 16)


def test_a_free_without_a_time_has_no_lifetime(native_mod: ModuleType) -> None:
    # GIVEN a free with no ts, one whose ts is before its malloc's, and an implicit free
    # (a malloc at a live address)
    t = native_mod.Tracker()
    t.malloc(1, A, 8, 8, S1, 100, NOW, 1)
    t.free(2, A, NOW)
    t.malloc(3, B, 8, 8, S1, 100, NOW, 1)
    t.free(4, B, NOW, 50)
    t.malloc(5, C, 8, 8, S1, 100, NOW, 1)
    t.malloc(6, C, 8, 8, S1, 200, NOW, 1)
    t.set_callsite(S1, 1)
    r = rows(t)
    # THEN the three are counted as unknown, none as freed; every allocation has its size
    assert r[(1, LT_UNKNOWN, lb(0, 3))] == (3, 24, 24)
    assert not [k for k in r if k[1] == LT_FREED]
    assert r[(1, LT_SIZE, 3)] == (4, 32, 32)
    assert r[(1, LT_HELD, lb(0, 3))] == (1, 8, 8)


def test_stacks_of_one_callsite_sum_and_unresolved_stacks_wait(native_mod: ModuleType) -> None:
    # GIVEN S1 and S2 folded into callsite 5 (S2 after its ops), S3 without a callsite
    t = native_mod.Tracker()
    t.set_callsite(S1, 5)
    for seq, (addr, stack) in enumerate(((A, S1), (B, S2), (C, S3))):
        t.malloc(2 * seq + 1, addr, 16, 16, stack, 1000, NOW, 1)
        t.free(2 * seq + 2, addr, NOW, 1500)
    assert {k[0] for k in rows(t)} == {5}
    t.set_callsite(S2, 5)
    r = rows(t)
    # THEN callsite 5 sums both stacks; S3 has no row until it has a callsite
    assert r[(5, LT_FREED, lb(0, 4))] == (2, 32, 32)
    assert r[(5, LT_SIZE, 4)] == (2, 32, 32)
    t.set_callsite(S3, 6)
    assert rows(t)[(6, LT_FREED, lb(0, 4))] == (1, 16, 16)


def test_threads_mode_books_lifetimes_to_the_stack(native_mod: ModuleType) -> None:
    # GIVEN a tracker keeping threads (live entries hold (stack, thread) keys)
    t = native_mod.Tracker(threads=True)
    t.malloc(1, A, 16, 16, S1, 1000, NOW, 3)
    t.malloc(2, B, 16, 16, S1, 1000, NOW, 4)
    t.free(3, A, NOW, 3 * MS)
    t.set_callsite(S1, 9)
    r = rows(t)
    # THEN the lifetimes and the held one are the stack's callsite's
    assert r[(9, LT_FREED, lb(bucket_of(3 * MS), 4))] == (1, 16, 16)
    assert r[(9, LT_HELD, lb(bucket_of(3 * MS), 4))] == (1, 16, 16)


def test_the_producer_rows_name_kinds_and_bounds(native_mod: ModuleType, tmp_path: Path) -> None:
    # GIVEN one freed at 1.5 ms, one held, one (its thread's only malloc) freed beyond the last bound
    t = native_mod.Tracker()
    t.malloc(1, A, 256, 256, S1, 1, NOW, 1)
    t.free(2, A, NOW, 1 + 1500_000)
    t.malloc(3, B, 1, 4096, S1, 1, NOW, 1)
    t.malloc(4, C, 8, 8, S2, 1, NOW, 2)
    t.free(5, C, NOW, 2 + LIFETIME_BOUNDS[-1])
    t.set_callsite(S1, 1)
    t.set_callsite(S2, 2)
    life, flat_sizes = ProcessHeap.lifetime_values(t)  # 9 and 6 values a row, as the writer binds them
    assert len(life) % 9 == 0 and len(flat_sizes) % 6 == 0
    lifetimes = [tuple(life[k:k + 9]) for k in range(0, len(life), 9)]
    sizes = [tuple(flat_sizes[k:k + 6]) for k in range(0, len(flat_sizes), 6)]
    # THEN each row says its kind and its bucket's bounds in ns (no upper bound: None)
    assert sorted(lifetimes, key=str) == sorted([
        (1, "freed", MS, 2 * MS, 256, 512, 1, 256, 256),
        (1, "heaptrack", 0, None, 256, 512, 1, 256, 256),
        (1, "held", LIFETIME_BOUNDS[-1], None, 0, 2, 1, 4096, 1),
        (2, "freed", LIFETIME_BOUNDS[-1], None, 8, 16, 1, 8, 8),
        (2, "heaptrack", 0, None, 8, 16, 1, 8, 8),
    ], key=str)
    # sizes in [2^b, 2^(b+1)), 1 B in [0, 2)
    assert sorted(sizes) == [(1, 0, 2, 1, 4096, 1), (1, 256, 512, 1, 256, 256), (2, 8, 16, 1, 8, 8)]
    # AND written, the profile holds them as rows
    from heapscope.store.writer import ProfileWriter

    w = ProfileWriter(tmp_path / "p.db")
    w.add_lifetime_values(1, "libc.malloc", life, flat_sizes)
    got = w.db.execute("SELECT callsite_id, kind, lo_ns, hi_ns, size_lo, size_hi, count, size, real_size"
                       " FROM heapscope_callsite_lifetime").fetchall()
    assert sorted(got, key=str) == sorted(lifetimes, key=str)
    w.close()


def _reference_values(data: bytes) -> tuple[list[int | str | None], list[int]]:
    """The store's rows of LIFETIME_ROW `data`, written plainly: what bookkeeping/dump.py made in
    Python before _native.lifetime_values made them in C."""
    names = {LT_FREED: "freed", LT_HELD: "held", LT_UNKNOWN: "unknown", LT_HEAPTRACK: "heaptrack"}
    bounds = [0, *LIFETIME_BOUNDS, None]
    life: list[int | str | None] = []
    sizes: list[int] = []
    for cs, kind, bucket, count, size, real in LIFETIME_ROW.iter_unpack(data):
        b = bucket & 0xFF
        size_lo, size_hi = (1 << b if b else 0), min(1 << (b + 1), (1 << 63) - 1)
        if kind == LT_SIZE:
            sizes += (cs, size_lo, size_hi, count, size, real)
        elif kind in names:
            k = bucket >> 8
            lo, hi = (bounds[k], bounds[k + 1]) if kind in (LT_FREED, LT_HELD) else (0, None)
            life += (cs, names[kind], lo, hi, size_lo, size_hi, count, size, real)
    return life, sizes


def test_the_rows_made_in_c_are_the_plain_ones() -> None:
    """Every kind (those the store has no row for among them), every lifetime bucket, size buckets
    up to 255 (2^b past 64 bits), and values up to 2^64 - 1: the same rows as written plainly."""
    import random

    rng = random.Random(7)
    kinds = [0, LT_FREED, LT_HELD, LT_UNKNOWN, LT_SIZE, LT_HEAPTRACK, 6, 2**40]
    data = b"".join(LIFETIME_ROW.pack(rng.randrange(1, 2**64), rng.choice(kinds),
                                      rng.randrange(len(LIFETIME_BOUNDS) + 1) << 8 | rng.randrange(256),
                                      rng.randrange(2**64), rng.choice((0, 1, 2**63, 2**64 - 1)), rng.randrange(99))
                    for _ in range(5000))
    t = _RowsOf(data)
    assert ProcessHeap.lifetime_values(t) == _reference_values(data)  # type: ignore[arg-type]
    assert ProcessHeap.lifetime_values(_RowsOf(b"")) == ([], [])  # type: ignore[arg-type]
    # AND a lifetime bucket past the bounds, or bytes that are not rows, are refused
    past = LIFETIME_ROW.pack(1, LT_FREED, (len(LIFETIME_BOUNDS) + 1) << 8, 1, 1, 1)
    with pytest.raises(IndexError):
        ProcessHeap.lifetime_values(_RowsOf(past))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ProcessHeap.lifetime_values(_RowsOf(data[:-1]))  # type: ignore[arg-type]


class _RowsOf:
    """A tracker whose lifetimes() are the given rows."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def lifetimes(self) -> bytes:
        return self.data
