"""Human-readable numbers for reports: bytes in binary units, counts with separators.

Owns only formatting; it knows which views are in bytes and which are counts,
and nothing else about profiles.
"""

from __future__ import annotations

_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

#: Views whose values are bytes; the others count allocations.
BYTE_VIEWS = frozenset({"space", "alloc_space"})


def format_bytes(n: int) -> str:
    """`0 B`, `512 B`, `1.5 KiB`, `12.0 MiB`; negative values keep their sign.

    One decimal from KiB on, so that two neighbouring rows of a table stay
    comparable at a glance; exact byte counts are in the database.
    """
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    if value < 1024:
        return f"{sign}{int(value)} B"
    for unit in _BINARY_UNITS:
        value /= 1024
        # Round first: 1023.96 KiB must print as 1.0 MiB, not 1024.0 KiB.
        if round(value, 1) < 1024 or unit == _BINARY_UNITS[-1]:
            return f"{sign}{value:.1f} {unit}"
    raise AssertionError("unreachable")


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


#: The name `heapscope record` uses for its status line and summary.
human_bytes = format_bytes
