"""De-sampled estimates of allocation counts, with their standard error.

The sampler (client/sampler.c, heapprofd's math) records an allocation of
`s >= I` bytes at its size, always; a smaller one is recorded with
probability p(s) = 1 - e^(-s/I), as k*I bytes where k >= 1 counts the
crossings of the Poisson countdown. So every sample of an allocation of s
bytes stands for 1/p(s) allocations (p = 1 for s >= I), and sampled bytes
are an unbiased estimate of real bytes without any correction.

Per callsite a profile stores the number of samples n, their sampled bytes
B and (since the real_size column) their real bytes R: the sum of the sizes
the program asked for, over the same samples. The estimate takes the mean
real size s = R/n as the size of every allocation of the callsite:

    N = n / p(s),   standard error sqrt(n * (1 - p(s))) / p(s)

the Horvitz-Thompson estimate and the square root of its variance
N (1 - p) / p with N estimated. It is unbiased when a callsite allocates one
size; a callsite of mixed sizes below I is underestimated (1/p is convex),
by less than the spread of its sizes makes 1/p vary.

Profiles without real sizes (written before the column) fall back on the
method of moments from n and B alone, assuming one size per callsite:

* m = B/n >= I * e/(e-1): the samples are of allocations of at least I bytes,
  each recorded exactly: the estimate is n, with no error.
* I <= m < I * e/(e-1): allocations of s < I, for which the mean number of
  crossings of a sample is E[k | k >= 1] = x / (1 - e^-x) with x = s/I.
  Solving x/(1-e^-x) = m/I gives x, and the estimate is N = n / (1 - e^-x)
  (= B/s). When no sample crossed twice (m = I) x is taken as ~1/(2n).
  The standard error then adds the error of x (delta method: the variance of
  k given k >= 1 is mu (1 + x - mu), mu = x/(1-e^-x)), which for allocations
  much smaller than I is the larger part: few samples cross twice.

At interval 1 every allocation is a sample: the estimate is n, exact. Rows
of fewer than I sampled bytes per sample cannot come from the sampler at
interval I (they come from interval 1, or other tools): they are taken as exact.

May import: heapscope.records, heapscope.store.reader (the reader only in functions: the views and exports import
this module).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from heapscope.records import TupleRecord

if TYPE_CHECKING:
    from heapscope.model import CallsiteId
    from heapscope.store.reader import ViewValues

#: m/I at or above which the samples are of allocations of at least I bytes.
LARGE_RATIO = math.e / (math.e - 1.0)


def bytes_stderr(interval: int, nbytes: float) -> float:
    """The standard error of a sampled byte figure of `nbytes` at `interval`: at most
    sqrt(interval x nbytes).

    An allocation of s < I bytes is recorded as k*I bytes, k the Poisson count of crossings
    (mean s/I): its sampled bytes have variance I*s, so a figure made of such allocations has
    variance I times its bytes; an allocation of at least I bytes is recorded exactly and adds
    none. 0 at interval 1 (every allocation recorded).
    """
    return math.sqrt(interval * nbytes) if interval > 1 and nbytes > 0 else 0.0


class Estimate(TupleRecord):
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


def estimate_count(samples: int, sampled_bytes: int, interval: int, real_bytes: int | None = None) -> Estimate:
    """The number of allocations behind `samples` samples of `sampled_bytes` (of `real_bytes`
    real bytes, when known) at `interval`.

    Negative inputs (freed rows of a delta) are estimated by their magnitude
    and keep their sign.
    """
    if samples == 0:
        return Estimate(0.0, 0.0)
    if samples < 0:
        e = estimate_count(-samples, abs(sampled_bytes), interval, None if real_bytes is None else abs(real_bytes))
        return Estimate(-e.value, e.stderr)
    if interval <= 1:
        return Estimate(float(samples), 0.0)
    if real_bytes is not None and real_bytes > 0:
        x = real_bytes / samples / interval
        if x >= 1.0:
            return Estimate(float(samples), 0.0)
        p = -math.expm1(-x)
        return Estimate(samples / p, math.sqrt(samples * (1.0 - p)) / p)
    r = abs(sampled_bytes) / (samples * interval)
    if r < 1.0 or r >= LARGE_RATIO:  # under I per sample no sampler records: taken as exact
        return Estimate(float(samples), 0.0)
    x = _ratio_to_x(max(r, 1.0 + 0.25 / samples))  # m = I: no double crossing seen (module doc)
    p = -math.expm1(-x)
    n_hat = samples / p
    mu = x / p
    var_k = max(mu * (1.0 + x - mu), 1e-12)
    # d/dx of x / (1 - e^-x); near 0 its series, where the difference cancels to 0 (a crafted
    # profile's 2^52 samples)
    df = (p - x * math.exp(-x)) / (p * p) if x > 1e-4 else 0.5 + x / 6.0
    var_x = var_k / samples / (df * df)
    dlog = math.exp(-x) / p  # -d/dx of log p(x)
    rel_var = (1.0 - p) / samples + dlog * dlog * var_x
    return Estimate(n_hat, n_hat * math.sqrt(rel_var))


def estimate_int(samples: int, sampled_bytes: int, interval: int, real_bytes: int | None = None) -> int:
    """estimate_count rounded to an integer, for views and exports that carry integers.

    Its value only, the same arithmetic without the error: the flamegraph estimates every
    callsite of every process at every dump."""
    if samples == 0:
        return 0
    if samples < 0:  # round() is symmetric, so the sign can come after
        return -estimate_int(-samples, abs(sampled_bytes), interval, None if real_bytes is None else abs(real_bytes))
    if interval <= 1:
        return samples
    if real_bytes is not None and real_bytes > 0:
        x = real_bytes / samples / interval
        return samples if x >= 1.0 else round(samples / -math.expm1(-x))
    return round(estimate_count(samples, sampled_bytes, interval, real_bytes).value)


def combine(estimates: list[Estimate]) -> Estimate:
    """The sum of independent estimates: values add, variances add."""
    return Estimate(sum(e.value for e in estimates), math.sqrt(sum(e.stderr * e.stderr for e in estimates)))


def desampled(values: ViewValues, interval: int) -> ViewValues:
    """`values` with the object views replaced by their estimates (the byte views need none)."""
    from heapscope.store.reader import ViewValues

    if interval <= 1:
        return values
    return ViewValues(values.space, estimate_int(values.objects, values.space, interval, values.real_space),
                      values.alloc_space,
                      estimate_int(values.alloc_objects, values.alloc_space, interval, values.alloc_real_space),
                      values.real_space, values.alloc_real_space)


def desampled_map(values: dict[CallsiteId, ViewValues], interval: int) -> dict[CallsiteId, ViewValues]:
    """desampled() of every callsite."""
    if interval <= 1:
        return values
    return {cs: desampled(v, interval) for cs, v in values.items()}


def desampled_view(values: dict[CallsiteId, ViewValues], view: str, interval: int) -> list[tuple[CallsiteId, int]]:
    """(callsite, its value of `view`) for every callsite, in order: desampled()'s, one view
    only (an exporter writing one view at a time estimated both object views of every callsite
    for each)."""
    if view == "objects" and interval > 1:
        return [(cs, estimate_int(v.objects, v.space, interval, v.real_space)) for cs, v in values.items()]
    if view == "alloc_objects" and interval > 1:
        return [(cs, estimate_int(v.alloc_objects, v.alloc_space, interval, v.alloc_real_space))
                for cs, v in values.items()]
    return [(cs, v.get(view)) for cs, v in values.items()]


def view_estimate(values: dict[CallsiteId, ViewValues], view: str, interval: int) -> Estimate:
    """The estimated number of allocations of an object view over `values`, with its standard error."""
    live = view == "objects"
    return combine([estimate_count(v.objects, v.space, interval, v.real_space) if live
                    else estimate_count(v.alloc_objects, v.alloc_space, interval, v.alloc_real_space)
                    for v in values.values()])


def add_values(a: ViewValues, b: ViewValues) -> ViewValues:
    """The sum of two callsites' values (a real size stays unknown if either is)."""
    from heapscope.store.reader import ViewValues

    def opt(x: int | None, y: int | None) -> int | None:
        return None if x is None or y is None else x + y

    return ViewValues(a.space + b.space, a.objects + b.objects, a.alloc_space + b.alloc_space,
                      a.alloc_objects + b.alloc_objects, opt(a.real_space, b.real_space),
                      opt(a.alloc_real_space, b.alloc_real_space))
