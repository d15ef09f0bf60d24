"""view.units: the spellings reports use for counts, percentages and a view's values."""

from __future__ import annotations

from heapscope.view.units import format_count, format_percent, format_value


def test_counts_values_and_percent() -> None:
    assert format_count(12345) == "12,345"
    assert format_count(-7) == "-7"
    assert format_value("space", 1536) == "1.5 KiB"
    assert format_value("alloc_space", 10) == "10 B"
    assert format_value("objects", 1536) == "1,536"
    assert format_value("alloc_objects", 0) == "0"
    assert format_percent(1, 3) == "33.3%"
    assert format_percent(0, 0) == "-"
