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

import contextlib
import sqlite3
from collections.abc import Iterable, Sequence

from heapscope.errors import ProfileError, SqlError
from heapscope.records import TupleRecord
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
_WHAT = {sqlite3.SQLITE_ATTACH: "ATTACH (and VACUUM)", sqlite3.SQLITE_DETACH: "DETACH"}
_PRAGMAS_ALLOWED = (f"the read-only pragmas are {', '.join(sorted(_READ_PRAGMAS))},"
                    f" and without a value {', '.join(sorted(_READ_WITHOUT_ARGUMENT))};"
                    " each also as a table-valued function, e.g. pragma_table_info('process')")
# SQLite asks the authorizer for every step of a long statement at no point, so a Python
# progress handler runs every this many virtual-machine steps: that is where a pending
# SIGINT's KeyboardInterrupt is raised, and SQLite then stops the statement.
_PROGRESS_STEPS = 10_000


class Result(TupleRecord):
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
        self._hint = ""
        self._db.set_authorizer(None)
        self._db.execute("PRAGMA query_only = ON")
        # A table-valued pragma (pragma_table_info('t')) is an eponymous virtual table that
        # SQLite creates on its first use, asking the authorizer to write sqlite_master for it:
        # created here, before the authorizer is set, so that only the PRAGMA check remains.
        for name in sorted(_READ_PRAGMAS | _READ_WITHOUT_ARGUMENT):
            with contextlib.suppress(sqlite3.Error):
                self._db.execute(f"SELECT * FROM pragma_{name} LIMIT 0").fetchall()
        self._db.set_authorizer(self._authorize)
        self._db.set_progress_handler(_progress, _PROGRESS_STEPS)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, _db: str | None,
                   _trigger: str | None) -> int:
        if self._unlocked or action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and arg1 is not None:
            name = arg1.lower()
            if name in _READ_PRAGMAS or (name in _READ_WITHOUT_ARGUMENT and arg2 is None):
                return sqlite3.SQLITE_OK
        if self._denied is None:
            if action == sqlite3.SQLITE_PRAGMA:
                shown = f"PRAGMA {arg1}" + (" with a value" if arg2 is not None else "")
                self._denied, self._hint = shown, _PRAGMAS_ALLOWED
            elif action == sqlite3.SQLITE_UPDATE and arg1 in ("sqlite_master", "sqlite_schema"):
                # A table-valued pragma not made above (so not a read-only one), or a schema write.
                self._denied, self._hint = "a pragma that is not read-only, or a schema change", _PRAGMAS_ALLOWED
            else:
                self._denied = _WHAT.get(action, "")
        return sqlite3.SQLITE_DENY

    def execute(self, sql: str, limit: int | None = None) -> Result:
        """Run one statement (or several; the last one's rows are returned)."""
        self._denied, self._hint = None, ""
        try:
            cur = self._db.execute(sql)
            rows = cur.fetchall() if limit is None else cur.fetchmany(limit)
        except sqlite3.Warning as e:  # "You can only execute one statement at a time."
            raise SqlError(f"SQL error: {_line(e)}") from e
        except sqlite3.OperationalError as e:
            if str(e) == "interrupted":  # the progress handler met Ctrl-C: stop as Ctrl-C stops
                raise KeyboardInterrupt from e
            self._refused(e, sql)
            raise SqlError(f"SQL error: {_line(e)}") from e
        except sqlite3.DatabaseError as e:
            self._refused(e, sql)
            if isinstance(e, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                raise SqlError(f"SQL error: {_line(e)}") from e
            raise ProfileError(f"{self.profile.path}: cannot read profile ({_line(e)})") from e
        except sqlite3.Error as e:
            raise SqlError(f"SQL error: {_line(e)}") from e
        except (OverflowError, ValueError) as e:  # e.g. text that is not UTF-8
            raise SqlError(f"SQL error: {_line(e)}") from e
        columns = [d[0] for d in cur.description] if cur.description else []
        return Result(columns, rows)

    def _refused(self, e: sqlite3.Error, sql: str) -> None:
        """SqlError saying what the authorizer refused, when it refused something."""
        if self._denied is not None:
            what = self._denied or _first_word(sql)
            hint = f"; {self._hint}" if self._hint else ""
            raise SqlError(f"refused: heapscope sql is read-only ({what} is not allowed{hint})") from e

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
        except OverflowError as e:  # a crafted profile's sums past 2^63
            self._db.rollback()
            raise SqlError(f"cannot build {name}: a value does not fit SQLite's 64-bit integers") from e
        finally:
            self._db.execute("PRAGMA query_only = ON")
            self._unlocked = False


def _progress() -> int:
    """SQLite's progress handler: 0 goes on. A Python function on purpose (see _PROGRESS_STEPS)."""
    return 0


def _first_word(sql: str) -> str:
    words = sql.split(None, 1)
    return words[0].upper() if words else "this statement"


def _line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__
