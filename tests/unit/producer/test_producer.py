"""The producer against a client played by the test: handshake, records, dumps.

The test is the target process here (SO_PEERCRED gives the producer our pid),
writing records through the real shared ring the producer hands out.
"""

from __future__ import annotations

import mmap
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import wire_support as ws

from heapscope.model import HEAP_NAME
from heapscope.producer import procfs
from heapscope.producer.config import RecordConfig
from heapscope.producer.producer import Producer
from heapscope.store.writer import ProfileWriter
from heapscope.wire import codec

pytestmark = pytest.mark.timeout(30)

MODULE = codec.ModuleRecord(base=0x400000, start=0x401000, end=0x402000, file_offset=0x1000,
                            vaddr=0x1000, build_id=bytes.fromhex("aabbccdd"), path="/bin/fake")


class FakeClient:
    """Plays the client's side of the protocol from Python."""

    def __init__(self, producer: Producer, token: bytes | None = None, pid: int | None = None) -> None:
        import os
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(producer.socket_path)
        hello = codec.Hello(codec.WIRE_MAGIC, codec.WIRE_VERSION, pid or os.getpid(), os.getppid(),
                            token if token is not None else producer.token)
        self.sock.sendall(hello.pack())
        producer.poll(0.5)  # accept and answer
        msg, fds, _, _ = socket.recv_fds(self.sock, codec.CONFIG.size, 1)
        fields = codec.CONFIG.unpack(msg)
        self.status, self.interval = fields[2], fields[3]
        self.ring: ws.RingWriter | None = None
        if fds:
            ring_size = fields[4]
            self.shm = mmap.mmap(fds[0], codec.META_SIZE + ring_size)
            self.ring = ws.RingWriter(self.shm)

    def send(self, *records: bytes) -> None:
        assert self.ring is not None
        for r in records:
            assert self.ring.write(r)

    def close(self) -> None:
        self.sock.close()


def _rows(producer: Producer, sql: str) -> list[tuple[Any, ...]]:
    writer = producer.writer
    assert isinstance(writer, ProfileWriter)  # the fixture's: this producer keeps a profile
    writer.commit()
    db = sqlite3.connect(writer.path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _end(producer: Producer, client: FakeClient) -> None:
    """Close the client's socket and let the producer see the EOF."""
    before = len(producer.processes)
    client.close()
    while len(producer.processes) == before:
        producer.poll(0.5)


def test_records_become_a_dump_with_alloc_and_free_rows(producer: Producer) -> None:
    # GIVEN a client that allocates 3 blocks on one stack and 1 on another, and frees one
    c = FakeClient(producer)
    assert c.status == codec.Status.OK and c.interval == 1
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_module(MODULE),
           ws.encode_stack(7, [0x401100, 0x401200]), ws.encode_stack(8, [0x401300, 0x401200]))
    c.send(ws.encode_malloc(1, 0x1000, 100, 100, 7, 10), ws.encode_free(3, 0x1000),  # free before seq 2
           ws.encode_malloc(2, 0x2000, 50, 50, 7, 11), ws.encode_malloc(4, 0x1000, 30, 30, 8, 12),
           ws.encode_malloc(5, 0x3000, 20, 20, 7, 13))
    # WHEN the process goes away
    _end(producer, c)
    # THEN one dump holds the allocations and the free, per callsite
    rows = _rows(producer, "SELECT callsite_id, count, size FROM heap_profile_allocation ORDER BY size")
    by_leaf: dict[int, list[tuple[int, int]]] = {}
    for cs, count, size in rows:
        by_leaf.setdefault(cs, []).append((count, size))
    assert sorted(by_leaf.values()) == sorted([[(-1, -100), (3, 170)], [(1, 30)]])
    frames = _rows(producer, "SELECT f.rel_pc, m.name, m.build_id FROM stack_profile_frame f "
                             "JOIN stack_profile_mapping m ON f.mapping = m.id ORDER BY f.rel_pc")
    # rel_pc = return address - 1 - load base
    assert frames == [(0x10FF, "/bin/fake", "aabbccdd"), (0x11FF, "/bin/fake", "aabbccdd"),
                      (0x12FF, "/bin/fake", "aabbccdd")]
    depths = _rows(producer, "SELECT depth, COUNT(*) FROM stack_profile_callsite GROUP BY depth")
    assert depths == [(0, 1), (1, 2)]  # one root (the shared caller), two leaves
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    assert stats["heap_samples"] == 4 and stats["frees"] == 1 and stats["malformed_records"] == 0


