"""The TSC clock's conversion (producer/tsc.py, ingest_core.h struct hs_tsc_cal)."""

from __future__ import annotations

import mmap
import os
import platform
from collections.abc import Iterator

import pytest

from heapscope.producer import _ingest
from heapscope.producer.tsc import tsc_clock
from heapscope.wire import codec

pytestmark = pytest.mark.timeout(60)
RING = 4096


@pytest.fixture
def ring_fd() -> Iterator[int]:
    fd = os.memfd_create("hs-tsc-test")
    os.ftruncate(fd, codec.META_SIZE + RING)
    with mmap.mmap(fd, codec.META_SIZE + RING) as shm:
        shm[16:24] = RING.to_bytes(8, "little")  # the meta's ring_size
    yield fd
    os.close(fd)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the TSC clock is x86-64's")
def test_tsc_stamps_convert_linearly_from_the_anchor(ring_fd: int) -> None:
    anchor = _ingest.tsc_start()
    ing = _ingest.Ingest(ring_fd, RING, tsc=True)
    # Stamps after the anchor, as a client's are (a fixed 10^12 fell before it once the machine
    # had run ~7 h: a time before the clock's start)
    base = anchor + 1000
    a, b = ing.ns_of(base), ing.ns_of(base + 3_000_000_000)
    # THEN 0 stays "not known", and 3e9 ticks are a positive span of at most a few seconds
    # (a TSC of 1 to 10 GHz) wherever the conversion's anchor lies
    assert ing.ns_of(0) == 0
    assert 0.3e9 <= b - a <= 3e9, (a, b)
    ing.close()


def test_without_tsc_stamps_pass_through(ring_fd: int) -> None:
    ing = _ingest.Ingest(ring_fd, RING)
    assert ing.ns_of(123_456_789) == 123_456_789
    ing.close()


def test_the_monotonic_clock_can_be_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    import heapscope.producer.tsc as tsc

    monkeypatch.setattr(tsc, "_chosen", None)
    monkeypatch.setenv("HEAPSCOPE_CLOCK", "monotonic")
    assert tsc_clock() is False
