"""view.units: the spellings reports use for bytes, counts and percentages."""

from __future__ import annotations

import pytest

from heapscope.view.units import format_bytes, format_count, format_percent, format_value


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"),
    (1, "1 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1536, "1.5 KiB"),
    (1024 * 1024 - 1, "1.0 MiB"),  # rounds up into the next unit, never "1024.0 KiB"
    (3 * 1024**3 // 2, "1.5 GiB"),
    (-2048, "-2.0 KiB"),
    (5 * 1024**7, "5120.0 EiB"),
])
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_counts_values_and_percent() -> None:
    assert format_count(12345) == "12,345"
    assert format_count(-7) == "-7"
    assert format_value("space", 1536) == "1.5 KiB"
    assert format_value("alloc_space", 10) == "10 B"
    assert format_value("objects", 1536) == "1,536"
    assert format_value("alloc_objects", 0) == "0"
    assert format_percent(1, 3) == "33.3%"
    assert format_percent(0, 0) == "-"
