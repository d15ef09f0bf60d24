"""Per-process heap state between dumps: stacks -> callsites, totals -> rows."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from heapscope.bookkeeping.frames import FrameTable, ProcessModules
from heapscope.bookkeeping.trie import CallsiteTrie
from heapscope.model import CallsiteId, CallsiteTotals, FrameId

TOTALS = struct.Struct("<5Q")  # stack_id, alloc_bytes, free_bytes, alloc_count, free_count

NO_FRAMES = "[no frames]"
UNDEFINED_STACK = "[stack never received]"


@dataclass(slots=True)
class ProcessHeap:
    """What a process's dumps need: its stacks, modules and last totals."""

    modules: ProcessModules = field(default_factory=ProcessModules)
    frame_cache: dict[int, FrameId] = field(default_factory=dict)
    stacks: dict[int, tuple[int, ...]] = field(default_factory=dict)  # defined, not yet resolved
    callsites: dict[int, CallsiteId] = field(default_factory=dict)  # stack id -> callsite
    previous: dict[CallsiteId, CallsiteTotals] = field(default_factory=dict)
    dumps: int = 0

    def define_stack(self, stack_id: int, pcs: tuple[int, ...]) -> None:
        if stack_id not in self.callsites:
            self.stacks[stack_id] = pcs

    def resolve(self, frames: FrameTable, trie: CallsiteTrie) -> None:
        """Turn stacks received since the last dump into callsites.

        Done at dump time rather than on arrival: by then every module the
        client announced before the dump is known, whatever the order of
        records in the ring.
        """
        for stack_id, pcs in self.stacks.items():
            path = frames.frames_of(self.modules, self.frame_cache, pcs)
            self.callsites[stack_id] = trie.callsite(path or [frames.special(NO_FRAMES)])
        self.stacks.clear()

    def totals_by_callsite(self, packed: bytes, frames: FrameTable, trie: CallsiteTrie,
                           final: bool) -> dict[CallsiteId, CallsiteTotals]:
        """Cumulative totals per callsite from the ingest's per-stack totals.

        A stack whose definition has not arrived yet waits for the next dump;
        at the final dump it is booked under a placeholder frame so that no
        byte is lost.
        """
        out: dict[CallsiteId, CallsiteTotals] = {}
        for stack_id, ab, fb, ac, fc in TOTALS.iter_unpack(packed):
            cs = self.callsites.get(stack_id)
            if cs is None:
                if not final:
                    continue
                cs = trie.callsite([frames.special(UNDEFINED_STACK)])
            t = out.get(cs)
            if t is None:
                out[cs] = CallsiteTotals(ab, fb, ac, fc)
            else:
                t.alloc_bytes += ab
                t.free_bytes += fb
                t.alloc_count += ac
                t.free_count += fc
        return out

    def delta_rows(self, totals: dict[CallsiteId, CallsiteTotals]) -> list[tuple[int, int, int]]:
        """Rows (callsite, count, size) for what changed since the previous dump."""
        rows: list[tuple[int, int, int]] = []
        prev = self.previous
        zero = CallsiteTotals()
        for cs, t in totals.items():
            p = prev.get(cs, zero)
            if t.alloc_count != p.alloc_count or t.alloc_bytes != p.alloc_bytes:
                rows.append((cs, t.alloc_count - p.alloc_count, t.alloc_bytes - p.alloc_bytes))
            if t.free_count != p.free_count or t.free_bytes != p.free_bytes:
                rows.append((cs, p.free_count - t.free_count, p.free_bytes - t.free_bytes))
        self.previous = totals
        self.dumps += 1
        return rows
