"""The pytest plugin's options read as `record`'s do."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from heapscope.hosts.pytest_plugin import _interval


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("4096", 4096), ("4k", 4096), ("512k", 512 << 10),
                                             ("1M", 1 << 20)])
def test_the_interval_is_read_as_record_reads_it(text: str, value: int) -> None:
    # GIVEN --heapscope-interval in record's spelling; THEN the bytes `record -i` would use
    assert _interval(SimpleNamespace(heapscope_interval=text)) == value


@pytest.mark.parametrize("text", ["0", "4 KiB", "lots"])
def test_a_bad_interval_is_a_usage_error(text: str) -> None:
    with pytest.raises(pytest.UsageError, match="--heapscope-interval"):
        _interval(SimpleNamespace(heapscope_interval=text))
