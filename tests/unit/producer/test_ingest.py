"""The C ring reader (heapscope.producer._ingest.Ingest) against the real shared ring.

Each test plays the client with ws.RingWriter and codec.encode_*, and checks
what the reader did: records consumed, validated, handed back or sent on to
its tracker, read_pos published and bytes zeroed. What the tracker does with
the ops is tested in tests/unit/bookkeeping/test_tracker.py.
"""

from __future__ import annotations

import random
import threading
import time
from types import ModuleType
from typing import Any

import pytest
import wire_support as ws

from heapscope.wire import codec

pytestmark = pytest.mark.timeout(60)

S1, S2, S3 = 0x1111, 0x2222, 0x3333
A, B = 0x7F00_0000_1000, 0x7F00_0000_2000


def malloc(seq: int, addr: int, size: int, stack: int, ts: int = 0, alloc_size: int | None = None) -> bytes:
    return ws.encode_malloc(seq, addr, size, size if alloc_size is None else alloc_size, stack, ts)


def free(seq: int, addr: int) -> bytes:
    return ws.encode_free(seq, addr)


def raw_record(size_field: int, rtype: int, body_len: int) -> bytes:
    """A record whose header may lie about its size; body_len + 8 bytes long."""
    return codec.HEADER.pack(codec.header(size_field, rtype)) + b"\xab" * body_len


# ---- ops reach the tracker ----

def test_in_order_malloc_and_free_totals(make_ring: Any) -> None:
    # GIVEN two stacks, three mallocs and one free, in order
    ring = make_ring()
    ring.feed([malloc(1, A, 100, S1, ts=10), malloc(2, B, 50, S2, ts=20),
               free(3, A), malloc(4, A, 30, S1, ts=15)])
    # THEN the totals are cumulative per stack, and the live set holds the rest
    assert ring.totals() == {S1: (130, 100, 2, 1), S2: (50, 0, 1, 0)}
    assert ring.live() == {A: (30, 30, S1, 4), B: (50, 50, S2, 2)}
    st = ring.stats()
    assert (st["records"], st["mallocs"], st["frees"]) == (4, 3, 1)
    assert (st["committed_seq"], st["pending"], st["live_allocations"]) == (4, 0, 2)
    assert st["untracked_frees"] == st["implicit_frees"] == st["late_records"] == 0
    assert ring.ingest.tracker.last_ts == 20


def test_interleaved_threads_many_addresses(make_ring: Any) -> None:
    # GIVEN a reference model, and ops written in a shuffled order within windows
    ring = make_ring(1 << 20)
    rng = random.Random(1234)
    ops: list[bytes] = []
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
            ops.append(free(seq, addr))
        else:
            stack, size = rng.choice((S1, S2, S3)), rng.randrange(1, 5000)
            live[addr] = (stack, size)
            t = model.get(stack, (0, 0, 0, 0))
            model[stack] = (t[0] + size, t[1], t[2] + 1, t[3])
            ops.append(malloc(seq, addr, size, stack))
    shuffled = []
    for i in range(0, len(ops), 16):
        window = ops[i:i + 16]
        rng.shuffle(window)
        shuffled += window
    # WHEN it is drained
    ring.feed(shuffled)
    # THEN sequence order undoes the shuffle
    assert ring.totals() == model
    assert {a: (r[0], r[2]) for a, r in ring.live().items()} == {a: (v[1], v[0]) for a, v in live.items()}
    st = ring.stats()
    assert st["implicit_frees"] == st["untracked_frees"] == st["late_records"] == 0
    assert st["committed_seq"] == seq and st["pending"] == 0 and st["max_pending"] > 1


