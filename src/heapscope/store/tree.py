"""The callsite tree as read: checked for parent cycles and absurd depth before anyone walks it."""

from __future__ import annotations

from heapscope.model import CallsiteId, FrameId
from heapscope.store._callsites import fold as fold_tree
from heapscope.store._callsites import plain_rows, read_table
from heapscope.store.values import BadValue

__all__ = ["MAX_CALLSITE_DEPTH", "check_tree", "fold_tree", "plain_callsites", "read_callsites"]

# No real call stack is deeper: the client unwinds at most wire.codec.MAX_FRAMES
# frames; a deeper chain is damage (and would make every path walk quadratic).
MAX_CALLSITE_DEPTH = 1 << 16


def plain_callsites(rows: list[tuple[object, ...]]) -> dict[CallsiteId, tuple[CallsiteId | None, FrameId]] | None:
    """callsites() of rows (by id) as `record` writes them, taken as read: integers, each
    parent's id below its child's, so no parent cycle can exist and a parent's depth is known
    before its children's (one pass in C, _callsites.c: a compiler build has ~450k callsites);
    an over-deep chain goes to check_tree for its message. None when a row is not so: the
    checked conversions read it."""
    return _deep_checked(plain_rows(rows))


def read_callsites(uri: str) -> dict[CallsiteId, tuple[CallsiteId | None, FrameId]] | None:
    """plain_callsites() of the profile's stack_profile_callsite, read from the file at `uri` (the
    reader's read-only URI) by SQLite's C interface in _callsites.c, without a row tuple each;
    None when a row is not as `record` writes them or SQLite fails: the reader's query then
    reads the table and says what is wrong."""
    return _deep_checked(read_table(uri))


def _deep_checked(got: tuple[dict[CallsiteId, tuple[CallsiteId | None, FrameId]], int] | None
                  ) -> dict[CallsiteId, tuple[CallsiteId | None, FrameId]] | None:
    """The callsites of a C read, their deepest chain past the limit given to check_tree for its message."""
    if got is None:
        return None
    callsites, deepest = got
    if deepest >= MAX_CALLSITE_DEPTH:
        check_tree(callsites)
    return callsites


def check_tree(callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]]) -> None:
    """Refuse parent cycles and absurdly deep chains; one pass, each callsite walked once."""
    depth: dict[CallsiteId, int] = {}
    for start in callsites:
        if start in depth:
            continue
        chain: list[CallsiteId] = []
        on_chain: set[CallsiteId] = set()
        node: CallsiteId | None = start
        base = -1
        while node is not None:
            known = depth.get(node)
            if known is not None:
                base = known
                break
            if node in on_chain:
                raise BadValue(f"stack_profile_callsite has a parent cycle through callsite {node}")
            entry = callsites.get(node)
            if entry is None:  # a dangling parent: its child is a root
                break
            chain.append(node)
            on_chain.add(node)
            node = entry[0]
        for i, cs in enumerate(reversed(chain)):
            depth[cs] = base + 1 + i
        if chain and depth[chain[0]] >= MAX_CALLSITE_DEPTH:
            raise BadValue(f"stack_profile_callsite {chain[0]} is {depth[chain[0]] + 1} frames deep"
                           f" (at most {MAX_CALLSITE_DEPTH})")
