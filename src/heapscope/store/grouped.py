"""Many rows of a table read in C and grouped by process (_rows.c), on a connection of its own
that sees what the reader's sees: a build's flamegraph reads ~300k memory samples and ~130k size
rows, and the sqlite3 module's tuple a row and a Python loop to sort them into processes took
two to three times what SQLite took to step them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from heapscope.store._rows import grouped
from heapscope.store.values import INT, INT_OR_NULL, TEXT

TYPE_CHECKING = False  # typing.TYPE_CHECKING: store/series.py, which the live view imports, uses this
if TYPE_CHECKING:
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
    return grouped(profile.uri, tuple(views), sql, tuple(args), letters, tagged)