def test_malformed_records_are_counted_and_skipped(producer: Producer) -> None:
    c = FakeClient(producer)
    c.send(ws.encode_module(MODULE), ws.encode_stack(7, [0x401100]))
    bad_type = codec.HEADER.pack(codec.header(16, 9)) + b"\0" * 8
    short_malloc = codec.HEADER.pack(codec.header(16, codec.RecordType.MALLOC)) + b"\0" * 8
    bad_depth = ws.encode_stack(9, [1])
    bad_depth = bad_depth[:16] + (500).to_bytes(4, "little") + bad_depth[20:]
    c.send(bad_type, short_malloc, bad_depth, ws.encode_malloc(1, 0x10, 8, 8, 7, 1))
    _end(producer, c)
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    assert stats["malformed_records"] == 3
    assert stats["heap_samples"] == 1
    assert _rows(producer, "SELECT SUM(size) FROM heap_profile_allocation") == [(8,)]


def test_a_corrupt_ring_ends_only_that_process(producer: Producer) -> None:
    bad, good = FakeClient(producer), FakeClient(producer)
    huge = codec.HEADER.pack(codec.header(1 << 20, codec.RecordType.MALLOC)) + b"\0" * 48
    bad.send(ws.encode_module(MODULE), ws.encode_stack(7, [0x401100]),
             ws.encode_malloc(1, 0x10, 8, 8, 7, 1), huge)
    good.send(ws.encode_module(MODULE), ws.encode_stack(7, [0x401100]),
              ws.encode_malloc(1, 0x10, 16, 16, 7, 1))
    _end(producer, bad)
    _end(producer, good)
    corrupt = dict(_rows(producer, "SELECT idx, value FROM stats WHERE name = 'buffer_corrupted'"))
    assert corrupt == {1: 1, 2: 0}
    sizes = dict(_rows(producer, "SELECT upid, SUM(size) FROM heap_profile_allocation GROUP BY upid"))
    assert sizes == {1: 8, 2: 16}  # what came before the corruption is kept


@pytest.mark.parametrize("token,pid", [(b"\1" * 16, None), (None, 1)])
def test_unknown_session_or_pid_is_rejected_and_counted(producer: Producer, token: bytes | None,
                                                        pid: int | None) -> None:
    c = FakeClient(producer, token=token, pid=pid)
    assert c.status == codec.Status.REJECTED and c.ring is None
    assert not producer.processes
    assert producer.rejected_clients == 1


def test_a_stack_that_never_arrives_is_kept_under_a_placeholder(producer: Producer) -> None:
    c = FakeClient(producer)
    c.send(ws.encode_malloc(1, 0x10, 64, 64, 1234, 1))
    _end(producer, c)
    assert _rows(producer, "SELECT f.name, a.size FROM heap_profile_allocation a JOIN stack_profile_callsite c"
                           " ON a.callsite_id = c.id JOIN stack_profile_frame f ON c.frame_id = f.id") == [
        ("[stack never received]", 64)]


def test_skip_symbol_prefix_collapses_frames_into_filtered(tmp_path: Path) -> None:
    writer = ProfileWriter(tmp_path / "p.db")
    producer = Producer(writer, RecordConfig(interval=1, shmem_size=1 << 16, skip_symbol_prefixes=("/usr/lib/",)))
    lib = codec.ModuleRecord(0x7000000, 0x7001000, 0x7002000, 0x1000, 0x1000, b"", "/usr/lib/libx.so")
    c = FakeClient(producer)
    c.send(ws.encode_module(MODULE), ws.encode_module(lib),
           ws.encode_stack(7, [0x7001100, 0x7001200, 0x401100]),
           ws.encode_malloc(1, 0x10, 64, 64, 7, 1))
    _end(producer, c)
    producer.finish()
    path = [r[0] for r in _rows(producer, "SELECT f.name FROM stack_profile_callsite c JOIN stack_profile_frame f"
                                          " ON c.frame_id = f.id ORDER BY c.depth")]
    assert path == ["", "FILTERED"]
    writer.close()


PEAK_SQL = ("SELECT f.rel_pc, p.ts, p.heap_name, p.count, p.size, p.alloc_count, p.alloc_size"
            " FROM heapscope_peak_allocation p JOIN stack_profile_callsite c ON p.callsite_id = c.id"
            " JOIN stack_profile_frame f ON c.frame_id = f.id ORDER BY f.rel_pc")


