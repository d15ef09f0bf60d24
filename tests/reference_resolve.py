"""The Python reference of the resolve (stacks -> callsites), used only to check the C one.

The producer resolves in C (bookkeeping/resolver.h, trie.h). This is the same
work written plainly in Python, from FrameTable's frames_of and
frames_of_python: a test gives both the same STACK records, modules and code
objects, and asks for the same frames, in the same order, with the same
callsite ids (tests/unit/producer/test_resolve.py, tests/unit/bookkeeping).
"""

from __future__ import annotations

import itertools
from typing import Protocol

from heapscope.bookkeeping.dump import NO_FRAMES
from heapscope.bookkeeping.frames import FrameTable, ProcessModules, PySplice
from heapscope.model import CallsiteId, FrameId


class CallsiteTrie:
    """One node per distinct path of frames from the root; ids from 1, never reused (trie.h)."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, int], CallsiteId] = {}  # (parent id or 0, frame) -> id
        self.new: list[tuple[int, int, int | None, int]] = []  # (id, depth, parent, frame) to store

    def __len__(self) -> int:
        return len(self._children)

    def callsite(self, frames: list[FrameId]) -> CallsiteId:
        """The callsite for `frames`, root first; creates the missing nodes."""
        parent = 0
        for depth, frame in enumerate(frames):
            key = (parent, frame)
            node = self._children.get(key)
            if node is None:
                node = self._children[key] = CallsiteId(len(self._children) + 1)
                self.new.append((node, depth, parent or None, frame))
            parent = node
        if not parent:
            raise ValueError("a callsite needs at least one frame")
        return CallsiteId(parent)

    def paths_from(self, first: int) -> list[tuple[int, int]]:
        """(parent id or 0, frame) of the callsites with ids from `first` on, in id order."""
        return list(itertools.islice(self._children, max(first - 1, 0), None))

    def take_new(self) -> list[tuple[int, int, int | None, int]]:
        new, self.new = self.new, []
        return new

    def take_new_flat(self) -> list[int | None]:
        return [v for row in self.take_new() for v in row]


class Tracker(Protocol):
    def set_callsite(self, stack_id: int, callsite_id: int, /) -> None: ...


class ReferenceHeap:
    """One process's stacks, resolved in Python as the C resolver does: native stacks
    first, then those with Python frames, each in the order of its first definition."""

    def __init__(self) -> None:
        self.modules = ProcessModules()
        self.frame_cache: dict[int, FrameId] = {}
        self.python = PySplice()
        self.stacks: dict[int, tuple[int, ...]] = {}
        self.py_stacks: dict[int, tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]] = {}
        self.callsites: dict[int, CallsiteId] = {}

    def define_stack(self, stack_id: int, pcs: tuple[int, ...],
                     py: tuple[tuple[int, int, int], ...] | None = None) -> None:
        if stack_id in self.callsites:
            return
        if py is None:
            self.stacks[stack_id] = pcs
        else:
            self.py_stacks[stack_id] = (pcs, py)

    def callsite(self, stack_id: int) -> int | None:
        return self.callsites.get(stack_id)

    def resolve(self, frames: FrameTable, trie: CallsiteTrie, tracker: Tracker, final: bool = False) -> None:
        """As ProcessHeap.resolve: every native stack, then the Python ones whose code objects
        all came; at the final dump, the Python ones left too."""
        for stack_id, pcs in self.stacks.items():
            path = frames.frames_of(self.modules, self.frame_cache, pcs)
            self._set(stack_id, trie.callsite(path or [frames.special(NO_FRAMES)]), tracker)
        self.stacks.clear()
        self._resolve_python(frames, trie, tracker, wait=True)
        if final:
            self._resolve_python(frames, trie, tracker, wait=False)

    def _resolve_python(self, frames: FrameTable, trie: CallsiteTrie, tracker: Tracker, wait: bool) -> None:
        done: list[int] = []
        for stack_id, (pcs, py) in self.py_stacks.items():
            path = frames.frames_of_python(self.modules, self.frame_cache, pcs, py, self.python, wait=wait)
            if path is None:
                continue
            self._set(stack_id, trie.callsite(path or [frames.special(NO_FRAMES)]), tracker)
            done.append(stack_id)
        for stack_id in done:
            del self.py_stacks[stack_id]

    def _set(self, stack_id: int, cs: CallsiteId, tracker: Tracker) -> None:
        self.callsites[stack_id] = cs
        tracker.set_callsite(stack_id, cs)
