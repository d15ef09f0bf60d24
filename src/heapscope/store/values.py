"""Integers between Python and SQLite's signed 64-bit INTEGER, converted once each way.

Unsigned 64-bit values (return addresses, rel_pc, mapping bounds, offsets,
load biases, sampling intervals, allocation sizes and addresses of the
stream) may be 2^63 or more, which SQLite's INTEGER cannot hold: the writer
stores them as the signed integer with the same 64 bits (two's complement,
so 2^64 - 1 is stored as -1) and the reader turns them back. Perfetto's
trace_processor stores such values as int64 too, so queries that only
compare or group them run unchanged. Signed columns (ids, timestamps, the
delta rows' counts and sizes, stats) are clamped to the int64 range rather
than letting one out-of-range number fail the whole recording.

Reading, a value of the wrong type (text that is not a number, a blob, a
real that is not an integer, NULL where the schema says NOT NULL) raises
BadValue, which the reader turns into one ProfileError line.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

U64_MASK = (1 << 64) - 1

# Readers of per-process rows for many processes at once: past this many the table is read whole
# and filtered in Python (an IN list that long costs as much as the scan, and old SQLite builds
# take at most 999 parameters).
MAX_IN_LIST = 500


def upid_filter(wanted: set[int]) -> tuple[str, list[int]]:
    """The WHERE clause and its parameters that pick the rows of `wanted` processes: an IN list
    up to MAX_IN_LIST of them, else none (the caller filters each row by `wanted`)."""
    args = list(wanted) if len(wanted) <= MAX_IN_LIST else []
    return (f" WHERE upid IN ({', '.join('?' * len(args))})" if args else ""), args


# The SQL types a column may hold as the writer writes it (typeof()'s names).
INT, TEXT, INT_OR_NULL = ("integer",), ("text",), ("integer", "null")


def all_as_written(db: sqlite3.Connection, table: str, columns: Sequence[tuple[str, tuple[str, ...]]],
                   where: str = "", args: Sequence[object] = ()) -> bool:
    """Whether every row `where` picks holds, in each of `columns` (name, the types it may
    hold), a value of a type the writer writes: one pass in SQLite. Then a reader of many rows
    may take their values as they come instead of checking each (a build's flamegraph spent
    ~4 s so on ~700k rows); else it checks each, and damage is a ProfileError as always."""
    odd = " OR ".join(f"typeof({c}) NOT IN ({', '.join(repr(t) for t in types)})" for c, types in columns)
    cond = f"{where} AND ({odd})" if where else f" WHERE {odd}"
    return db.execute(f"SELECT 1 FROM {table}{cond} LIMIT 1", list(args)).fetchone() is None


I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1


class BadValue(ValueError):
    """A column holds a value of the wrong type: the profile is damaged."""


def u64_to_sql(n: int) -> int:
    """An unsigned 64-bit value (taken modulo 2^64) as the int64 with the same bits."""
    n &= U64_MASK
    return n - (1 << 64) if n > I64_MAX else n


def i64_to_sql(n: int) -> int:
    """A signed value clamped to the int64 range."""
    return I64_MIN if n < I64_MIN else I64_MAX if n > I64_MAX else n


def opt_i64_to_sql(n: int | None) -> int | None:
    return None if n is None else i64_to_sql(n)


def opt_u64_to_sql(n: int | None) -> int | None:
    return None if n is None else u64_to_sql(n)


def _integer(v: object, column: str) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer() and I64_MIN <= v <= I64_MAX:
        return int(v)
    if isinstance(v, str):
        try:
            n = int(v.strip())
        except ValueError:
            pass
        else:
            if I64_MIN <= n <= U64_MASK:
                return n
    shown = repr(v) if not isinstance(v, bytes | str) or len(v) < 40 else f"{v[:37]!r}..."
    raise BadValue(f"unexpected value {shown} in {column or 'an integer column'}")


def int_from_sql(v: object, column: str = "") -> int:
    """A nullable signed INTEGER column; NULL reads as 0."""
    return 0 if v is None else _integer(v, column)


def req_int_from_sql(v: object, column: str) -> int:
    """A NOT NULL signed INTEGER column; NULL is damage."""
    if v is None:
        raise BadValue(f"NULL in {column}, which may not be NULL")
    return _integer(v, column)


def opt_int_from_sql(v: object, column: str = "") -> int | None:
    """A nullable INTEGER column whose NULL means something (no parent, no end)."""
    return None if v is None else _integer(v, column)


def u64_from_sql(v: object, column: str = "") -> int:
    """A u64 column (see u64_to_sql); NULL reads as 0."""
    return int_from_sql(v, column) & U64_MASK


def req_u64_from_sql(v: object, column: str) -> int:
    return req_int_from_sql(v, column) & U64_MASK


def str_from_sql(v: object) -> str:
    """A TEXT column; NULL reads as ''."""
    if v is None:
        return ""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def req_str_from_sql(v: object, column: str) -> str:
    if v is None:
        raise BadValue(f"NULL in {column}, which may not be NULL")
    return str_from_sql(v)
