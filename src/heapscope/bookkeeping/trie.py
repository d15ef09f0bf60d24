"""The callsite trie: one node per distinct path of frames from the root.

Shared by every process of a recording, as heapprofd's GlobalCallstackTrie.
Ids start at 1 and are never reused, so a callsite id means the same path in
every dump of the profile.

The producer uses its twin in C, heapscope.producer._ingest.Trie (same
interface, same ids; producer/resolve_core.h), which the resolve in C adds to
without a Python object per frame. This one serves the Python path of
bookkeeping/dump.py, the reference the C one is tested against.
"""

from __future__ import annotations

import itertools

from heapscope.model import CallsiteId, FrameId


class CallsiteTrie:
    def __init__(self) -> None:
        self._children: dict[tuple[int, int], CallsiteId] = {}  # (parent id or 0, frame) -> id
        self.new: list[tuple[int, int, int | None, int]] = []  # (id, depth, parent, frame) to store

    def __len__(self) -> int:
        return len(self._children)

    def callsite(self, frames: list[FrameId]) -> CallsiteId:
        """The callsite for `frames`, root first; creates the missing nodes."""
        children = self._children
        find = children.get
        parent = 0
        for depth, frame in enumerate(frames):
            key = (parent, frame)
            node = find(key)
            if node is None:
                node = children[key] = CallsiteId(len(children) + 1)
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
        """take_new()'s rows in one flat list (as producer._ingest.Trie's)."""
        return [v for row in self.take_new() for v in row]
