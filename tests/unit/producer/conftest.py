"""Fixtures for the C ring reader: the extension itself (tests/native_ext.py), and shared rings to feed it.

The ring's clock is the test's: every drain passes `Ring.now_ns`, which a
test moves forward to make waiting ops time out.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import wire_support as ws
from native_ext import load_ingest

from heapscope.bookkeeping.rows import LIVE_ROW, STREAM_ROW, TOTALS_ROW
from heapscope.producer.config import RecordConfig
from heapscope.producer.producer import Producer
from heapscope.store.writer import ProfileWriter
from heapscope.wire import codec


@pytest.fixture(autouse=True)
def monotonic_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake clients here stamp their records with CLOCK_MONOTONIC-like values, as a client
    told to (Python reads no time-stamp counter): the producer asks for that clock, not the TSC
    (producer/tsc.py; tests/unit/producer/test_tsc.py checks the TSC's conversion)."""
    import heapscope.producer.tsc as tsc

    monkeypatch.setenv("HEAPSCOPE_CLOCK", "monotonic")
    monkeypatch.setattr(tsc, "_chosen", None)


@pytest.fixture
def producer(tmp_path: Path) -> Iterator[Producer]:
    """A producer writing a profile (interval 1: every record a sample; a 64 KiB ring), which the
    fake clients of test_producer.py connect to; a module may define its own."""
    writer = ProfileWriter(tmp_path / "p.db")
    p = Producer(writer, RecordConfig(interval=1, shmem_size=1 << 16))
    yield p
    p.finish()
    writer.close()


@pytest.fixture(scope="session")
def ingest_mod(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_ingest(tmp_path_factory.mktemp("ingest_build"))


@dataclass
class Ring:
    """A shared ring as the producer creates it, the client's writer, and an Ingest on it."""

    fd: int
    size: int
    shm: mmap.mmap
    writer: ws.RingWriter
    ingest: Any
    returned: list[bytes] = field(default_factory=list)
    closed: bool = False
    now_ns: int = 1_000_000_000  # the clock every drain is given

    def drain(self, max_records: int = 0) -> list[bytes]:
        records: list[bytes] = self.ingest.drain(self.now_ns, max_records)
        return records

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.ingest.close()
            self.shm.close()
            os.close(self.fd)

    def meta(self, name: str) -> int:
        return codec.read_meta(self.shm, name)

    def data(self) -> bytes:
        return bytes(self.shm[codec.META_SIZE:codec.META_SIZE + self.size])

    def feed(self, records: list[bytes]) -> None:
        """Write every record, draining whenever the ring is full, then drain until the read
        position stays (as the producer does: a drain stops before a STACK after a MODULE)."""
        for rec in records:
            while not self.writer.write(rec):
                self.returned += self.drain()
        while True:
            before = self.meta("read_pos")
            self.returned += self.drain()
            if self.meta("read_pos") == before:
                break

    def put_raw(self, offset: int, raw: bytes) -> None:
        """Write bytes into the data area, bypassing the writer."""
        base = codec.META_SIZE + offset
        self.shm[base:base + len(raw)] = raw

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self.ingest.stats()
        return stats

    def totals(self) -> dict[int, tuple[int, int, int, int]]:
        """stack id -> (alloc_bytes, free_bytes, alloc_count, free_count), no callsite being set"""
        rows = TOTALS_ROW.iter_unpack(self.ingest.tracker.totals())
        return {sid: (ab, fb, ac, fc) for _cs, sid, ab, fb, ac, fc, _ar, _fr in rows}

    def live(self) -> dict[int, tuple[int, int, int, int]]:
        """addr -> (sample_size, alloc_size, stack_id, seq)"""
        return {row[0]: row[1:] for row in LIVE_ROW.iter_unpack(self.ingest.tracker.live())}

    def stream(self) -> list[tuple[int, ...]]:
        return list(STREAM_ROW.iter_unpack(self.ingest.tracker.take_stream()))


def make_shm(size: int) -> tuple[int, mmap.mmap]:
    fd = os.memfd_create("heapscope-test-ring")
    os.ftruncate(fd, codec.META_SIZE + size)
    shm = mmap.mmap(fd, codec.META_SIZE + size)
    for name, value in (("magic", codec.WIRE_MAGIC), ("version", codec.WIRE_VERSION), ("ring_size", size)):
        off, fmt = codec.META_FIELDS[name]
        struct.pack_into(fmt, shm, off, value)
    return fd, shm


@pytest.fixture
def shm_factory() -> Iterator[Any]:
    """make(size) -> (fd, shm): a fresh memfd holding an initialised meta page."""
    made: list[tuple[int, mmap.mmap]] = []

    def make(size: int) -> tuple[int, mmap.mmap]:
        made.append(make_shm(size))
        return made[-1]

    yield make
    for fd, shm in made:
        shm.close()
        os.close(fd)


@pytest.fixture
def make_ring(ingest_mod: ModuleType) -> Iterator[Any]:
    rings: list[Ring] = []

    def make(size: int = 1 << 16, stream: bool = False) -> Ring:
        fd, shm = make_shm(size)
        ring = Ring(fd, size, shm, ws.RingWriter(shm), ingest_mod.Ingest(fd, size, stream=stream))
        rings.append(ring)
        return ring

    yield make
    for ring in rings:
        ring.close()