def test_drain_gives_up_gaps_by_the_clock_it_is_given(make_ring: Any) -> None:
    # GIVEN seq 2 read at t0, seq 1 never written
    ring = make_ring()
    t0 = ring.now_ns
    ring.feed([malloc(2, A, 10, S1)])
    assert ring.stats()["pending"] == 1
    # WHEN drained again exactly 1 s later by the caller's clock: still waiting
    ring.now_ns = t0 + 1_000_000_000
    ring.drain()
    assert ring.stats()["pending"] == 1
    # THEN a drain after that gives the gap up
    ring.now_ns += 1
    ring.drain()
    st = ring.stats()
    assert (st["pending"], st["gaps_skipped"], st["committed_seq"]) == (0, 1, 2)
    assert ring.live() == {A: (10, 10, S1, 2)}


def test_ops_on_a_corrupt_ring_still_time_out(make_ring: Any) -> None:
    # GIVEN an op waiting for seq 1, then broken framing
    ring = make_ring()
    ring.feed([malloc(2, A, 10, S1), raw_record(1 << 20, codec.RecordType.MALLOC, 48)])
    assert ring.stats()["corrupt"] == 1 and ring.stats()["pending"] == 1
    # WHEN the reader keeps draining the corrupt ring past the timeout
    ring.now_ns += 2_000_000_000
    assert ring.drain() == []
    # THEN what was read is applied
    st = ring.stats()
    assert (st["pending"], st["gaps_skipped"], st["committed_seq"]) == (0, 1, 2)


def test_stream_rows_come_through_the_ring(make_ring: Any) -> None:
    ring = make_ring(stream=True)
    ring.feed([free(2, A), malloc(1, A, 4096, S1, ts=77, alloc_size=100)])
    assert ring.stream() == [(1, 1, A, 100, 4096, S1, 77), (2, 2, A, 100, 4096, S1, 0)]


# ---- rare records ----

def test_module_heap_returned_whole_in_ring_order_stacks_kept(make_ring: Any) -> None:
    ring = make_ring()
    module = codec.ModuleRecord(base=0x400000, start=0x401000, end=0x402000, file_offset=0x1000,
                                vaddr=0x1000, build_id=bytes(range(20)), path="/usr/lib/libfoo.so.1")
    recs = [ws.encode_heap(0, 4096, "libc.malloc"), ws.encode_module(module),
            ws.encode_stack(S1, [0x401234, 0x401100], truncated=True), malloc(1, A, 8, S1),
            ws.encode_stack(S2, [])]
    ring.feed(recs)
    assert ring.returned == [recs[0], recs[1]]
    decoded = [codec.decode_record(r) for r in ring.returned]
    assert decoded[0] == codec.HeapRecord(0, 4096, "libc.malloc")
    assert decoded[1] == module
    # the stacks went to the process's resolver, whole, in the order they came
    resolver = ring.ingest.resolver
    assert codec.decode_record(resolver.held_stack(S1)) == codec.StackRecord(S1, (0x401234, 0x401100), True)
    assert codec.decode_record(resolver.held_stack(S2)) == codec.StackRecord(S2, (), False)
    assert resolver.waiting() == [S1, S2]
    assert ring.stats()["mallocs"] == 1 and ring.stats()["held_stacks"] == 2


def test_a_drain_stops_before_a_stack_that_follows_a_module(make_ring: Any) -> None:
    # GIVEN a MODULE, then a STACK and a MALLOC of it (a library loaded where an unloaded one
    # was: the producer must apply the module before the stacks after it are kept)
    ring = make_ring()
    module = codec.ModuleRecord(base=0x400000, start=0x401000, end=0x402000, file_offset=0x1000,
                                vaddr=0x1000, build_id=bytes(range(20)), path="/usr/lib/libfoo.so.1")
    before = ws.encode_stack(S2, [0x401100])
    recs = [before, ws.encode_module(module), ws.encode_stack(S1, [0x401234]), malloc(1, A, 8, S1)]
    for rec in recs:
        assert ring.writer.write(rec)
    # WHEN the ring is drained once: the stack before the module is kept, the module returned,
    # and nothing after it is read
    assert ring.drain() == [recs[1]]
    resolver = ring.ingest.resolver
    assert resolver.waiting() == [S2] and ring.stats()["mallocs"] == 0
    # THEN the next drain takes the rest
    assert ring.drain() == []
    assert resolver.waiting() == [S2, S1] and ring.stats()["mallocs"] == 1


