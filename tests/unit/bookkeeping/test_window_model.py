"""Peak windows against a model: every window figure exact after every op.

A window's start is kept lazily (tracker.h, "Windows the same way": a bucket's
state is saved at its first change in the window, none is copied when the
window starts), and sampled_bytes is a running total. Random ops on two
trackers sharing a peak (malloc's and Python's heaps of one process), with
stacks given callsites at random moments (their totals fold into the
callsite's, inside windows too), implicit frees (a malloc at a live address)
and frees of addresses never allocated, are checked against a plain Python
model that copies every total at each window start and at each new peak.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from heapscope.bookkeeping.rows import WINDOW_ROW

pytestmark = pytest.mark.timeout(120)

STACKS = [0x100 + i for i in range(12)]
ADDRS = [0x7F00_0000_0000 + 0x40 * i for i in range(24)]


class Model:
    """The heaps of one process: totals per stack, callsites, one joint peak and window."""

    def __init__(self, n: int) -> None:
        self.totals: list[dict[int, list[int]]] = [{} for _ in range(n)]  # stack -> [ab, fb, ac, fc]
        self.live: list[dict[int, tuple[int, int]]] = [{} for _ in range(n)]  # addr -> (size, stack)
        self.callsite: list[dict[int, int]] = [{} for _ in range(n)]
        self.alloc_bytes = [0] * n
        self.cur = 0
        self.max = 0
        self.base = 0
        self.start: list[dict[int, list[int]]] = [{} for _ in range(n)]
        self.at_peak: list[dict[int, list[int]]] = [{} for _ in range(n)]

    def _copy(self) -> list[dict[int, list[int]]]:
        return [{k: list(v) for k, v in t.items()} for t in self.totals]

    def malloc(self, h: int, addr: int, size: int, stack: int) -> None:
        if addr in self.live[h]:
            self.free(h, addr)
        self.live[h][addr] = (size, stack)
        t = self.totals[h].setdefault(stack, [0, 0, 0, 0])
        t[0] += size
        t[2] += 1
        self.alloc_bytes[h] += size
        self.cur += size
        if self.cur > self.max:
            self.max = self.cur
            self.at_peak = self._copy()

    def free(self, h: int, addr: int) -> None:
        e = self.live[h].pop(addr, None)
        if e is None:
            return
        t = self.totals[h][e[1]]
        t[1] += e[0]
        t[3] += 1
        self.cur -= e[0]

    def new_window(self) -> None:
        self.base = self.max = self.cur
        self.start = self._copy()
        self.at_peak = self._copy()

    def rows(self, h: int) -> dict[tuple[int, int], tuple[int, ...]]:
        """(callsite, stack or 0) -> WINDOW_ROW's figures, the buckets changed in the window"""
        out: dict[tuple[int, int], list[int]] = {}
        changed: set[tuple[int, int]] = set()
        for stack, c in self.totals[h].items():
            cs = self.callsite[h].get(stack, 0)
            key = (cs, 0 if cs else stack)
            s = self.start[h].get(stack, [0, 0, 0, 0])
            p = self.at_peak[h].get(stack, [0, 0, 0, 0])
            held, held_n = s[0] - s[1], s[2] - s[3]
            fig = [p[0] - p[1] - held, p[2] - p[3] - held_n, c[0] - c[1] - held, c[2] - c[3] - held_n, c[0] - s[0]]
            have = out.setdefault(key, [0] * 5)
            for i, x in enumerate(fig):
                have[i] += x
            if c[2] != s[2] or c[3] != s[3]:
                changed.add(key)
        return {k: tuple(v) for k, v in out.items() if k in changed}


def tracker_rows(t: Any) -> dict[tuple[int, int], tuple[int, ...]]:
    return {(r[0], r[1]): tuple(r[2:]) for r in WINDOW_ROW.iter_unpack(t.window())}


@pytest.mark.parametrize("seed", range(12))
def test_windows_match_a_model_that_copies_everything(make_heap: Any, seed: int) -> None:
    rng = random.Random(seed)
    heaps = [make_heap(), make_heap()]
    heaps[1].t.share_peak(heaps[0].t)
    model = Model(2)
    seqs = [0, 0]
    next_callsite = 1
    for step in range(1500):
        h = rng.randrange(2)
        r = rng.random()
        if r < 0.5:
            seqs[h] += 1
            addr, stack, size = rng.choice(ADDRS), rng.choice(STACKS), rng.choice((16, 64, 100, 4096, 10_000))
            heaps[h].malloc(seqs[h], addr, size, stack, ts=step)
            model.malloc(h, addr, size, stack)
        elif r < 0.85:
            seqs[h] += 1
            addr = rng.choice(ADDRS) if rng.random() < 0.95 else 0x10
            heaps[h].free(seqs[h], addr)
            model.free(h, addr)
        elif r < 0.93:
            # A stack gets a callsite (its first only); several stacks may share one.
            stack = rng.choice(STACKS)
            cs = rng.randrange(1, next_callsite + 1)
            next_callsite = max(next_callsite, cs + 1)
            heaps[h].t.set_callsite(stack, cs)
            model.callsite[h].setdefault(stack, cs)
        else:
            heaps[rng.randrange(2)].t.new_window()
            model.new_window()
        for i, heap in enumerate(heaps):
            st = heap.stats()
            assert (st["window_base"], st["window_peak"], st["joint_unfreed"]) == (model.base, model.max, model.cur)
            assert st["sampled_bytes"] == model.alloc_bytes[i]
            assert tracker_rows(heap.t) == model.rows(i), f"seed {seed}, step {step}, heap {i}"
