"""De-sampled estimates of allocation counts, with their standard error.

The sampler (client/sampler.c, heapprofd's math) records an allocation of
`s >= I` bytes at its size, always; a smaller one is recorded with
probability p(s) = 1 - e^(-s/I), as k*I bytes where k >= 1 counts the
crossings of the Poisson countdown. So every sample of an allocation of s
bytes stands for 1/p(s) allocations, and sampled bytes are an unbiased
estimate of real bytes without any correction.

What a profile stores per callsite is the number of samples n and their
sampled bytes B, not each allocation's real size, so s is estimated from
them (the method of moments, assuming one allocation size per callsite):

* m = B/n >= I * e/(e-1): the samples are of allocations of at least I bytes,
  each recorded exactly: the estimate is n, with no error.
* I <= m < I * e/(e-1): allocations of s < I, for which the mean number of
  crossings of a sample is E[k | k >= 1] = x / (1 - e^-x) with x = s/I.
  Solving x/(1-e^-x) = m/I gives x, and the estimate is N = n / (1 - e^-x)
  (= B/s). When no sample crossed twice (m = I) x is taken as 1/n, the
  value at which n samples would show half a double crossing on average.

The standard error given is that of the count at the estimated size:
sqrt(n * (1 - p)) / p, the Horvitz-Thompson variance N(1-p)/p with N
estimated. It does not include the error of the size estimate, which for
allocations much smaller than I can be as large again (few samples cross
twice); a callsite of mixed sizes is underestimated (1/p is convex).

At interval 1 every allocation is a sample: the estimate is n, exact. Rows
of fewer than I sampled bytes per sample cannot come from the sampler at
interval I (they come from interval 1, or other tools): they are taken as exact.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from heapscope.model import CallsiteId
    from heapscope.store.reader import ViewValues

#: m/I at or above which the samples are of allocations of at least I bytes.
LARGE_RATIO = math.e / (math.e - 1.0)


class Estimate(NamedTuple):
    """An estimated number of allocations and its standard error."""

    value: float
    stderr: float


def _ratio_to_x(r: float) -> float:
    """The x in (0, 1) with x / (1 - e^-x) = r, for 1 < r < LARGE_RATIO (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        f = mid / -math.expm1(-mid) if mid > 0 else 1.0
        if f < r:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def estimate_count(samples: int, sampled_bytes: int, interval: int) -> Estimate:
    """The number of allocations behind `samples` samples of `sampled_bytes` at `interval`.

    Negative inputs (freed rows of a delta) are estimated by their magnitude
    and keep their sign.
    """
    if samples == 0:
        return Estimate(0.0, 0.0)
    if samples < 0 or (sampled_bytes < 0 and samples > 0):
        e = estimate_count(abs(samples), abs(sampled_bytes), interval)
        return Estimate(-e.value if samples < 0 else e.value, e.stderr)
    if interval <= 1:
        return Estimate(float(samples), 0.0)
    r = sampled_bytes / (samples * interval)
    if r < 1.0 or r >= LARGE_RATIO:  # under I per sample no sampler records: taken as exact
        return Estimate(float(samples), 0.0)
    floor = 1.0 + 0.5 / samples  # m = I: take x = ~1/n (see the module doc)
    x = _ratio_to_x(max(r, floor))
    p = -math.expm1(-x)
    return Estimate(samples / p, math.sqrt(samples * (1.0 - p)) / p)


def estimate_int(samples: int, sampled_bytes: int, interval: int) -> int:
    """estimate_count rounded to an integer, for views and exports that carry integers."""
    return round(estimate_count(samples, sampled_bytes, interval).value)


def combine(estimates: list[Estimate]) -> Estimate:
    """The sum of independent estimates: values add, variances add."""
    return Estimate(sum(e.value for e in estimates), math.sqrt(sum(e.stderr * e.stderr for e in estimates)))


def desampled(values: ViewValues, interval: int) -> ViewValues:
    """`values` with the object views replaced by their estimates (the byte views need none)."""
    from heapscope.store.reader import ViewValues

    if interval <= 1:
        return values
    return ViewValues(values.space, estimate_int(values.objects, values.space, interval),
                      values.alloc_space, estimate_int(values.alloc_objects, values.alloc_space, interval))


def desampled_map(values: dict[CallsiteId, ViewValues], interval: int) -> dict[CallsiteId, ViewValues]:
    """desampled() of every callsite."""
    if interval <= 1:
        return values
    return {cs: desampled(v, interval) for cs, v in values.items()}


def view_estimate(values: dict[CallsiteId, ViewValues], view: str, interval: int) -> Estimate:
    """The estimated number of allocations of an object view over `values`, with its standard error."""
    live = view == "objects"
    return combine([estimate_count(v.objects if live else v.alloc_objects, v.space if live else v.alloc_space,
                                   interval) for v in values.values()])