def test_held_stacks_stay_in_c_and_are_found_by_id(make_ring: Any) -> None:
    # GIVEN a reader (its stacks are read by id when no profile is kept: the pytest plugin's case)
    ring = make_ring(size=1 << 12)  # small: the records below wrap it several times
    py = ((0x51, 12, codec.PY_FRAME_ENTRY), (0x52, -1, 0))
    heap = ws.encode_heap(0, 4096, "libc.malloc")
    first = ws.encode_stack(S1, [0x401234, 0x401100])
    # WHEN many stacks come, native and Python, one of them defined twice, between other records
    ring.feed([heap, first, malloc(1, A, 8, S1)])
    assert ring.returned == [heap]
    many = {S3 + i: ws.encode_stack(S3 + i, [0x400000 + i] * (i % 7), py=py if i % 2 else None)
            for i in range(300)}
    for i, rec in enumerate(many.values()):
        ring.feed([rec])
        assert ring.returned == [heap]
        if i == 150:
            again = ws.encode_stack(S1, [0x409999])
            ring.feed([again])
    # THEN none is returned; each is held whole, the last definition of S1 wins
    assert ring.ingest.resolver.held_stack(S1) == again
    assert all(ring.ingest.resolver.held_stack(sid) == rec for sid, rec in many.items())
    assert codec.decode_record(many[S3 + 1]) == codec.StackRecord(S3 + 1, (0x400001,), False, py, 0, True)
    assert ring.ingest.resolver.held_stack(S2) is None
    assert ring.stats()["held_stacks"] == 302
    # AND a malformed stack is counted, not held
    bad = bytearray(ws.encode_stack(S2, [1, 2]))
    bad[8 + 8:8 + 12] = (3).to_bytes(4, "little")  # depth 3: past the record's end
    ring.feed([bytes(bad)])
    assert ring.ingest.resolver.held_stack(S2) is None
    assert ring.stats()["malformed_records"] == 1


def test_max_records_limits_one_drain(make_ring: Any) -> None:
    ring = make_ring()
    module = ws.encode_module(codec.ModuleRecord(1, 2, 3, 4, 5, b"", "/p"))
    for _ in range(10):
        assert ring.writer.write(module)
    first = ring.drain(3)
    assert len(first) == 3
    assert ring.meta("read_pos") == 3 * len(module)
    assert len(ring.drain()) == 7
    assert ring.drain() == []


# ---- the ring itself ----

def test_wraparound_many_laps_with_pads_zeroes_what_it_read(make_ring: Any) -> None:
    # GIVEN a 4 KiB ring and records of uneven sizes, so writers pad at the end
    ring = make_ring(4096)
    rng = random.Random(7)
    recs, stacks_sent, seq = [], [], 0
    for i in range(3000):
        depth = rng.randrange(0, 40)
        recs.append(ws.encode_stack(i + 1, list(range(depth))))
        stacks_sent.append(i + 1)
        seq += 1
        recs.append(malloc(seq, A + 16 * i, 16, S1))
        seq += 1
        recs.append(free(seq, A + 16 * i))
    # WHEN written and drained lap after lap
    ring.feed(recs)
    # THEN everything came through, in order
    assert ring.meta("write_pos") > 100 * 4096
    assert ring.meta("read_pos") == ring.meta("write_pos")
    assert ring.returned == [] and ring.ingest.resolver.waiting() == stacks_sent
    st = ring.stats()
    assert st["pads"] > 0 and st["malformed_records"] == 0 and st["corrupt"] == 0
    assert ring.totals() == {S1: (16 * 3000, 16 * 3000, 3000, 3000)}
    # AND every byte read was zeroed for the writers
    assert ring.data() == bytes(4096)


