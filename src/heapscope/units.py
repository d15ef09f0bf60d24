"""Sizes and durations: how heapscope reads them from a user and writes them for one.

Every spelling of a byte count or a time lives here, so that `record -i 4k`, a pytest mark's
`limit_memory("24 MB")` and every printed figure agree wherever they appear.

Two readings of a size, each what its users already type: a command line's `-i 4k` or
`--shmem-size 8M` counts in powers of two (as heapprofd's and ulimit's options do), while a
pytest mark's limit names its system ("24 MB" is 24·10⁶ bytes, "24 MiB" 24·2²⁰). Figures are
written in binary units (`1.5 KiB`). Durations on a command line always carry their unit:
heapprofd's `-d 10` is milliseconds, a reader would guess seconds.

On `record`'s start path, before its target is spawned: no typing, and math (a C extension to
load) and re only inside the functions that need them.

May import: heapscope.errors.
"""

from __future__ import annotations

from heapscope.errors import UsageError

_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_FACTORS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

# A command line's size suffixes (an optional trailing b is allowed: 64kb, 8MB).
_OPTION_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

# A limit's units, by system: SI (k, kB, MB, ...) and IEC (KiB, MiB, ...); none = bytes.
_LIMIT_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
                "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_LIMIT = r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*"

_DURATION_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def parse_size(text: str, what: str) -> int:
    """A command line's size: '4096', '64k', '8M', '1G', '64kb' -> bytes (k = 1024); a positive
    whole number, anything else is a UsageError naming the option `what`."""
    t = text.strip().lower()
    mult = 1
    if t[-1:] == "b":
        t = t[:-1]
    if t[-1:] in _OPTION_UNITS:
        mult = _OPTION_UNITS[t[-1]]
        t = t[:-1]
    try:
        value = int(t, 10)
    except ValueError:
        raise UsageError(f"{what} must be a number of bytes (like 4096 or 64k), not {text!r}") from None
    if value < 1:
        raise UsageError(f"{what} must be a positive number of bytes, not {text!r}")
    return value * mult


def parse_limit(text: str | int | float) -> int:
    """A limit's size: "24 MB" (SI, 10^6), "24 MiB" (IEC, 2^20), "512kB", ".5 MB", "100" or a
    number (bytes); ValueError otherwise."""
    import math  # here, as re: not loaded on the start path
    import re

    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int | float):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(_LIMIT, str(text))
        if m is None or m.group(2).lower() not in _LIMIT_UNITS:
            raise ValueError(f"not a size: {text!r} (say e.g. 24 MB, 24 MiB, 512 kB)")
        value, unit = float(m.group(1)), m.group(2).lower()
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a size: {text!r}")
    return int(value * _LIMIT_UNITS[unit])


def parse_duration(text: str, what: str, limit: float) -> float:
    """'500ms', '30s', '1.5s', '2m', '1h' -> seconds, positive and at most `limit`. A bare number
    is refused and its unit asked for; anything else is a UsageError naming the option `what`."""
    t = text.strip().lower()
    mult = 0.0
    for suffix, m in _DURATION_UNITS:
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    if not mult:
        raise UsageError(f"{what} {text!r}: say its unit, e.g. {text.strip()}ms or {text.strip()}s"
                         " (ms, s, m, h)")
    try:
        value = float(t)
    except ValueError:
        raise UsageError(f"{what} must be a time like 500ms, 30s or 2m, not {text!r}") from None
    import math  # here: a C extension to load, for -d only

    if not math.isfinite(value) or value <= 0 or value * mult > limit:
        raise UsageError(f"{what} must be a positive time up to a year, not {text!r}")
    return value * mult


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


def format_in(n: float, unit: str, digits: int = 1, sep: str = "") -> str:
    """`n` bytes in one fixed unit (B, KiB, MiB, GiB): `12.3 KiB`, `1,024.0 MiB` with sep=",",
    `64 MiB` with digits=0; for a figure whose unit a reader compares with another's."""
    return f"{n / _FACTORS[unit]:{sep}.{digits}f} {unit}"
