"""Many rows of a table read in C, grouped by process or summed per key (_rows.c), on a
connection of its own that sees what the reader's sees. A build's flamegraph reads ~300k memory
samples, ~130k size rows and ~195k delta rows: the sqlite3 module's tuple a row, with a Python
loop to sort them into processes, took two to three times what SQLite took to step them, and
SQLite's GROUP BY of the delta rows ten times."""

from __future__ import annotations

from collections.abc import Sequence

from heapscope.store._rows import grouped, summed
from heapscope.store.values import INT, INT_OR_NULL, TEXT

TYPE_CHECKING = False  # typing.TYPE_CHECKING: store/series.py, which the live view imports, uses this
if TYPE_CHECKING:
    from typing import Any

    from heapscope.store.reader import Profile

# SQLite keeps a temporary view's statement as CREATE VIEW ...; made again in the other
# connection's temporary schema.
_VIEW_TEXT, _TEMP_VIEW_TEXT = "CREATE VIEW ", "CREATE TEMP VIEW "
_TYPE_LETTERS = {INT: "i", INT_OR_NULL: "n", TEXT: "t"}  # _rows.c's names of them


def grouped_rows(profile: Profile, sql: str, args: Sequence[int | str | None], types: Sequence[tuple[str, ...]],
                 tagged: bool = False) -> dict[int, list[tuple[Any, ...]]] | None:
    """The rows of `sql` (its first column a upid) grouped by it, each a tuple of the other
    columns (with `tagged`: (the second, (the rest))), in SQLite's order, read in C with the
    reader connection's temporary views (the heap shown). `types`: per column, the SQL types it
    may hold as written (INT, INT_OR_NULL or TEXT of values.py). None when that cannot be done
    (the statement or a view names a temporary table, a value is of another type, SQLite
    fails): the caller reads the rows through the reader's connection, whose checks give each
    error its message."""
    letters = "".join(_TYPE_LETTERS[t] for t in types)
    views = _views(profile, sql)
    return None if views is None else grouped(profile.uri, views, sql, tuple(args), letters, tagged)


def summed_rows(profile: Profile, sql: str, args: Sequence[int | str | None], types: Sequence[tuple[str, ...]],
                keys: int, most: int) -> list[tuple[Any, ...]] | None:
    """The rows of `sql` summed per key (its first `keys` columns), in C as grouped_rows reads
    them: (key..., sums...) in key order, each other column summed as SQLite's SUM sums
    integers (INT_OR_NULL types; None for a group of NULLs only). None as grouped_rows, on
    overflow, and past `most` groups (to be read by SQL, a chunk at a time)."""
    letters = "".join(_TYPE_LETTERS[t] for t in types)
    views = _views(profile, sql)
    return None if views is None else summed(profile.uri, views, sql, tuple(args), letters, keys, most)


def _views(profile: Profile, sql: str) -> tuple[str, ...] | None:
    """The statements that make the reader connection's temporary views on another connection;
    None when `sql` cannot be run there as here (no file URI, a temporary table named)."""
    if not profile.uri:
        return None
    with profile.reading():
        temp = profile.sql_connection().execute(
            "SELECT type, name, sql FROM temp.sqlite_master WHERE type IN ('table', 'view') ORDER BY rowid").fetchall()
    views = []
    for kind, _name, text in temp:
        if kind == "view":
            if not isinstance(text, str) or not text.startswith(_VIEW_TEXT):
                return None
            views.append(_TEMP_VIEW_TEXT + text[len(_VIEW_TEXT):])
    # A temporary table (symbols added, the label chosen) is not on the other connection: a
    # statement that may name one is read by the reader (a name that shadows the profile's table
    # would read the profile's there).
    texts = [sql.lower(), *(v.lower() for v in views)]
    if any(kind != "view" and any(str(name).lower() in t for t in texts) for kind, name, _ in temp):
        return None
    return tuple(views)


def dump_terms(real: bool) -> tuple[str, ...]:
    """What a delta row adds to its callsite's six values (ViewValues' order): the reader's
    queries SUM them, dump_sums sums them in C. `real`: the table has real_size (an older
    profile's real sums are NULL)."""
    real_terms = ("real_size", "CASE WHEN count > 0 THEN real_size END") if real else ("NULL", "NULL")
    return ("size", "count", "CASE WHEN size > 0 THEN size ELSE 0 END", "CASE WHEN count > 0 THEN count ELSE 0 END",
            *real_terms)


#: Groups of one process summed in C at most: a day of dumps every second (1.7 M rows) is read
#: by SQL, a chunk at a time, not held at once.
MOST_SUMMED = 1 << 18


def dump_sums(profile: Profile, upid: int, by_heap: bool, real: bool) -> list[tuple[Any, ...]] | None:
    """Profile.iter_dump_values' sums of a process's delta rows (per heap too, `by_heap`) made in
    C: (ts, callsite, six sums) or (ts, heap name, callsite, six sums), by ts, then heap and
    callsite as SQLite's GROUP BY orders them. `real` as dump_terms. None as summed_rows."""
    keys = ("ts", "heap_name", "callsite_id") if by_heap else ("ts", "callsite_id")
    terms = dump_terms(real)
    sql = f"SELECT {', '.join((*keys, *terms))} FROM heap_profile_allocation WHERE upid = ?"
    types = [INT, TEXT, INT] if by_heap else [INT, INT]
    return summed_rows(profile, sql, [upid], [*types, *[INT_OR_NULL] * len(terms)], len(keys), MOST_SUMMED)