def test_reserved_but_unwritten_record_stops_the_reader(make_ring: Any) -> None:
    # GIVEN a writer that reserved space (write_pos moved) but has not stored its header yet
    ring = make_ring()
    ring.writer.write(malloc(1, A, 8, S1))
    rec = malloc(2, B, 8, S1)
    wp = ring.meta("write_pos")
    ring.writer.set("write_pos", wp + len(rec))
    ring.put_raw(wp + 8, rec[8:])
    ring.writer.write(malloc(3, A + 32, 8, S1))
    # WHEN drained
    ring.drain()
    # THEN the reader stops at the zero header, keeping FIFO order
    assert ring.meta("read_pos") == wp
    assert ring.stats()["mallocs"] == 1
    # AND resumes once the header is stored
    ring.put_raw(wp, rec[:8])
    ring.drain()
    assert ring.stats()["mallocs"] == 3 and ring.stats()["committed_seq"] == 3


def test_read_pos_published_while_draining_a_full_ring(make_ring: Any) -> None:
    # GIVEN a writer thread that blocks on a full ring until read_pos moves
    ring = make_ring(1 << 12)
    n = 20000
    done = threading.Event()

    def writer() -> None:
        w = ws.RingWriter(ring.shm)
        for i in range(n):
            rec = malloc(i + 1, A + 16 * (i % 100), 16, S1)
            deadline = time.monotonic() + 20
            while not w.write(rec):
                assert time.monotonic() < deadline
        done.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while ring.stats()["mallocs"] < n and time.monotonic() < deadline:
        ring.drain()
    t.join(timeout=30)
    assert done.is_set()
    st = ring.stats()
    assert st["mallocs"] == n and st["implicit_frees"] == n - 100


# ---- a hostile or broken client ----

def test_unknown_type_and_wrong_sizes_are_skipped(make_ring: Any) -> None:
    ring = make_ring()
    bad = [
        raw_record(16, 9, 8),                            # unknown type
        raw_record(56, codec.RecordType.MALLOC, 48),     # MALLOC too short (wire version 4's, without tid)
        raw_record(72, codec.RecordType.MALLOC, 64),     # MALLOC too long
        raw_record(16, codec.RecordType.FREE, 8),        # FREE too short
        raw_record(16, codec.RecordType.STACK, 8),       # STACK without its struct
        codec.HEADER.pack(codec.header(32, codec.RecordType.STACK)) + codec.STACK.pack(S1, 3, 0) + b"\0" * 8,
        codec.HEADER.pack(codec.header(24, codec.RecordType.STACK)) + codec.STACK.pack(S1, 300, 0),
        raw_record(40, codec.RecordType.MODULE, 32),     # MODULE too short
        codec.HEADER.pack(codec.header(8 + codec.MODULE.size, codec.RecordType.MODULE))
        + codec.MODULE.pack(0, 0, 0, 0, 0, 0, 50, b""),  # path longer than the record
        codec.HEADER.pack(codec.header(8 + codec.MODULE.size, codec.RecordType.MODULE))
        + codec.MODULE.pack(0, 0, 0, 0, 0, 41, 0, b""),  # build id longer than its field
        raw_record(24, codec.RecordType.HEAP, 16),       # HEAP too short
    ]
    recs = [malloc(1, A, 10, S1)] + bad + [free(2, A), ws.encode_stack(S1, [1, 2])]
    ring.feed(recs)
    st = ring.stats()
    assert st["malformed_records"] == len(bad)
    assert st["corrupt"] == 0
    assert st["records"] == len(recs)
    assert ring.totals() == {S1: (10, 10, 1, 1)}
    assert ring.returned == [] and ring.ingest.resolver.waiting() == [S1]
    assert codec.decode_record(ring.ingest.resolver.held_stack(S1)) == codec.StackRecord(S1, (1, 2), False)
    assert ring.data() == bytes(ring.size)


