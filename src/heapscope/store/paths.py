"""A few call paths read without the callsite table: `record`'s summary names each process's
largest stacks at its peak, a few dozen of a build's ~450k callsites, right after the target's
exit, where loading the whole table (~0.2 s) would be paid by every recording."""

from __future__ import annotations

from collections.abc import Sequence

from heapscope.model import CallsiteId, MappingId
from heapscope.store.rows import FrameInfo, PathFrame
from heapscope.store.values import MAX_IN_LIST, opt_int_from_sql, req_int_from_sql, req_u64_from_sql, str_from_sql

TYPE_CHECKING = False  # typing.TYPE_CHECKING: the end of every recording imports this module
if TYPE_CHECKING:
    from heapscope.store.reader import Profile


def stack_paths(profile: Profile, leaves: Sequence[CallsiteId], limit: int) -> dict[CallsiteId, list[PathFrame]]:
    """The frames of each callsite in `leaves`, innermost first, at most `limit` of each, in one
    query. A Python frame is marked: the producer writes its file as its mapping's name and its
    line as its rel_pc (bookkeeping/frames.py), the same as its symbol row."""
    out: dict[CallsiteId, list[PathFrame]] = {CallsiteId(int(cs)): [] for cs in leaves}
    if not out or limit < 1:
        return out
    # Each callsite once (UNION, not UNION ALL: the stacks share their roots, and a parent cycle
    # ends the walk), then the paths put together here. At most MAX_IN_LIST leaves a query
    # (SQLite's limit on parameters can be 999).
    leaves_in = list(out)
    rows: list[tuple[object, ...]] = []
    db = profile.sql_connection()
    with profile.reading():
        profile.callsites_in_sql()  # a view's fold (view/wrappers.py) shown here too
        for at in range(0, len(leaves_in), MAX_IN_LIST):
            chunk = leaves_in[at:at + MAX_IN_LIST]
            rows += db.execute(
                "WITH RECURSIVE walk(id) AS ("
                f" SELECT id FROM stack_profile_callsite WHERE id IN ({', '.join('?' * len(chunk))})"
                " UNION SELECT c.parent_id FROM walk w JOIN stack_profile_callsite c ON c.id = w.id"
                " WHERE c.parent_id IS NOT NULL)"
                " SELECT c.id, c.parent_id, f.id, f.name, m.name, f.rel_pc, f.mapping, f.type FROM walk w"
                " JOIN stack_profile_callsite c ON c.id = w.id"
                " LEFT JOIN stack_profile_frame f ON f.id = c.frame_id"
                " LEFT JOIN stack_profile_mapping m ON m.id = f.mapping", tuple(chunk)).fetchall()
        nodes: dict[int, tuple[int | None, PathFrame]] = {}
        for r in rows:
            nodes[req_int_from_sql(r[0], "stack_profile_callsite.id")] = (
                opt_int_from_sql(r[1], "stack_profile_callsite.parent_id"),
                PathFrame(None, False) if r[2] is None else PathFrame(FrameInfo(
                    str_from_sql(r[3]), str_from_sql(r[4]), req_u64_from_sql(r[5], "stack_profile_frame.rel_pc"),
                    MappingId(req_int_from_sql(r[6], "stack_profile_frame.mapping"))), r[7] == "python"))
    for leaf, path in out.items():
        node: int | None = int(leaf)
        while node is not None and len(path) < limit:
            entry = nodes.get(node)
            if entry is None:
                break
            node = entry[0]
            path.append(entry[1])
    return out
