"""Allocation labels in a profile (docs/labels.md): `--label K=V` on every reader, and the
rows per label value behind `report --by-label K`.

--label shadows the two allocation tables with their labelled rows for that one label
(heapscope_label_allocation, heapscope_label_peak_allocation), as temporary views named
heapscope_labelled_<table>; store/select.py's heap views read those when they exist
(select_heap, called after select_label), so every view and export sees the label's
samples only, without knowing of labels.
"""

from __future__ import annotations

import re
import sqlite3

from heapscope.errors import UsageError
from heapscope.store.reader import Profile

#: The tables --label shadows, and the columns each view gives.
_SHADOWED = {
    "heap_profile_allocation": ("heapscope_label_allocation",
                                "a.rowid AS id, a.ts, a.upid, a.heap_name, a.callsite_id, a.count, a.size,"
                                " a.real_size"),
    "heapscope_peak_allocation": ("heapscope_label_peak_allocation",
                                  "a.ts, a.upid, a.heap_name, a.callsite_id, a.count, a.size, a.alloc_count,"
                                  " a.alloc_size, a.real_size, a.alloc_real_size"),
}
LABEL_HELP = ("only the allocations made under label K=V (heapscope.label, heapscope_label_push;"
              " docs/labels.md)")
_SPEC = re.compile(r"([A-Za-z0-9_.-]{1,63})=(.*)", re.DOTALL)


def has_labels(profile: Profile) -> bool:
    db = profile.sql_connection()
    row = db.execute("SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'heapscope_label'").fetchone()
    return row is not None


def parse_label(spec: str) -> tuple[str, str]:
    """K=V -> (K, V); UsageError (one line, exit 2) for anything else."""
    m = _SPEC.fullmatch(spec)
    if not m:
        raise UsageError(f"--label {spec!r}: expected KEY=VALUE, KEY of [A-Za-z0-9_.-]")
    return m.group(1), m.group(2)


def select_label(profile: Profile, spec: str | None) -> None:
    """Make the reads that follow see only the samples labelled K=V (spec "K=V"; None: all).
    Call before select_heap, which builds its heap views over these."""
    db = profile.sql_connection()
    with profile.reading():
        for table in _SHADOWED:
            db.execute(f"DROP VIEW IF EXISTS temp.heapscope_labelled_{table}")
        profile.forget_values()
        if spec is None:
            return
        key, value = parse_label(spec)
        if not has_labels(profile):
            raise UsageError(f"{profile.path}: no allocation labels in this profile (written before labels,"
                             " or the program set none)")
        # Views take no parameters: the key and value go in as hex literals, which any text survives.
        k, v = _literal(key), _literal(value)
        for table, (source, cols) in _SHADOWED.items():
            db.execute(f"CREATE TEMP VIEW heapscope_labelled_{table} AS SELECT {cols} FROM main.{source} a"
                       " WHERE EXISTS (SELECT 1 FROM main.heapscope_label l WHERE l.upid = a.upid"
                       f" AND l.label_set_id = a.label_set_id AND l.key = {k} AND l.value = {v})")


def labelled_source(db: sqlite3.Connection, table: str) -> str:
    """Where a heap view of `table` reads from: the --label view when there is one."""
    name = f"heapscope_labelled_{table}"
    row = db.execute("SELECT 1 FROM temp.sqlite_master WHERE type = 'view' AND name = ?", (name,)).fetchone()
    return f"temp.{name}" if row is not None else f"main.{table}"


def _literal(text: str) -> str:
    return f"CAST(X'{text.encode('utf-8', 'surrogateescape').hex()}' AS TEXT)"


def label_values(profile: Profile, key: str, heaps: list[str] | None) -> list[tuple[str, int, int, int, int]]:
    """(value, callsite_id, allocated bytes, unreleased bytes at the last dump, unreleased
    objects) of each callsite under each value of label `key`, in the heaps shown (None: all)."""
    db = profile.sql_connection()
    among = "" if heaps is None else " AND a.heap_name IN (" + ", ".join(_literal(h) for h in heaps) + ")"
    rows = db.execute(
        "SELECT l.value, a.callsite_id, SUM(CASE WHEN a.size > 0 THEN a.size ELSE 0 END), SUM(a.size), SUM(a.count)"
        " FROM main.heapscope_label_allocation a JOIN main.heapscope_label l ON l.upid = a.upid"
        f" AND l.label_set_id = a.label_set_id AND l.key = ?{among} GROUP BY l.value, a.callsite_id", (key,))
    return [(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]


def callsite_names(profile: Profile, callsite_id: int, most: int = 4) -> list[str]:
    """The names of a callsite's innermost frames, innermost first ('?' for a frame not named)."""
    db = profile.sql_connection()
    out: list[str] = []
    cid: int | None = callsite_id
    while cid is not None and len(out) < most:
        r = db.execute("SELECT c.parent_id, f.name FROM main.stack_profile_callsite c"
                       " JOIN main.stack_profile_frame f ON f.id = c.frame_id WHERE c.id = ?", (cid,)).fetchone()
        if r is None:
            break
        out.append(str(r[1]) if r[1] else "?")
        cid = None if r[0] is None else int(r[0])
    return out