@pytest.mark.parametrize(
    ("name", "record"),
    [
        ("huge length", raw_record(1 << 20, codec.RecordType.MALLOC, 48)),
        ("length beyond write_pos", raw_record(128, codec.RecordType.MALLOC, 48)),
        ("length not a multiple of 8", raw_record(60, codec.RecordType.MALLOC, 56)),
        ("length below the header", raw_record(4, codec.RecordType.PAD, 8)),
        ("zero length", raw_record(0, codec.RecordType.MALLOC, 8)),
    ],
)
def test_broken_framing_marks_the_ring_corrupt(make_ring: Any, name: str, record: bytes) -> None:
    # GIVEN one good record, then a badly framed one
    ring = make_ring()
    ring.feed([malloc(1, A, 10, S1), record])
    # THEN reading stops for good at the broken record
    st = ring.stats()
    assert st["corrupt"] == 1, name
    assert st["mallocs"] == 1 and st["records"] == 1
    assert ring.returned == []
    assert ring.meta("read_pos") == 8 + codec.MALLOC.size
    ring.feed([ws.encode_stack(S2, [1]), malloc(2, B, 5, S1)])
    assert ring.drain() == [] and ring.stats()["records"] == 1
    assert ring.totals() == {S1: (10, 0, 1, 0)}


def test_ops_pending_on_a_corrupt_ring_are_still_flushed(make_ring: Any) -> None:
    # GIVEN an op waiting for seq 1, then broken framing
    ring = make_ring()
    ring.feed([malloc(2, A, 10, S1), raw_record(1 << 20, codec.RecordType.MALLOC, 48)])
    assert ring.stats()["corrupt"] == 1 and ring.stats()["pending"] == 1
    # WHEN the process ends
    ring.ingest.tracker.flush()
    # THEN what was read is booked
    st = ring.stats()
    assert (st["pending"], st["gaps_skipped"], st["committed_seq"]) == (0, 1, 2)
    assert ring.totals() == {S1: (10, 0, 1, 0)}


def test_record_crossing_the_end_is_corrupt(make_ring: Any, ingest_mod: ModuleType) -> None:
    # GIVEN a ring whose reader starts 64 bytes before the end
    ring = make_ring(4096)
    ring.writer.set("write_pos", 4096 - 64)
    ring.writer.set("read_pos", 4096 - 64)
    ring.ingest.close()
    ring.ingest = ingest_mod.Ingest(ring.fd, 4096)
    # WHEN a 128-byte record claims to start there
    ring.put_raw(4096 - 64, codec.HEADER.pack(codec.header(128, codec.RecordType.STACK)))
    ring.writer.set("write_pos", 4096 + 64)
    assert ring.drain() == []
    assert ring.stats()["corrupt"] == 1


@pytest.mark.parametrize(
    ("write_pos", "read_pos"),
    [(12, 0), (0, 64), (4096 + 64, 0), (1 << 63, 8)],
    ids=["unaligned", "behind read_pos", "more than the ring", "absurd"],
)
def test_bad_positions_mark_the_ring_corrupt(make_ring: Any, ingest_mod: ModuleType, write_pos: int,
                                             read_pos: int) -> None:
    ring = make_ring(4096)
    ring.writer.set("read_pos", read_pos)
    ring.ingest.close()
    ring.ingest = ingest_mod.Ingest(ring.fd, 4096)
    ring.writer.set("write_pos", write_pos)
    assert ring.drain() == []
    assert ring.stats()["corrupt"] == 1
    assert ring.drain() == []


def _fuzz_records(rng: random.Random) -> bytes:
    """Plausibly framed records with random types, sizes, seqs and bodies."""
    out = b""
    while len(out) < 4096:
        kind = rng.randrange(4)
        if kind == 0:
            rec = ws.encode_malloc(rng.randrange(40), rng.randrange(8) * 16, rng.randrange(1 << 64),
                                      rng.randrange(1 << 64), rng.randrange(4), rng.randrange(1 << 64))
        elif kind == 1:
            rec = free(rng.randrange(40), rng.randrange(8) * 16)
        else:
            size = 8 * rng.randrange(1, 20)
            rtype = rng.choice([0, 1, 2, 3, 4, 5, 6, 0xFFFFFFFF])
            rec = codec.HEADER.pack(codec.header(size, rtype)) + rng.randbytes(size - 8)
        out += rec
    return out[:4096]


