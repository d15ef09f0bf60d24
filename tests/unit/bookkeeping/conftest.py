"""Fixtures for the heap tracker (bookkeeping/tracker.c), driven directly, without a ring.

The tracker reads no clock: every op carries the test's `now_ns`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from native_ext import load_native

from heapscope.bookkeeping.rows import DUMP_ROW, LIVE_ROW, PEAK_ROW, STREAM_ROW, THREAD_ROW, TOTALS_ROW


@pytest.fixture(scope="session")
def native_mod(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_native(tmp_path_factory.mktemp("native_build"))


@dataclass
class Heap:
    """A Tracker, a clock, and readers of its rows as dicts."""

    t: Any
    now_ns: int = 1_000_000_000

    def malloc(self, seq: int, addr: int, size: int, stack: int, ts: int = 0,
               alloc_size: int | None = None, tid: int = 0) -> None:
        self.t.malloc(seq, addr, size if alloc_size is None else alloc_size, size, stack, ts, self.now_ns, tid)

    def free(self, seq: int, addr: int) -> None:
        self.t.free(seq, addr, self.now_ns)

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self.t.stats()
        return stats

    def totals(self) -> dict[int, tuple[int, int, int, int]]:
        """stack id -> (alloc_bytes, free_bytes, alloc_count, free_count), stacks without callsite"""
        return {sid: (ab, fb, ac, fc) for cs, sid, ab, fb, ac, fc, _ar, _fr in TOTALS_ROW.iter_unpack(self.t.totals())
                if cs == 0}

    def callsite_totals(self) -> dict[int, tuple[int, int, int, int]]:
        """callsite id -> (alloc_bytes, free_bytes, alloc_count, free_count)"""
        return {cs: (ab, fb, ac, fc) for cs, _sid, ab, fb, ac, fc, _ar, _fr in TOTALS_ROW.iter_unpack(self.t.totals())
                if cs != 0}

    def live(self) -> dict[int, tuple[int, int, int, int]]:
        """addr -> (sample_size, alloc_size, stack_id, seq)"""
        return {row[0]: row[1:] for row in LIVE_ROW.iter_unpack(self.t.live())}

    def threads(self) -> dict[tuple[int, int], tuple[int, int, int, int, int]]:
        """(stack id, tid) -> (callsite id, alloc_bytes, free_bytes, alloc_count, free_count)"""
        out = {}
        for cs, sid, tid, ab, fb, ac, fc, _ar, _fr in THREAD_ROW.iter_unpack(self.t.threads()):
            assert (sid, tid) not in out  # one row per pair
            out[(sid, tid)] = (cs, ab, fb, ac, fc)
        return out

    def stream(self) -> list[tuple[int, ...]]:
        return list(STREAM_ROW.iter_unpack(self.t.take_stream()))

    def dump(self) -> list[tuple[int, int, int]]:
        """(callsite, count, size) per row; dump_real() has the real sizes too"""
        return [row[:3] for row in self.dump_real()]

    def dump_real(self) -> list[tuple[int, int, int, int]]:
        return list(DUMP_ROW.iter_unpack(self.t.dump()))

    def peak(self) -> dict[int, tuple[int, ...]]:
        """callsite id -> (count, size, alloc_count, alloc_size) at the peak"""
        return {cs: v[:4] for cs, v in self.peak_real().items()}

    def peak_real(self) -> dict[int, tuple[int, ...]]:
        """callsite id -> (count, size, alloc_count, alloc_size, real_size, alloc_real_size) at the peak"""
        return {row[0]: row[1:] for row in PEAK_ROW.iter_unpack(self.t.peak())}


@pytest.fixture
def make_heap(native_mod: ModuleType) -> Iterator[Any]:
    made: list[Heap] = []

    def make(stream: bool = False, dump_at_max: bool = False, threads: bool = False) -> Heap:
        made.append(Heap(native_mod.Tracker(stream=stream, dump_at_max=dump_at_max, threads=threads)))
        return made[-1]

    yield make
    for h in made:
        h.t.close()
