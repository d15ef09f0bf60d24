"""Human-readable numbers for reports: counts with separators, percentages, and a view's
values in its unit (bytes are heapscope.units' format_bytes).

Owns only formatting; it knows which views are in bytes and which are counts,
and nothing else about profiles.
"""

from __future__ import annotations

from heapscope.units import format_bytes

#: Views whose values are bytes; the others count allocations.
BYTE_VIEWS = frozenset({"space", "alloc_space"})


def format_count(n: int) -> str:
    """`12,345`: thousands separated by commas."""
    return f"{n:,}"


def format_value(view: str, n: int) -> str:
    """A value of `view` in its unit: bytes for the space views, a count otherwise."""
    return format_bytes(n) if view in BYTE_VIEWS else format_count(n)


def format_percent(part: int, whole: int) -> str:
    """`part` as a percentage of `whole` with one decimal; `-` when `whole` is 0."""
    if whole == 0:
        return "-"
    return f"{100.0 * part / whole:.1f}%"