def test_final_dump_writes_the_peak_freed_before_exit(producer: Producer) -> None:
    # GIVEN stack 7 allocates 100 and stack 8 50 (the peak, 150, at ts 11); both are freed,
    # then 20 more on stack 7; a dump in between, and stack 8's record arriving only after it
    c = FakeClient(producer)
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_module(MODULE),
           ws.encode_stack(7, [0x401100, 0x401200]))
    c.send(ws.encode_malloc(1, 0x1000, 100, 100, 7, 10), ws.encode_malloc(2, 0x2000, 50, 50, 8, 11),
           ws.encode_free(3, 0x1000))
    producer.dump_all("signal")
    c.send(ws.encode_stack(8, [0x401300, 0x401200]), ws.encode_free(4, 0x2000),
           ws.encode_malloc(5, 0x3000, 20, 20, 7, 13))
    # WHEN the process goes away
    _end(producer, c)
    # THEN the peak is its own snapshot: unreleased at the peak, and allocated up to it
    assert _rows(producer, PEAK_SQL) == [(0x10FF, 11, HEAP_NAME, 1, 100, 1, 100),
                                         (0x12FF, 11, HEAP_NAME, 1, 50, 1, 50)]
    # AND the dumps are deltas as before: the first without the stack not yet received
    dumps = _rows(producer, "SELECT a.ts, f.rel_pc, a.count, a.size FROM heap_profile_allocation a"
                            " JOIN stack_profile_callsite c ON a.callsite_id = c.id"
                            " JOIN stack_profile_frame f ON c.frame_id = f.id ORDER BY a.ts, f.rel_pc, a.size")
    first, last = dumps[0][0], dumps[-1][0]
    assert [r[1:] for r in dumps if r[0] == first] == [(0x10FF, -1, -100), (0x10FF, 1, 100)]
    assert [r[1:] for r in dumps if r[0] == last] == [(0x10FF, 1, 20), (0x12FF, -1, -50), (0x12FF, 1, 50)]


def test_no_peak_rows_for_a_process_that_allocated_nothing(producer: Producer) -> None:
    c = FakeClient(producer)
    c.send(ws.encode_module(MODULE), ws.encode_free(1, 0x10))
    _end(producer, c)
    assert _rows(producer, "SELECT COUNT(*) FROM heapscope_peak_allocation") == [(0,)]


@pytest.mark.parametrize("factor", [4, 0, -1], ids=["above-polled", "below-polled", "implausible"])
def test_peak_rss_takes_the_clients_reading_at_its_exit(producer: Producer, factor: int) -> None:
    # GIVEN a client (this process: the producer polls our VmHWM) that leaves in the meta, as its
    # last destructor does, a VmHWM of `factor` times ours (0: 1 MiB, below; -1: 2^60 bytes) and
    # its own bytes
    polled = procfs.status_field("self", "VmHWM") * 1024
    c = FakeClient(producer)
    assert c.ring is not None
    exit_peak = {4: polled * 4, 0: 1 << 20, -1: 1 << 60}[factor]
    codec.write_meta(c.shm, "exit_peak_rss", exit_peak)
    codec.write_meta(c.shm, "own_rss", 3 << 20 if factor >= 0 else exit_peak)
    # WHEN the process goes away
    _end(producer, c)
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    # THEN its peak is the larger of the two, never below what was polled; a figure past 2^48
    # bytes (the target can write anything there) is not taken
    if factor == 4:
        assert stats["peak_rss_bytes"] == exit_peak and stats["client_own_rss_bytes"] == 3 << 20
    elif factor == 0:
        assert stats["peak_rss_bytes"] >= polled and stats["client_own_rss_bytes"] == 3 << 20
    else:
        assert polled <= stats["peak_rss_bytes"] < exit_peak and stats["client_own_rss_bytes"] == 0


def test_stacks_resolved_while_the_target_runs_leave_its_ring_drained_meanwhile(producer: Producer) -> None:
    """Resolving and writing a Python program's new stacks took 80-180 ms in one go, and a ring
    that filled meanwhile blocked its target (a build's or a Python program's `client_blocked_us`,
    up to 148 ms a run on a busy machine): the rings are drained between the steps, and the
    callsites are written CALLSITES_PER_WRITE at a time."""
    from heapscope.producer.producer import CALLSITES_PER_WRITE

    producer.resolve_every_ns = 1 << 62  # resolve_early only when the test calls it
    c = FakeClient(producer)
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_module(MODULE))
    # GIVEN more new stacks than two writes of callsites take (a root, 6 callers, 4,000 leaves each)
    n = 2 * CALLSITES_PER_WRITE + 4000
    for first in range(0, n, 500):
        c.send(*(r for k in range(first, min(first + 500, n))
                 for r in (ws.encode_stack(k + 1, [0x401001 + k % 4000, 0x401fb0 + k // 4000, 0x401ff0]),
                           ws.encode_malloc(k + 1, 0x10000 + 16 * k, 16, 16, k + 1, 10))))
        producer.poll(0)
    # AND records that came after the last drain
    c.send(*(ws.encode_malloc(n + 1 + k, 0x900000 + 16 * k, 16, 16, 1, 11) for k in range(50)))
    assert c.ring is not None
    assert c.ring.space() < c.ring.ring_size
    # WHEN the stacks are resolved and written while the target runs
    producer.resolve_early()
    # THEN the ring was drained on the way, and every callsite is in the profile once
    assert c.ring.space() == c.ring.ring_size
    by_depth = _rows(producer, "SELECT depth, COUNT(*), COUNT(DISTINCT id) FROM stack_profile_callsite GROUP BY depth")
    assert by_depth == [(0, 1, 1), (1, 6, 6), (2, n, n)]
    _end(producer, c)
