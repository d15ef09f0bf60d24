"""Many rows of values converted at once: a column at a time when they are as `record` writes
them, else row by row with the checked conversions of values.py (one error line for damage)."""

from __future__ import annotations

import functools

from heapscope.store.rows import DumpValues, ViewValues
from heapscope.store.values import int_from_sql, opt_int_from_sql

TYPE_CHECKING = False  # typing.TYPE_CHECKING: record's summary reads through here (docs/README.md)
if TYPE_CHECKING:
    from typing import Any

_INT = frozenset({int})
_INT_OR_NULL = frozenset({int, type(None)})
new_values = functools.partial(tuple.__new__, ViewValues)
new_dump_values = functools.partial(tuple.__new__, DumpValues)  # a DumpValues of (ts, callsite, values)


def plain_values(rows: list[tuple[object, ...]], keys: tuple[int, ...],
                 first: int) -> tuple[list[tuple[Any, ...]], list[ViewValues]] | None:
    """The columns `keys` of `rows` and the ViewValues of their columns first..first+5, when every
    value is as `record` writes it (integers, NULL only in the two real-size columns): made a
    column at a time at C speed rather than a conversion per value (a build's peaks: 93k rows).
    None when some value is not so, for the checked conversions to read row by row."""
    if not rows or len(rows[0]) < first + 6:
        return None
    cols = list(zip(*rows, strict=True))
    if not all(set(map(type, cols[k])) <= _INT for k in (*keys, first, first + 1, first + 2, first + 3)):
        return None
    if not all(set(map(type, cols[k])) <= _INT_OR_NULL for k in (first + 4, first + 5)):
        return None
    return [cols[k] for k in keys], list(map(new_values, zip(*cols[first:first + 6], strict=True)))


def view_values(r: tuple[object, ...], first: int) -> ViewValues:
    a, b, c, d, real_v, alloc_v = (*r[first:first + 6], None, None)[:6]
    if (type(a) is int and type(b) is int and type(c) is int and type(d) is int
            and (real_v is None or type(real_v) is int) and (alloc_v is None or type(alloc_v) is int)):
        return ViewValues(a, b, c, d, real_v, alloc_v)  # what the conversions below give such a row
    col = "heap_profile_allocation."
    real = alloc_real = None
    if len(r) > first + 5:
        real = opt_int_from_sql(r[first + 4], col + "real_size")
        alloc_real = opt_int_from_sql(r[first + 5], col + "real_size")
    return ViewValues(int_from_sql(r[first], col + "size"), int_from_sql(r[first + 1], col + "count"),
                      int_from_sql(r[first + 2], col + "size"), int_from_sql(r[first + 3], col + "count"),
                      real, alloc_real)
