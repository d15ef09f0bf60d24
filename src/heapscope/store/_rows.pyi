"""A query's rows grouped by process, read in C (_rows.c)."""

from typing import Any

def grouped(
    uri: str, setup: tuple[str, ...], sql: str, params: tuple[int | str | None, ...], types: str, tagged: bool,
) -> dict[int, list[tuple[Any, ...]]] | None:
    """{first column: [the other columns of each of its rows, ...]} of `sql` run on the profile at
    `uri` after the statements of `setup`; with `tagged`, a row is (second column, (the rest)).
    `types`: a letter per column ('i' integer, 'n' integer or NULL, 't' text). None when SQLite
    fails or a value is not of its column's type."""

def summed(
    uri: str, setup: tuple[str, ...], sql: str, params: tuple[int | str | None, ...], types: str, keys: int, most: int,
) -> list[tuple[Any, ...]] | None:
    """The rows of `sql` (run as grouped() runs it) summed per key, its first `keys` columns: each
    group (key..., sums...) in key order, every other column summed as SQLite's SUM sums integers
    (None: only NULLs). None past `most` groups, on overflow, or as grouped()."""