def test_fuzz_arbitrary_bytes_never_crash(make_ring: Any) -> None:
    # GIVEN rings filled with random bytes, random positions, mutated valid records,
    # or plausibly framed random records
    rng = random.Random(20261123)
    valid = [malloc(1, A, 10, S1), free(2, A), ws.encode_stack(S1, [1, 2, 3]),
             ws.encode_heap(1, 4096, "x"), ws.encode_module(codec.ModuleRecord(1, 2, 3, 4, 5, b"ab", "/p"))]
    deadline = time.monotonic() + 15
    cases = 0
    for case in range(3000):
        if time.monotonic() > deadline:
            break
        cases += 1
        ring = make_ring(4096)
        mode = case % 3
        if mode == 0:
            ring.put_raw(0, rng.randbytes(4096))
            wp = rng.choice([rng.randrange(0, 1 << 64), rng.randrange(0, 4097) & ~7, 4096])
        elif mode == 1:
            blob = bytearray(b"".join(rng.choice(valid) for _ in range(40)))
            for _ in range(rng.randrange(1, 20)):
                blob[rng.randrange(len(blob))] = rng.randrange(256)
            blob = blob[:4096]
            ring.put_raw(0, bytes(blob))
            wp = len(blob) & ~7
        else:
            blob = bytearray(_fuzz_records(rng))
            ring.put_raw(0, blob)
            wp = len(blob)
        ring.writer.set("write_pos", wp)
        # WHEN drained, in bounded and unbounded steps
        returned = 0
        for max_records in (rng.randrange(1, 5), 0, 0):
            for rec in ring.drain(max_records):
                returned += 1
                try:
                    codec.decode_record(rec)  # whatever is handed over must decode
                except codec.MalformedRecord:
                    pytest.fail(f"case {case}: ingest returned an undecodable record {rec!r}")
        ring.ingest.tracker.flush()
        # THEN the producer is consistent, and what it consumed is zeroed
        st = ring.stats()
        assert st["corrupt"] in (0, 1)
        assert st["pending"] == 0
        assert len(ring.live()) == st["live_allocations"]
        assert st["records"] == (st["mallocs"] + st["frees"] + st["pads"] + st["malformed_records"] + returned
                                 + st["held_stacks"])
        for sid in ring.ingest.resolver.waiting():  # whatever is kept must decode too
            held = ring.ingest.resolver.held_stack(sid)
            assert held is not None and isinstance(codec.decode_record(held), codec.StackRecord)
        rp = ring.meta("read_pos")
        assert rp <= 4096 and ring.data()[:rp] == bytes(rp)
        ring.close()
    assert cases >= 100


# ---- life cycle ----


def test_constructor_checks_ring_size(ingest_mod: ModuleType, shm_factory: Any) -> None:
    fd, _ = shm_factory(4096)
    with pytest.raises(ValueError):
        ingest_mod.Ingest(fd, 3000)  # not a power of two
    with pytest.raises(ValueError):
        ingest_mod.Ingest(fd, 2048)  # meta says 4096
    with pytest.raises(ValueError):
        ingest_mod.Ingest(fd, 8192)  # larger than the file
    ingest_mod.Ingest(fd, 4096).close()


def test_close_is_idempotent_and_final(make_ring: Any) -> None:
    ring = make_ring()
    ring.feed([malloc(1, A, 8, S1)])
    ring.ingest.close()
    ring.ingest.close()
    tracker = ring.ingest.tracker
    for call in (ring.drain, ring.ingest.stats, tracker.flush, tracker.totals, tracker.live, tracker.stats):
        with pytest.raises(ValueError):
            call()


