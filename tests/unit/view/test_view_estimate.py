"""heapscope.estimate: de-sampled allocation counts and their standard errors.

The sampled data comes from a Python model of client/sampler.c (heapprofd's
math, spec README "Sampler"): an allocation of size >= I is recorded at its
size; a smaller one moves a countdown of Exp(I)-distributed intervals and is
recorded as I times the number of crossings. Fixed seeds keep it deterministic.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from heapscope.estimate import Estimate, bytes_stderr, combine, desampled, estimate_count
from heapscope.store.reader import ViewValues


def sample(sizes: list[int], interval: int, seed: int) -> tuple[int, int, int]:
    """(samples, sampled bytes, real bytes of the samples) of allocating `sizes` in order."""
    rng = random.Random(seed)

    def next_interval() -> int:
        return int(rng.expovariate(1.0 / interval)) + 1

    countdown = next_interval()
    n = sampled = real = 0
    for s in sizes:
        if s >= interval:
            n, sampled, real = n + 1, sampled + s, real + s
            continue
        countdown -= s
        k = 0
        while countdown <= 0:
            countdown += next_interval()
            k += 1
        if k:
            n, sampled, real = n + 1, sampled + k * interval, real + s
    return n, sampled, real


def test_interval_one_is_exact() -> None:
    assert estimate_count(123, 4567, 1, 4567) == Estimate(123.0, 0.0)
    assert estimate_count(123, 4567, 1) == Estimate(123.0, 0.0)


def test_allocations_of_at_least_the_interval_are_counted_as_they_are() -> None:
    assert estimate_count(16, 16 * 65536, 4096, 16 * 65536) == Estimate(16.0, 0.0)
    assert estimate_count(16, 16 * 65536, 4096) == Estimate(16.0, 0.0)  # without real sizes too


def test_a_sample_of_s_bytes_stands_for_one_over_p_allocations() -> None:
    e = estimate_count(10, 10 * 4096, 4096, 10 * 256)
    p = 1 - math.exp(-256 / 4096)
    assert e.value == pytest.approx(10 / p)
    assert e.stderr == pytest.approx(math.sqrt(10 * (1 - p)) / p)


def test_freed_rows_keep_their_sign() -> None:
    a = estimate_count(10, 10 * 4096, 4096, 10 * 256)
    b = estimate_count(-10, -10 * 4096, 4096, -10 * 256)
    assert b.value == -a.value and b.stderr == a.stderr


@pytest.mark.parametrize(("size", "count"), [(16, 200_000), (256, 20_000), (1000, 5000), (3000, 3000)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_estimates_are_within_four_standard_errors_of_the_truth(size: int, count: int, seed: int) -> None:
    n, sampled, real = sample([size] * count, 4096, seed)
    # WHEN estimated with the real sizes
    e = estimate_count(n, sampled, 4096, real)
    assert e.stderr > 0 and abs(e.value - count) <= 4 * e.stderr, (n, e)
    # AND without them (older profiles), from sampled bytes alone: wider, still honest
    m = estimate_count(n, sampled, 4096)
    assert m.stderr >= e.stderr and abs(m.value - count) <= 4 * m.stderr, (n, m)


def test_objects_views_are_replaced_and_byte_views_kept() -> None:
    v = ViewValues(space=10 * 4096, objects=10, alloc_space=20 * 4096, alloc_objects=20,
                   real_space=10 * 256, alloc_real_space=20 * 256)
    d = desampled(v, 4096)
    p = 1 - math.exp(-256 / 4096)
    assert (d.space, d.alloc_space) == (v.space, v.alloc_space)
    assert (d.objects, d.alloc_objects) == (round(10 / p), round(20 / p))
    assert desampled(v, 1) is v


def test_combined_errors_add_in_quadrature() -> None:
    assert combine([Estimate(10, 3), Estimate(5, 4)]) == Estimate(15, 5.0)


def test_sampled_bytes_spread_as_the_bytes_standard_error_says() -> None:
    # GIVEN 64 MiB in allocations of 8 KiB, sampled at one per 512 KiB (the always-on rate)
    interval, sizes = 512 << 10, [8192] * 8192
    got = [sample(sizes, interval, seed)[1] for seed in range(100)]
    # THEN the sampled bytes spread around the truth by sqrt(interval x bytes), ~5.7 MiB
    spread = statistics.pstdev(got)
    assert bytes_stderr(interval, sum(sizes)) == math.sqrt(interval * sum(sizes))
    assert 0.75 < spread / bytes_stderr(interval, sum(sizes)) < 1.25, spread
    assert abs(statistics.mean(got) - sum(sizes)) < 4 * bytes_stderr(interval, sum(sizes)) / 10


def test_bytes_are_exact_at_interval_one() -> None:
    assert bytes_stderr(1, 1 << 30) == 0.0
    assert bytes_stderr(4096, 0) == 0.0


@pytest.mark.parametrize("samples", [2**40, 2**52, 2**61])
def test_samples_beyond_a_doubles_precision_estimate_without_dividing_by_zero(samples: int) -> None:
    # 2^52 samples and more at a ratio of exactly 1: the derivative's difference cancelled to 0
    e = estimate_count(samples, samples * 2, 2)
    assert math.isfinite(e.value) and math.isfinite(e.stderr) and e.value >= samples
