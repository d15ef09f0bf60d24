"""The handshake answered before the producer exists (producer/listener.py): `record`
answers its target with light imports, and the producer adopts the client later. The test plays
the client (SO_PEERCRED gives the listener our pid), writing through the real ring it was given."""

from __future__ import annotations

import mmap
import os
import resource
import socket
import sqlite3
from pathlib import Path

import pytest
import wire_support as ws

from heapscope.model import HEAP_NAME
from heapscope.producer.config import RecordConfig
from heapscope.producer.listener import Listener
from heapscope.producer.producer import Producer
from heapscope.store.writer import ProfileWriter
from heapscope.wire import codec

pytestmark = pytest.mark.timeout(30)

MODULE = codec.ModuleRecord(base=0x400000, start=0x401000, end=0x402000, file_offset=0x1000,
                            vaddr=0x1000, build_id=bytes.fromhex("aabbccdd"), path="/bin/fake")


def _connect(listener: Listener, token: bytes | None = None) -> tuple[socket.socket, int, ws.RingWriter | None]:
    """Hello, the listener's answer (accept() with nothing else running), and the ring."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(listener.socket_path)
    sock.sendall(codec.Hello(codec.WIRE_MAGIC, codec.WIRE_VERSION, os.getpid(), os.getppid(),
                             listener.token if token is None else token).pack())
    assert listener.wait(5.0)
    listener.accept()
    msg, fds, _, _ = socket.recv_fds(sock, codec.CONFIG.size, 1)
    config = codec.Config.unpack(msg)
    if not fds:
        return sock, config.status, None
    shm = mmap.mmap(fds[0], codec.META_SIZE + config.ring_size)
    os.close(fds[0])
    return sock, config.status, ws.RingWriter(shm)


def test_records_written_before_the_producer_exists_are_all_read(tmp_path: Path) -> None:
    config = RecordConfig(interval=1, shmem_size=1 << 16)
    listener = Listener(config)
    # GIVEN a client answered by the listener alone, which writes its records at once
    sock, status, ring = _connect(listener)
    assert status == codec.Status.OK and ring is not None
    for r in (ws.encode_heap(1, 1, HEAP_NAME), ws.encode_module(MODULE), ws.encode_stack(7, [0x401100, 0x401200]),
              ws.encode_malloc(1, 0x1000, 100, 100, 7, 10), ws.encode_malloc(2, 0x2000, 50, 50, 7, 11),
              ws.encode_free(3, 0x1000)):
        assert ring.write(r)
    # and a second one that has already gone when the producer comes
    sock2, _, ring2 = _connect(listener)
    assert ring2 is not None
    assert ring2.write(ws.encode_module(MODULE)) and ring2.write(ws.encode_stack(7, [0x401100]))
    assert ring2.write(ws.encode_malloc(1, 0x10, 8, 8, 7, 1))
    sock2.close()
    assert len(listener.accepted) == 2
    # WHEN the producer takes over (its first poll adopts them) and the first process ends
    writer = ProfileWriter(tmp_path / "p.db")
    producer = Producer(writer, config, listener=listener)
    try:
        producer.poll(0)
        assert not listener.accepted
        sock.close()
        while producer.processes:
            producer.poll(0.5)
    finally:
        producer.finish()
        writer.close()
    # THEN both processes are in the profile with every record their rings held
    db = sqlite3.connect(tmp_path / "p.db")
    try:
        assert db.execute("SELECT upid, pid FROM process ORDER BY upid").fetchall() == [(1, os.getpid()),
                                                                                         (2, os.getpid())]
        sizes = db.execute("SELECT upid, SUM(size), SUM(count) FROM heap_profile_allocation GROUP BY upid"
                           " ORDER BY upid").fetchall()
        assert sizes == [(1, 50, 1), (2, 8, 1)]
    finally:
        db.close()


def test_a_client_of_another_session_is_refused_by_the_listener_alone() -> None:
    listener = Listener(RecordConfig())
    try:
        sock, status, ring = _connect(listener, token=b"\0" * codec.TOKEN_SIZE)
        sock.close()
        assert status == codec.Status.REJECTED and ring is None
        assert listener.rejected_clients == 1 and not listener.accepted
    finally:
        listener.remove()
    assert not os.path.exists(listener.directory)


def test_answered_clients_the_producer_never_adopted_are_told_to_stop() -> None:
    # GIVEN a client answered, then the session abandoned before any producer existed
    listener = Listener(RecordConfig(shmem_size=1 << 16))
    sock, _, ring = _connect(listener)
    assert ring is not None
    for accepted in listener.take():
        accepted.close()
    listener.remove()
    # THEN its ring says so (the client stops and runs on unprofiled) and its socket is closed
    assert codec.read_meta(ring.shm, "shutting_down") == 1
    assert sock.recv(1) == b""
    sock.close()


def test_a_fork_storms_clients_all_find_room_to_wait() -> None:
    """The listen queue held 64 clients: the 66th of a fork storm waited in connect, and past that
    wait's 10 s bound ran on unprofiled, neither seen nor counted here."""
    listener = Listener(RecordConfig())
    clients = []
    try:
        # GIVEN 600 clients connecting at once (or as many as the kernel lets a queue hold) while
        # the listener answers none of them yet
        with open("/proc/sys/net/core/somaxconn") as f:
            storm = min(600, int(f.read()))
        for _ in range(storm):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            clients.append(c)
            c.setblocking(False)
            # THEN every one is queued at once (a full queue refuses a non-blocking connect: EAGAIN)
            c.connect(listener.socket_path)
    finally:
        listener.remove()
        for c in clients:
            c.close()


def test_every_client_waiting_while_out_of_descriptors_is_turned_away_in_one_call() -> None:
    """Out of descriptors, accept() turned away one waiting client a call, which the loop makes
    once a round: 600 processes at once on a busy machine waited past their connect's 10 s bound
    and went dormant, neither profiled nor counted. One call now turns away every one waiting."""
    listener = Listener(RecordConfig())
    clients = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        for _ in range(8):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(listener.socket_path)  # queued in the listen backlog: nobody accepts yet
            clients.append(c)
        # GIVEN no descriptor left below the limit
        lowest_free = os.open(os.devnull, os.O_RDONLY)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        # WHEN the listener answers once
        try:
            answered = listener.accept()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        # THEN all eight were turned away and counted, and each sees its socket closed while the
        # listener still listens (closing the listener would close those still waiting too)
        assert answered == 0 and listener.no_descriptors == 8
        for c in clients:
            c.settimeout(5.0)
            assert c.recv(1) == b""
    finally:
        listener.remove()
        for c in clients:
            c.close()
