"""Frames and mappings: interning, and the per-process pc -> frame cache."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from heapscope.model import Frame, FrameId, Mapping, MappingId
from heapscope.wire.codec import ModuleRecord

FILTERED = "FILTERED"
UNKNOWN_MAPPING = Mapping(build_id="", exact_offset=0, start_offset=0, start=0, end=0, load_bias=0,
                          name="[unknown]")


T = TypeVar("T")


class Interner(Generic[T]):
    """Hands out dense ids from 1 for distinct values, and remembers new ones."""

    def __init__(self) -> None:
        self.ids: dict[T, int] = {}
        self.new: list[tuple[int, T]] = []

    def intern(self, value: T) -> int:
        i = self.ids.get(value)
        if i is None:
            i = len(self.ids) + 1
            self.ids[value] = i
            self.new.append((i, value))
        return i

    def take_new(self) -> list[tuple[int, T]]:
        new, self.new = self.new, []
        return new


def mapping_of(m: ModuleRecord) -> Mapping:
    return Mapping(
        build_id=m.build_id.hex(),
        exact_offset=m.file_offset,
        start_offset=0,
        start=m.start,
        end=m.end,
        load_bias=m.vaddr - m.file_offset,
        name=m.path,
    )


@dataclass(slots=True)
class ProcessModules:
    """The loaded objects of one process, searchable by address."""

    starts: list[int] = field(default_factory=list)
    modules: list[ModuleRecord] = field(default_factory=list)
    mapping_ids: list[int] = field(default_factory=list)

    def add(self, m: ModuleRecord, mapping_id: int) -> None:
        i = bisect.bisect_left(self.starts, m.start)
        if i < len(self.starts) and self.starts[i] == m.start:
            self.modules[i], self.mapping_ids[i] = m, mapping_id  # re-sent after a dlclose/dlopen
            return
        self.starts.insert(i, m.start)
        self.modules.insert(i, m)
        self.mapping_ids.insert(i, mapping_id)

    def find(self, addr: int) -> int | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.modules[i].end:
            return i
        return None


class FrameTable:
    """Interns mappings and frames for all processes of a recording."""

    def __init__(self, skip_prefixes: tuple[str, ...] = ()) -> None:
        self.mappings: Interner[Mapping] = Interner()
        self.frames: Interner[Frame] = Interner()
        self.skip_prefixes = skip_prefixes
        self.filtered: set[int] = set()  # ids of FILTERED frames

    def add_module(self, mods: ProcessModules, m: ModuleRecord) -> None:
        mods.add(m, self.mappings.intern(mapping_of(m)))

    def frames_of(self, mods: ProcessModules, cache: dict[int, FrameId], pcs: tuple[int, ...]) -> list[FrameId]:
        """Frames for return addresses `pcs` (leaf first), root first, filtered runs collapsed."""
        out: list[FrameId] = []
        for pc in reversed(pcs):
            fid = cache.get(pc)
            if fid is None:
                fid = FrameId(self._intern_pc(mods, pc))
                cache[pc] = fid
            if out and fid == out[-1] and fid in self.filtered:
                continue
            out.append(fid)
        return out

    def special(self, name: str) -> FrameId:
        """A frame that stands for no code: an empty stack, a stack never defined."""
        mid = MappingId(self.mappings.intern(UNKNOWN_MAPPING))
        return FrameId(self.frames.intern(Frame(mid, 0, name)))

    def _intern_pc(self, mods: ProcessModules, pc: int) -> int:
        # Return addresses point after the call; pc - 1 is inside it, which is
        # what symbolizers want and what keeps a call at a function's end in it.
        addr = pc - 1
        i = mods.find(addr)
        if i is None:
            mid = MappingId(self.mappings.intern(UNKNOWN_MAPPING))
            return self.frames.intern(Frame(mid, addr))
        m = mods.modules[i]
        mid = MappingId(mods.mapping_ids[i])
        if self.skip_prefixes and m.path.startswith(self.skip_prefixes):
            fid = self.frames.intern(Frame(mid, 0, FILTERED))
            self.filtered.add(fid)
            return fid
        return self.frames.intern(Frame(mid, addr - m.base))
