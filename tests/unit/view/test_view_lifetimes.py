"""view/lifetimes.py's arithmetic: thresholds on the bucket bounds, quantiles, de-sampled cells."""

from __future__ import annotations

import math

import pytest

from heapscope.cli.lifetimes import parse_temporary, threshold_line
from heapscope.errors import UsageError
from heapscope.model import CallsiteId
from heapscope.store.lifetimes import CallsiteLife, Cell
from heapscope.view import lifetimes as lt


def test_a_threshold_is_taken_down_to_a_bound() -> None:
    assert lt.effective_threshold(1_000_000) == 1_000_000
    assert lt.effective_threshold(3_000_000) == 2_000_000
    assert lt.effective_threshold(999) == 0
    assert "taken down to the bucket bound 2 ms" in threshold_line(3_000_000, 1)
    assert "exact only at -i 1" in threshold_line(lt.HEAPTRACK, 4096)


def test_durations_and_buckets_read_as_written() -> None:
    assert parse_temporary(None) == 1_000_000
    assert (parse_temporary("50us"), parse_temporary("2ms"), parse_temporary("1s")) == (50_000, 2_000_000, 10 ** 9)
    assert parse_temporary("HeapTrack") == lt.HEAPTRACK
    for bad in ("soon", "0us", "-1ms", "5"):
        with pytest.raises(UsageError):
            parse_temporary(bad)
    assert [lt.format_bucket(b) for b in ((0, 1000), (500_000, 1_000_000), (10 ** 12, None), None)] == \
        ["<1 us", "500 us-1 ms", ">=1000 s", "-"]


def test_quantiles_fall_in_the_bucket_that_holds_them() -> None:
    weights: dict[lt.Bucket, float] = {(0, 1000): 10.0, (1000, 2000): 10.0, (10 ** 7, 2 * 10 ** 7): 80.0}
    assert lt.quantile(weights, 0.5) == (10 ** 7, 2 * 10 ** 7)
    assert lt.quantile(weights, 0.1) == (0, 1000)
    assert lt.quantile({}, 0.5) is None


def test_temporary_rows_rank_by_bytes_and_desample_per_bucket() -> None:
    # GIVEN at interval 4096 a stack of 64 B blocks freed within 1 ms and one held 10 ms
    fast = CallsiteLife(freed={(0, 1000, 64): Cell(100, 409_600, 6_400)},
                        sizes={(64, 128): Cell(100, 409_600, 6_400)})
    slow = CallsiteLife(freed={(10 ** 7, 2 * 10 ** 7, 4096): Cell(5, 20_480, 20_480)},
                        sizes={(4096, 8192): Cell(5, 20_480, 20_480)})
    rows = lt.temporary_rows({CallsiteId(1): fast, CallsiteId(2): slow}, 1_000_000, 4096)
    # THEN only the fast one, its allocations estimated as 100 / p(64 B), with the error of that
    (r,) = rows
    p = -math.expm1(-64 / 4096)
    assert r.callsite == 1 and r.temp_bytes == 409_600
    assert r.temp.value == pytest.approx(100 / p) and r.temp.stderr == pytest.approx(math.sqrt(100 * (1 - p)) / p)
    assert [x.callsite for x in lt.temporary_rows({CallsiteId(1): fast, CallsiteId(2): slow}, 10 ** 8, 4096)] == [1, 2]
