"""The heap tracker (bookkeeping/tracker.c) through its own API: ops in, rows out.

Each test plays the ring reader: malloc/free with sequence numbers, in the
order records would arrive, and the clock the reader would pass. Then it
checks the live table, the totals, the dump and peak rows and the counters.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)

S1, S2, S3 = 0x1111, 0x2222, 0x3333
A, B, C = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000
SECOND = 1_000_000_000


# ---- sequence order ----

def test_in_order_malloc_and_free_totals(make_heap: Any) -> None:
    # GIVEN two stacks, three mallocs and one free, in order
    h = make_heap()
    h.malloc(1, A, 100, S1, ts=10)
    h.malloc(2, B, 50, S2, ts=20)
    h.free(3, A)
    h.malloc(4, A, 30, S1, ts=15)
    # THEN the totals are cumulative per stack, and the live set holds the rest
    assert h.totals() == {S1: (130, 100, 2, 1), S2: (50, 0, 1, 0)}
    assert h.live() == {A: (30, 30, S1, 4), B: (50, 50, S2, 2)}
    st = h.stats()
    assert (st["committed_seq"], st["pending"], st["live_allocations"]) == (4, 0, 2)
    assert st["untracked_frees"] == st["implicit_frees"] == st["late_records"] == 0
    assert st["current_unfreed"] == 80
    assert st["sampled_bytes"] == 180
    assert h.t.last_ts == 20


def test_free_arriving_before_its_malloc(make_heap: Any) -> None:
    # GIVEN thread 2 freed A (seq 2) and wrote its record before thread 1's malloc (seq 1)
    h = make_heap()
    h.free(2, A)
    assert h.stats()["pending"] == 1
    assert h.totals() == {}
    h.malloc(1, A, 64, S1)
    # THEN sequence order books the malloc first and the free frees it
    assert h.totals() == {S1: (64, 64, 1, 1)}
    assert h.live() == {}
    st = h.stats()
    assert st["untracked_frees"] == 0
    assert (st["pending"], st["max_pending"], st["committed_seq"]) == (0, 1, 2)


def test_address_reused_by_another_thread(make_heap: Any) -> None:
    # GIVEN T1: malloc A (1), free A (2); T2 gets A back: malloc A (3).
    # T2's record lands before T1's free.
    h = make_heap()
    h.malloc(1, A, 100, S1)
    h.malloc(3, A, 200, S2)
    h.free(2, A)
    # THEN the free hits T1's allocation and T2's stays live
    assert h.totals() == {S1: (100, 100, 1, 1), S2: (200, 0, 1, 0)}
    assert h.live() == {A: (200, 200, S2, 3)}
    assert h.stats()["implicit_frees"] == 0


def test_interleaved_threads_many_addresses(make_heap: Any) -> None:
    # GIVEN a reference model, and ops submitted in a shuffled order within windows
    h = make_heap()
    rng = random.Random(1234)
    ops: list[tuple[int, int, Any, Any]] = []  # (seq, addr, size, stack); a free's are None
    live: dict[int, tuple[int, int]] = {}
    model: dict[int, tuple[int, int, int, int]] = {}
    pool = [0x5500_0000 + 16 * i for i in range(3000)]
    seq = 0
    for _ in range(40000):
        seq += 1
        addr = rng.choice(pool)
        if addr in live:
            stack, size = live.pop(addr)
            t = model[stack]
            model[stack] = (t[0], t[1] + size, t[2], t[3] + 1)
            ops.append((seq, addr, None, None))
        else:
            stack, size = rng.choice((S1, S2, S3)), rng.randrange(1, 5000)
            live[addr] = (stack, size)
            t = model.get(stack, (0, 0, 0, 0))
            model[stack] = (t[0] + size, t[1], t[2] + 1, t[3])
            ops.append((seq, addr, size, stack))
    for i in range(0, len(ops), 16):
        window = ops[i:i + 16]
        rng.shuffle(window)
        for s, addr, size, stack in window:
            if size is None:
                h.free(s, addr)
            else:
                h.malloc(s, addr, size, stack)
    # THEN sequence order undoes the shuffle
    assert h.totals() == model
    assert {a: (r[0], r[2]) for a, r in h.live().items()} == {a: (v[1], v[0]) for a, v in live.items()}
    st = h.stats()
    assert st["implicit_frees"] == st["untracked_frees"] == st["late_records"] == 0
    assert st["committed_seq"] == seq and st["pending"] == 0 and st["max_pending"] > 1
    assert st["current_unfreed"] == sum(size for _stack, size in live.values())


def test_many_stacks_keep_first_seen_order(make_heap: Any) -> None:
    # GIVEN 5000 distinct stacks (the table grows several times), each used twice
    h = make_heap()
    rng = random.Random(99)
    ids = list(dict.fromkeys(rng.getrandbits(64) for _ in range(5000)))
    for i, sid in enumerate(ids):
        h.malloc(i + 1, 0x1000 + 16 * i, 8, sid)
    for i, sid in enumerate(ids):
        h.malloc(len(ids) + i + 1, 0x1000 + 16 * i, 8, sid)
    # THEN one bucket per stack, in the order stacks were first seen, each re-malloc an implicit free
    assert list(h.totals()) == ids
    assert all(v == (16, 8, 2, 1) for v in h.totals().values())
    assert h.stats()["implicit_frees"] == len(ids)
    assert sorted(h.t.unresolved()) == sorted(ids)


def test_realloc_like_free_then_malloc(make_heap: Any) -> None:
    # GIVEN realloc moving A to B, then realloc growing B in place
    h = make_heap()
    h.malloc(1, A, 100, S1)
    h.free(2, A)
    h.malloc(3, B, 300, S2)
    h.free(4, B)
    h.malloc(5, B, 500, S2)
    assert h.totals() == {S1: (100, 100, 1, 1), S2: (800, 300, 2, 1)}
    assert h.live() == {B: (500, 500, S2, 5)}


def test_implicit_free_when_address_is_still_live(make_heap: Any) -> None:
    # GIVEN A allocated twice with no free in between (the free was not sent)
    h = make_heap()
    h.malloc(1, A, 100, S1)
    h.malloc(2, A, 40, S2)
    # THEN the first allocation is freed implicitly
    assert h.totals() == {S1: (100, 100, 1, 1), S2: (40, 0, 1, 0)}
    assert h.live() == {A: (40, 40, S2, 2)}
    assert h.stats()["implicit_frees"] == 1
    assert h.stats()["current_unfreed"] == 40


def test_untracked_free(make_heap: Any) -> None:
    h = make_heap()
    h.free(1, A)
    h.malloc(2, B, 8, S1)
    assert h.stats()["untracked_frees"] == 1
    assert h.totals() == {S1: (8, 0, 1, 0)}


def test_late_and_duplicate_records(make_heap: Any) -> None:
    h = make_heap()
    h.malloc(1, A, 10, S1)
    h.malloc(2, B, 20, S1)
    # WHEN seq 2 comes again (duplicate) and then a stale free of seq 1
    h.malloc(2, B, 20, S1)
    h.free(1, A)
    # THEN both are applied at once and counted late
    st = h.stats()
    assert st["late_records"] == 2
    assert st["implicit_frees"] == 1
    assert st["committed_seq"] == 2
    assert h.totals() == {S1: (50, 30, 3, 2)}
    assert h.live() == {B: (20, 20, S1, 2)}


def test_duplicate_seq_while_pending(make_heap: Any) -> None:
    h = make_heap()
    h.malloc(3, A, 10, S1)
    h.malloc(3, A, 10, S1)
    h.malloc(2, B, 5, S1)
    assert h.stats()["pending"] == 3
    h.malloc(1, 0x9990, 1, S2)
    st = h.stats()
    assert (st["pending"], st["committed_seq"], st["late_records"]) == (0, 3, 1)
    assert st["implicit_frees"] == 1


def test_flush_skips_gaps(make_heap: Any) -> None:
    # GIVEN seq 2 and 5 never arrive
    h = make_heap()
    h.malloc(1, A, 10, S1)
    h.malloc(3, B, 20, S1)
    h.free(4, B)
    h.malloc(6, B, 7, S2)
    st = h.stats()
    assert (st["committed_seq"], st["pending"]) == (1, 3)
    assert h.totals() == {S1: (10, 0, 1, 0)}
    # WHEN the process ended
    h.t.flush()
    st = h.stats()
    assert (st["committed_seq"], st["pending"], st["gaps_skipped"]) == (6, 0, 2)
    assert h.totals() == {S1: (30, 20, 2, 1), S2: (7, 0, 1, 0)}
    # AND a missing op turning up after all is applied late
    h.free(2, A)
    assert h.stats()["late_records"] == 1
    assert h.totals()[S1] == (30, 30, 2, 2)


def test_gap_given_up_after_one_second_by_the_callers_clock(make_heap: Any) -> None:
    # GIVEN seq 2 arrived at t0 and seq 1 never does
    h = make_heap()
    t0 = h.now_ns
    h.malloc(2, A, 10, S1)
    # WHEN the reader's clock says exactly 1 s has passed: still waiting
    h.t.expire(t0 + SECOND)
    assert h.stats()["pending"] == 1
    # AND a clock that went backwards changes nothing
    h.t.expire(t0 - 5)
    assert h.stats()["pending"] == 1
    # THEN one nanosecond later the gap is skipped and the op applied
    h.t.expire(t0 + SECOND + 1)
    st = h.stats()
    assert (st["pending"], st["gaps_skipped"], st["committed_seq"]) == (0, 1, 2)
    assert h.live() == {A: (10, 10, S1, 2)}


def test_gap_timeout_counts_from_the_oldest_waiting_op(make_heap: Any) -> None:
    # GIVEN seq 3 waits from t0 and seq 5 from t0 + 0.8 s (seq 1 and 4 missing)
    h = make_heap()
    t0 = h.now_ns
    h.malloc(3, A, 10, S1)
    h.now_ns = t0 + 800_000_000
    h.malloc(5, B, 20, S1)
    # WHEN 1.2 s have passed since t0: the first gap goes, 3 is applied, 5 still waits for 4
    h.t.expire(t0 + 1_200_000_000)
    st = h.stats()
    assert (st["committed_seq"], st["pending"], st["gaps_skipped"]) == (3, 1, 2)
    # THEN once 5 has waited 1 s too, it is applied
    h.t.expire(t0 + 1_800_000_001)
    st = h.stats()
    assert (st["committed_seq"], st["pending"], st["gaps_skipped"]) == (5, 0, 3)
    assert h.totals() == {S1: (30, 0, 2, 0)}


def test_address_and_stack_zero(make_heap: Any) -> None:
    h = make_heap()
    h.malloc(1, 0, 16, 0)
    h.malloc(2, 16, 32, 0)
    h.free(3, 0)
    assert h.totals() == {0: (48, 16, 2, 1)}
    assert h.live() == {16: (32, 32, 0, 2)}


# ---- callsites and dumps ----

def test_dump_rows_are_deltas_per_callsite(make_heap: Any) -> None:
    # GIVEN stacks S1 and S2 of callsite 7, S3 of callsite 9
    h = make_heap()
    h.malloc(1, A, 100, S1)
    h.malloc(2, B, 50, S2)
    h.malloc(3, C, 8, S3)
    # WHEN no callsite is known yet: nothing to dump, the stacks wait
    assert h.dump() == []
    assert sorted(h.t.unresolved()) == sorted([S1, S2, S3])
    h.t.set_callsite(S1, 7)
    h.t.set_callsite(S2, 7)
    h.t.set_callsite(S3, 9)
    # THEN the first dump sums the stacks of each callsite
    assert h.dump() == [(7, 2, 150), (9, 1, 8)]
    assert h.t.unresolved() == []
    assert h.callsite_totals() == {7: (150, 0, 2, 0), 9: (8, 0, 1, 0)}
    assert h.totals() == {}
    # AND the next one holds only what changed: a free row (negative) and an alloc row
    h.free(4, A)
    h.malloc(5, A, 30, S2)
    assert h.dump() == [(7, 1, 30), (7, -1, -100)]
    assert h.dump() == []


def test_stack_first_seen_after_its_callsite(make_heap: Any) -> None:
    # GIVEN the stack is resolved (its STACK record came first) before any malloc of it
    h = make_heap()
    h.t.set_callsite(S1, 3)
    h.malloc(1, A, 64, S1)
    h.t.set_callsite(S1, 4)  # a stack keeps its first callsite
    assert h.dump() == [(3, 1, 64)]
    assert h.t.unresolved() == []
    with pytest.raises(ValueError):
        h.t.set_callsite(S2, 0)


def test_dump_at_max_rows_are_the_state_at_the_peak(make_heap: Any) -> None:
    h = make_heap(dump_at_max=True)
    h.t.set_callsite(S1, 1)
    h.t.set_callsite(S2, 2)
    # GIVEN S1 100 + S2 50 live (peak 150), then S1 freed and S2 grows to 120 (end 120)
    h.malloc(1, A, 100, S1, ts=5)
    h.malloc(2, B, 50, S2, ts=6)
    h.free(3, A)
    h.malloc(4, C, 70, S2, ts=7)
    # THEN the dump is the unreleased state at 150, as allocation rows
    assert h.dump() == [(1, 1, 100), (2, 1, 50)]
    st = h.stats()
    assert (st["peak_unfreed"], st["current_unfreed"], st["peak_ts"]) == (150, 120, 6)
    # WHEN a new malloc passes the old peak after a free: the next dump moves to it
    h.malloc(5, A, 40, S1, ts=9)
    assert h.dump() == [(1, 0, -60), (2, 1, 70)]
    assert h.stats()["peak_unfreed"] == 160
    # AND the cumulative totals are unchanged by the mode
    assert h.callsite_totals() == {1: (140, 100, 2, 1), 2: (120, 0, 2, 0)}


# ---- the peak ----

def test_peak_rows_keep_what_was_allocated_up_to_the_peak(make_heap: Any) -> None:
    # GIVEN callsite 1: 100 allocated and freed, then 200 kept; callsite 2: 50 kept;
    # the peak (250) is reached by seq 4; then everything is freed
    h = make_heap()
    h.t.set_callsite(S1, 1)
    h.t.set_callsite(S2, 2)
    h.malloc(1, A, 100, S1, ts=11)
    h.free(2, A)
    h.malloc(3, A, 200, S1, ts=13)
    h.malloc(4, B, 50, S2, ts=14)
    h.free(5, A)
    h.free(6, B)
    h.malloc(7, C, 8, S2, ts=17)
    # THEN the peak rows: unreleased at the peak, and allocated up to it
    assert h.peak() == {1: (1, 200, 2, 300), 2: (1, 50, 1, 50)}
    st = h.stats()
    assert (st["peak_unfreed"], st["peak_ts"], st["current_unfreed"]) == (250, 14, 8)
    # AND the totals now are not the peak
    assert h.callsite_totals() == {1: (300, 300, 2, 2), 2: (58, 50, 2, 1)}


def test_peak_follows_stacks_resolved_after_it(make_heap: Any) -> None:
    # GIVEN the peak is reached before any stack has a callsite
    h = make_heap()
    h.malloc(1, A, 100, S1, ts=1)
    h.malloc(2, B, 60, S2, ts=2)
    h.free(3, A)
    h.free(4, B)
    h.malloc(5, A, 30, S3, ts=5)
    # WHEN the stacks are resolved, two of them to one callsite
    assert h.peak() == {}
    h.t.set_callsite(S1, 4)
    h.t.set_callsite(S2, 4)
    h.t.set_callsite(S3, 5)
    # THEN the peak state moved with them
    assert h.peak() == {4: (2, 160, 2, 160)}
    assert h.callsite_totals() == {4: (160, 160, 2, 2), 5: (30, 0, 1, 0)}
    # AND a later, higher peak replaces it
    h.malloc(6, B, 200, S3, ts=6)
    assert h.peak() == {4: (0, 0, 2, 160), 5: (2, 230, 2, 230)}
    assert h.stats()["peak_ts"] == 6


def test_peak_matches_a_brute_force_model(make_heap: Any) -> None:
    # GIVEN random mallocs and frees over 6 stacks of 3 callsites, some resolved midway
    rng = random.Random(5)
    h = make_heap()
    stacks = [0x100 + i for i in range(6)]
    cs_of = {s: 1 + i % 3 for i, s in enumerate(stacks)}
    live: dict[int, tuple[int, int]] = {}
    totals = {cs: [0, 0, 0, 0] for cs in (1, 2, 3)}  # alloc bytes, free bytes, alloc count, free count
    best, best_state = 0, {}
    for seq in range(1, 3001):
        if seq == 1500:
            for s in stacks[:3]:
                h.t.set_callsite(s, cs_of[s])
        addr = 16 * rng.randrange(200)
        if addr in live and rng.random() < 0.6:
            size, cs = live.pop(addr)
            totals[cs][1] += size
            totals[cs][3] += 1
            h.free(seq, addr)
            continue
        if addr in live:  # implicit free
            size, cs = live.pop(addr)
            totals[cs][1] += size
            totals[cs][3] += 1
        stack = rng.choice(stacks)
        size = rng.randrange(1, 1000)
        live[addr] = (size, cs_of[stack])
        totals[cs_of[stack]][0] += size
        totals[cs_of[stack]][2] += 1
        h.malloc(seq, addr, size, stack, ts=seq)
        cur = sum(s for s, _ in live.values())
        if cur > best:
            best, best_state = cur, {cs: tuple(v) for cs, v in totals.items()}
    for s in stacks[3:]:
        h.t.set_callsite(s, cs_of[s])
    expected = {cs: (ac - fc, ab - fb, ac, ab) for cs, (ab, fb, ac, fc) in best_state.items() if ac}
    assert h.peak() == expected
    assert h.stats()["peak_unfreed"] == best


# ---- stream and life cycle ----

def test_take_stream_rows(make_heap: Any) -> None:
    h = make_heap(stream=True)
    h.free(2, A)
    h.malloc(1, A, 4096, S1, ts=77, alloc_size=100)
    h.free(3, B)
    assert h.stream() == [
        (1, 1, A, 100, 4096, S1, 77),
        (2, 2, A, 100, 4096, S1, 0),
        (2, 3, B, 0, 0, 0, 0),
    ]
    assert h.stream() == []
    h.malloc(4, B, 8, S2, ts=5)
    assert h.stream() == [(1, 4, B, 8, 8, S2, 5)]
    assert h.t.last_ts == 77


def test_stream_off_by_default(make_heap: Any) -> None:
    h = make_heap()
    h.malloc(1, A, 8, S1)
    assert h.t.take_stream() == b""


def test_close_is_idempotent_and_final(make_heap: Any) -> None:
    h = make_heap()
    h.malloc(1, A, 8, S1)
    h.t.close()
    h.t.close()
    for call in (h.t.flush, h.t.totals, h.t.live, h.t.dump, h.t.peak, h.t.unresolved, h.t.take_stream,
                 h.t.stats, h.t.threads):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError):
        h.malloc(2, B, 8, S1)
    with pytest.raises(ValueError):
        _ = h.t.last_ts


def test_rows_carry_the_real_sizes_of_their_samples(make_heap: Any) -> None:
    # GIVEN two small allocations sampled at 4096 bytes each and a large one recorded exactly
    h = make_heap()
    h.malloc(1, A, 4096, S1, alloc_size=24)
    h.malloc(2, B, 4096, S1, alloc_size=40)
    h.malloc(3, C, 10000, S2, alloc_size=10000)
    h.t.set_callsite(S1, 7)
    h.t.set_callsite(S2, 9)
    # THEN the rows carry sampled bytes and, beside them, the real ones
    assert sorted(h.dump_real()) == [(7, 2, 8192, 64), (9, 1, 10000, 10000)]
    # WHEN the 24-byte one is freed: the free row takes its real size back
    h.free(4, A)
    assert h.dump_real() == [(7, -1, -4096, -24)]
    # AND the peak (all three live) has the real sizes of what was live and allocated then
    assert h.peak_real() == {7: (2, 8192, 2, 8192, 64, 64), 9: (1, 10000, 1, 10000, 10000, 10000)}


# ---- per (stack, thread) totals ----

T1, T2 = 4101, 4102  # kernel thread ids


def test_thread_totals_follow_the_allocating_thread(make_heap: Any) -> None:
    # GIVEN a tracker that keeps threads: T1 and T2 allocate from S1, T2 also from S2
    h = make_heap(threads=True)
    assert h.t.keeps_threads
    h.malloc(1, A, 100, S1, tid=T1)
    h.malloc(2, B, 30, S1, tid=T2)
    h.malloc(3, C, 7, S2, tid=T2)
    # WHEN T2 frees T1's block, and a malloc at B's still-live address implies B's free
    h.free(4, A)
    h.malloc(5, B, 50, S2, tid=T1)
    # THEN each free counts for the thread that allocated the block, in first-seen order
    assert list(h.threads().items()) == [
        ((S1, T1), (0, 100, 100, 1, 1)),
        ((S1, T2), (0, 30, 30, 1, 1)),
        ((S2, T2), (0, 7, 0, 1, 0)),
        ((S2, T1), (0, 50, 0, 1, 0)),
    ]
    # AND they add up to the per-stack totals
    assert h.totals() == {S1: (130, 130, 2, 2), S2: (57, 0, 2, 0)}
    assert h.stats()["implicit_frees"] == 1


def test_thread_rows_name_the_callsite_once_known(make_heap: Any) -> None:
    # GIVEN two stacks of one callsite, one thread each; then S1 is resolved
    h = make_heap(threads=True)
    h.malloc(1, A, 64, S1, tid=T1)
    h.malloc(2, B, 32, S2, tid=T2)
    h.t.set_callsite(S1, 5)
    # THEN S1's row carries callsite 5 and S2's still none; after S2 folds in, both
    assert h.threads() == {(S1, T1): (5, 64, 0, 1, 0), (S2, T2): (0, 32, 0, 1, 0)}
    h.t.set_callsite(S2, 5)
    h.free(3, B)
    assert h.threads() == {(S1, T1): (5, 64, 0, 1, 0), (S2, T2): (5, 32, 32, 1, 1)}
    assert h.callsite_totals() == {5: (96, 32, 2, 1)}


def test_thread_totals_in_sequence_order_match_a_model(make_heap: Any) -> None:
    # GIVEN ops of three threads over three stacks, shuffled within windows as the ring delivers them
    h = make_heap(threads=True)
    rng = random.Random(77)
    pool = [0x6600_0000 + 16 * i for i in range(500)]
    live: dict[int, tuple[int, int, int]] = {}
    model: dict[tuple[int, int], list[int]] = {}
    ops: list[tuple[int, int, Any, Any, Any]] = []  # (seq, addr, size, stack, tid); a free's are None
    for seq in range(1, 20001):
        addr = rng.choice(pool)
        if addr in live:
            stack, tid, size = live.pop(addr)
            m = model[(stack, tid)]
            m[1] += size
            m[3] += 1
            ops.append((seq, addr, None, None, None))
        else:
            stack, tid, size = rng.choice((S1, S2, S3)), rng.choice((T1, T2, 1)), rng.randrange(1, 4000)
            live[addr] = (stack, tid, size)
            m = model.setdefault((stack, tid), [0, 0, 0, 0])
            m[0] += size
            m[2] += 1
            ops.append((seq, addr, size, stack, tid))
    for i in range(0, len(ops), 8):
        window = ops[i:i + 8]
        rng.shuffle(window)
        for s, addr, size, stack, tid in window:
            if size is None:
                h.free(s, addr)
            else:
                h.malloc(s, addr, size, stack, tid=tid)
    # THEN the per-thread totals are the model's, with nothing pending or lost
    assert {k: list(v[1:]) for k, v in h.threads().items()} == model
    assert h.stats()["implicit_frees"] == h.stats()["untracked_frees"] == 0


def test_no_thread_totals_unless_asked(make_heap: Any) -> None:
    # GIVEN a plain tracker (a plain recording): ops with thread ids
    h = make_heap()
    assert not h.t.keeps_threads
    h.malloc(1, A, 64, S1, tid=T1)
    h.free(2, A)
    # THEN no per-thread rows, and the usual totals
    assert h.t.threads() == b""
    assert h.totals() == {S1: (64, 64, 1, 1)}


def test_live_and_stream_rows_name_stacks_when_threads_are_kept(make_heap: Any) -> None:
    # GIVEN a tracker keeping threads and the stream: one stack allocated from two threads
    h = make_heap(stream=True, threads=True)
    h.malloc(1, A, 64, S1, ts=5, tid=T1)
    h.malloc(2, B, 32, S2, ts=6, tid=T2)
    h.malloc(3, C, 16, S1, ts=7, tid=T2)
    h.free(4, A)
    # THEN live and stream rows carry the stack ids, as without threads
    assert h.live() == {B: (32, 32, S2, 2), C: (16, 16, S1, 3)}
    assert h.stream()[-1] == (2, 4, A, 64, 64, S1, 0)
