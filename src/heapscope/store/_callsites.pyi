"""The callsite table's rows checked in C (_callsites.c)."""

from heapscope.model import CallsiteId, FrameId

def plain_rows(
    rows: list[tuple[object, ...]],
) -> tuple[dict[CallsiteId, tuple[CallsiteId | None, FrameId]], int] | None:
    """{id: (parent, frame)} of rows (id, parent, frame) by id as `record` writes them, and the
    deepest chain's depth (-1: no rows); None when some row is not so."""

def read_table(uri: str) -> tuple[dict[CallsiteId, tuple[CallsiteId | None, FrameId]], int] | None:
    """plain_rows() of the profile's stack_profile_callsite, read from the file at `uri` (a
    read-only SQLite URI) in C; None when a row is not plain or SQLite fails."""

def fold(
    callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]], wrappers: set[FrameId],
) -> tuple[dict[CallsiteId, tuple[CallsiteId | None, FrameId]], list[int], set[FrameId]] | None:
    """The callsites the fold of `wrappers` (frame ids) into their callers moves, {id: (parent,
    frame)} by id, their depths in the same order, and the frame ids folded away; None when
    `callsites` is not in id order with each parent's id below its child's."""
