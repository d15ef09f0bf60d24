"""`heapscope sql`'s access to a profile: arbitrary SELECTs, nothing else.

Three locks, each enough on its own for what it covers:
- the connection is opened `mode=ro` (store/reader.py), so the profile itself
  cannot change;
- `PRAGMA query_only` refuses every write, temp tables included;
- an authorizer (https://www.sqlite.org/c3ref/set_authorizer.html) denies
  ATTACH and DETACH (which VACUUM INTO goes through, and which would open or
  create any file, writable, in the name of whoever runs heapscope), every
  write and schema change, and pragmas other than the read-only ones.
Only the temp table experimental_flamegraph is written, by `load_table()`,
with the locks lifted for that one statement sequence.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from heapscope.errors import ProfileError, SqlError
from heapscope.store.reader import Profile

_ALLOWED = frozenset({
    sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE,
    sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT,
})
# Pragmas that only read (with an argument naming a table or an index, where they take one).
_READ_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "database_list", "collation_list", "function_list", "pragma_list", "module_list", "compile_options",
    "integrity_check", "quick_check", "foreign_key_check",
})
# Pragmas that read without an argument and write with one.
_READ_WITHOUT_ARGUMENT = frozenset({
    "page_count", "page_size", "user_version", "schema_version", "application_id", "encoding", "freelist_count",
    "journal_mode", "query_only",
})
_WHAT = {sqlite3.SQLITE_ATTACH: "ATTACH (and VACUUM)", sqlite3.SQLITE_DETACH: "DETACH",
         sqlite3.SQLITE_PRAGMA: "a PRAGMA that writes"}


class Result(NamedTuple):
    """A statement's column names and rows (no columns for a statement that returns none)."""

    columns: list[str]
    rows: list[tuple[object, ...]]


class SqlConsole:
    """Read-only SQL on one open profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._db = profile.sql_connection()
        self._unlocked = False
        self._denied: str | None = None
        self._db.set_authorizer(None)
        self._db.execute("PRAGMA query_only = ON")
        self._db.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, _db: str | None,
                   _trigger: str | None) -> int:
        if self._unlocked or action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and arg1 is not None:
            name = arg1.lower()
            if name in _READ_PRAGMAS or (name in _READ_WITHOUT_ARGUMENT and arg2 is None):
                return sqlite3.SQLITE_OK
        if self._denied is None:
            self._denied = _WHAT.get(action) if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH,
                                                           sqlite3.SQLITE_PRAGMA) else ""
        return sqlite3.SQLITE_DENY

    def execute(self, sql: str, limit: int | None = None) -> Result:
        """Run one statement (or several; the last one's rows are returned)."""
        self._denied = None
        try:
            cur = self._db.execute(sql)
            rows = cur.fetchall() if limit is None else cur.fetchmany(limit)
        except sqlite3.Warning as e:  # "You can only execute one statement at a time."
            raise SqlError(f"SQL error: {_line(e)}") from e
        except sqlite3.DatabaseError as e:
            if self._denied is not None:
                what = self._denied or _first_word(sql)
                raise SqlError(f"refused: heapscope sql is read-only ({what} is not allowed)") from e
            if isinstance(e, sqlite3.OperationalError | sqlite3.IntegrityError | sqlite3.ProgrammingError):
                raise SqlError(f"SQL error: {_line(e)}") from e
            raise ProfileError(f"{self.profile.path}: cannot read profile ({_line(e)})") from e
        except sqlite3.Error as e:
            raise SqlError(f"SQL error: {_line(e)}") from e
        except (OverflowError, ValueError) as e:  # e.g. text that is not UTF-8
            raise SqlError(f"SQL error: {_line(e)}") from e
        columns = [d[0] for d in cur.description] if cur.description else []
        return Result(columns, rows)

    def tables(self) -> list[str]:
        """Tables and views of the profile, then temp tables."""
        return [str(r[0]) for r in self.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'"
            " UNION ALL SELECT name FROM sqlite_temp_master WHERE type = 'table' ORDER BY 1").rows]

    def schema(self) -> list[str]:
        """CREATE statements of the profile and the temp tables."""
        return [str(r[0]) for r in self.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"
            " UNION ALL SELECT sql FROM sqlite_temp_master WHERE sql IS NOT NULL").rows]

    def load_table(self, name: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """(Re)create temp table `name` with `rows`: the one write this console makes."""
        self._unlocked = True
        try:
            self._db.execute("PRAGMA query_only = OFF")
            self._db.execute(f"DROP TABLE IF EXISTS temp.{name}")
            self._db.execute(f"CREATE TEMP TABLE {name} ({', '.join(columns)})")
            self._db.executemany(f"INSERT INTO temp.{name} VALUES ({', '.join('?' * len(columns))})", rows)
            self._db.commit()
        except sqlite3.Error as e:
            raise SqlError(f"cannot build {name}: {_line(e)}") from e
        finally:
            self._db.execute("PRAGMA query_only = ON")
            self._unlocked = False


def _first_word(sql: str) -> str:
    words = sql.split(None, 1)
    return words[0].upper() if words else "this statement"


def _line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__
