"""The Python reference of the resolve (stacks -> callsites), used only to check the C one.

The producer resolves in C (bookkeeping/resolver.h, trie.h). This is the same
work written plainly in Python (frames_of, frames_of_python, CallsiteTrie),
naming frames through the same FrameTable: a test gives both the same STACK records, modules and code
objects, and asks for the same frames, in the same order, with the same
callsite ids (tests/unit/producer/test_resolve.py, tests/unit/bookkeeping).
"""

from __future__ import annotations

import itertools
from typing import Protocol

from heapscope.bookkeeping.dump import NO_FRAMES
from heapscope.bookkeeping.frames import FrameTable, ProcessModules, PySplice
from heapscope.model import CallsiteId, FrameId
from heapscope.wire.codec import PY_FRAME_ENTRY


def frames_of(table: FrameTable, mods: ProcessModules, cache: dict[int, FrameId],
              pcs: tuple[int, ...]) -> list[FrameId]:
    """Frames for return addresses `pcs` (leaf first), root first, filtered runs collapsed."""
    out: list[FrameId] = []
    for pc in reversed(pcs):
        fid = cache.get(pc)
        if fid is None:
            fid = FrameId(table._intern_pc(mods, pc))
            cache[pc] = fid
        if out and fid == out[-1] and fid in table.filtered:
            continue
        out.append(fid)
    return out


def frames_of_python(table: FrameTable, mods: ProcessModules, cache: dict[int, FrameId], pcs: tuple[int, ...],
                     py: tuple[tuple[int, int, int], ...], splice: PySplice,
                     wait: bool = False) -> list[FrameId] | None:
    """Frames of a stack with Python frames, root first: each Python frame goes where
    its _PyEval_EvalFrameDefault activation is in the native stack.

    pcs leaf first, py innermost first. An activation (a pc inside the eval
    function) takes the Python frames up to the next one flagged ENTRY; the
    eval frame itself, and the interpreter's own frames between and above
    activations (call plumbing), are left out. Native frames of other
    objects (C extensions, the program) stay where they are. Python frames
    left over (the native unwind did not see their activation) go to the
    root end and are counted in splice.unplaced. With `wait`, a stack
    naming a code object not received yet is left alone: None.
    """
    leaf_first: list[FrameId] = []
    add = leaf_first.append
    known = splice.frame_ids  # (code, offset) -> frame: a runner's stacks share most of theirs
    lo, hi = splice.eval_lo, splice.eval_hi
    interp = mods.find(lo) if lo else None
    # The interpreter's own object: [istart, iend) (modules do not overlap).
    istart, iend = (mods.modules[interp].start, mods.modules[interp].end) if interp is not None else (0, 0)
    i, n, seen = 0, len(py), False
    for pc in pcs:
        if lo < pc <= hi:
            seen = True
            while i < n:
                key, lasti, flags = py[i]
                i += 1
                fid = known.get((key, lasti))
                if fid is None:
                    if wait and key and key not in splice.codes:
                        return None
                    fid = table._python_frame(splice, key, lasti)
                add(fid)
                if flags & PY_FRAME_ENTRY:
                    break
            continue
        if seen and istart <= pc - 1 < iend:
            continue
        fid = cache.get(pc)
        if fid is None:
            fid = cache[pc] = FrameId(table._intern_pc(mods, pc))
        add(fid)
    if i < n:
        if wait and any(key and key not in splice.codes for key, _, _ in py[i:]):
            return None
        splice.unplaced += n - i
        leaf_first.extend(table._python_frame(splice, key, lasti) for key, lasti, _ in py[i:])
    leaf_first.reverse()
    filtered = table.filtered
    if not filtered:
        return leaf_first
    out: list[FrameId] = []
    for fid in leaf_first:
        if out and fid == out[-1] and fid in filtered:
            continue
        out.append(fid)
    return out


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
            path = frames_of(frames, self.modules, self.frame_cache, pcs)
            self._set(stack_id, trie.callsite(path or [frames.special(NO_FRAMES)]), tracker)
        self.stacks.clear()
        self._resolve_python(frames, trie, tracker, wait=True)
        if final:
            self._resolve_python(frames, trie, tracker, wait=False)

    def _resolve_python(self, frames: FrameTable, trie: CallsiteTrie, tracker: Tracker, wait: bool) -> None:
        done: list[int] = []
        for stack_id, (pcs, py) in self.py_stacks.items():
            path = frames_of_python(frames, self.modules, self.frame_cache, pcs, py, self.python, wait=wait)
            if path is None:
                continue
            self._set(stack_id, trie.callsite(path or [frames.special(NO_FRAMES)]), tracker)
            done.append(stack_id)
        for stack_id in done:
            del self.py_stacks[stack_id]

    def _set(self, stack_id: int, cs: CallsiteId, tracker: Tracker) -> None:
        self.callsites[stack_id] = cs
        tracker.set_callsite(stack_id, cs)
