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
from heapscope.store.reader import Profile, ViewValues
from heapscope.store.values import int_from_sql, opt_int_from_sql, str_from_sql

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
        db.execute("DROP TABLE IF EXISTS temp.heapscope_label_selected")
        profile.forget_values()
        if spec is None:
            return
        key, value = parse_label(spec)
        if not has_labels(profile):
            raise UsageError(f"{profile.path}: no allocation labels in this profile (written before labels,"
                             " or the program set none)")
        # The label sets that have K=V, each process's: the views below and label_split read them.
        db.execute("CREATE TEMP TABLE heapscope_label_selected AS SELECT DISTINCT upid, label_set_id"
                   " FROM main.heapscope_label WHERE key = ? AND value = ?", (key, value))
        if db.execute("SELECT 1 FROM temp.heapscope_label_selected LIMIT 1").fetchone() is None:
            # As --heap for a heap the profile lacks: say what there is.
            values = [str(r[0]) for r in db.execute(
                "SELECT DISTINCT value FROM main.heapscope_label WHERE key = ? ORDER BY value LIMIT 21", (key,))]
            there = (f"values of {key}: {', '.join(values[:20])}{', ...' if len(values) > 20 else ''}" if values
                     else f"no label {key!r}")
            raise UsageError(f"{profile.path}: no allocation labelled {key}={value} ({there})")
        for table, (source, cols) in _SHADOWED.items():
            db.execute(f"CREATE TEMP VIEW heapscope_labelled_{table} AS SELECT {cols} FROM main.{source} a"
                       " JOIN temp.heapscope_label_selected s ON s.upid = a.upid AND s.label_set_id = a.label_set_id")


def labelled_source(db: sqlite3.Connection, table: str) -> str:
    """Where a heap view of `table` reads from: the --label view when there is one."""
    name = f"heapscope_labelled_{table}"
    row = db.execute("SELECT 1 FROM temp.sqlite_master WHERE type = 'view' AND name = ?", (name,)).fetchone()
    return f"temp.{name}" if row is not None else f"main.{table}"


def _selected(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'heapscope_label_selected'").fetchone()
    return row is not None


def label_pairs(profile: Profile, upid: int) -> dict[int, tuple[tuple[str, str], ...]]:
    """A process's label sets: id -> (key, value) pairs sorted by key; {} without labels."""
    if not has_labels(profile):
        return {}
    out: dict[int, list[tuple[str, str]]] = {}
    with profile.reading():  # damage (a wrong type, a malformed page): one line, as every reader's
        for r in profile.sql_connection().execute(
                "SELECT label_set_id, key, value FROM main.heapscope_label WHERE upid = ?", (upid,)):
            out.setdefault(int_from_sql(r[0]), []).append((str_from_sql(r[1]), str_from_sql(r[2])))
    return {i: tuple(sorted(pairs)) for i, pairs in out.items()}


def label_split(profile: Profile, upid: int, kind: str, ts: int) -> dict[int, list[tuple[int, ViewValues]]]:
    """The labelled part of each callsite's values at one state of a process (kind peak: its
    peak; else the dump at ts), per label set: callsite -> [(label_set_id, values)]. Only the
    heaps the heap views show, and under --label only the sets it selected."""
    if not has_labels(profile):
        return {}
    with profile.reading():  # damage: one line, as every reader's
        db = profile.sql_connection()
        # heap_profile is shadowed by the heap selection (store/select.py): its heap names are the ones shown.
        heaps = [str_from_sql(r[0])
                 for r in db.execute("SELECT DISTINCT heap_name FROM heap_profile WHERE upid = ?", (upid,))]
        among = "(" + ", ".join(_literal(h) for h in heaps) + ")"
        only = (" AND a.label_set_id IN (SELECT label_set_id FROM temp.heapscope_label_selected"
                " WHERE upid = a.upid)" if _selected(db) else "")
        if kind == "peak":
            rows = db.execute(
                "SELECT a.callsite_id, a.label_set_id, SUM(a.size), SUM(a.count), SUM(a.alloc_size),"
                " SUM(a.alloc_count), SUM(a.real_size), SUM(a.alloc_real_size)"
                " FROM main.heapscope_label_peak_allocation a"
                f" WHERE a.upid = ? AND a.heap_name IN {among}{only} GROUP BY a.callsite_id, a.label_set_id", (upid,))
        else:
            rows = db.execute(
                "SELECT a.callsite_id, a.label_set_id, SUM(a.size), SUM(a.count),"
                " SUM(CASE WHEN a.size > 0 THEN a.size ELSE 0 END),"
                " SUM(CASE WHEN a.count > 0 THEN a.count ELSE 0 END),"
                " SUM(a.real_size), SUM(CASE WHEN a.size > 0 THEN a.real_size ELSE 0 END)"
                " FROM main.heapscope_label_allocation a"
                f" WHERE a.upid = ? AND a.ts <= ? AND a.heap_name IN {among}{only}"
                " GROUP BY a.callsite_id, a.label_set_id", (upid, ts))
        out: dict[int, list[tuple[int, ViewValues]]] = {}
        for r in rows:
            v = ViewValues(int_from_sql(r[2]), int_from_sql(r[3]), int_from_sql(r[4]), int_from_sql(r[5]),
                           opt_int_from_sql(r[6]), opt_int_from_sql(r[7]))
            out.setdefault(int_from_sql(r[0]), []).append((int_from_sql(r[1]), v))
        return out


def _literal(text: str) -> str:
    return f"CAST(X'{text.encode('utf-8', 'surrogateescape').hex()}' AS TEXT)"


def label_values(profile: Profile, key: str, heaps: list[str] | None) -> list[tuple[str, int, int, int, int]]:
    """(value, callsite_id, allocated bytes, unreleased bytes at the last dump, unreleased
    objects) of each callsite under each value of label `key`, in the heaps shown (None: all)."""
    db = profile.sql_connection()
    among = "" if heaps is None else " AND a.heap_name IN (" + ", ".join(_literal(h) for h in heaps) + ")"
    with profile.reading():  # damage: one line, as every reader's
        rows = db.execute(
            "SELECT l.value, a.callsite_id, SUM(CASE WHEN a.size > 0 THEN a.size ELSE 0 END), SUM(a.size),"
            " SUM(a.count) FROM main.heapscope_label_allocation a JOIN main.heapscope_label l ON l.upid = a.upid"
            f" AND l.label_set_id = a.label_set_id AND l.key = ?{among} GROUP BY l.value, a.callsite_id", (key,))
        return [(str_from_sql(r[0]), int_from_sql(r[1]), int_from_sql(r[2]), int_from_sql(r[3]), int_from_sql(r[4]))
                for r in rows]


def callsite_names(profile: Profile, callsite_id: int, most: int = 4) -> list[str]:
    """The names of a callsite's innermost frames, innermost first ('?' for a frame not named)."""
    db = profile.sql_connection()
    out: list[str] = []
    cid: int | None = callsite_id
    with profile.reading():  # damage: one line, as every reader's
        while cid is not None and len(out) < most:
            r = db.execute("SELECT c.parent_id, f.name FROM main.stack_profile_callsite c"
                           " JOIN main.stack_profile_frame f ON f.id = c.frame_id WHERE c.id = ?", (cid,)).fetchone()
            if r is None:
                break
            out.append(str_from_sql(r[1]) if r[1] else "?")
            cid = opt_int_from_sql(r[0])
    return out
