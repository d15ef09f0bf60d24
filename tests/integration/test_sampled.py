"""At the default interval (4096) the Poisson byte sampler stays within its error bound.

For a path of N allocations of s < I bytes each, the estimated bytes have standard
deviation about sqrt(I * bytes) and the number of samples is Binomial(N, p) with
p = 1 - exp(-s / I). A fixed --seed makes the run deterministic; the bound is 4 SD.
Allocations of at least I bytes are recorded exactly, count included.
"""

from __future__ import annotations

import math

import pytest
from hs_integration import Programs, Recorder, Views

INTERVAL = 4096


def _bytes_ok(got: int, truth: int) -> tuple[bool, float]:
    sd = math.sqrt(INTERVAL * truth)
    return abs(got - truth) <= 4 * sd, sd


def _count_ok(got: int, n: int, size: int) -> tuple[bool, float, float]:
    p = 1 - math.exp(-size / INTERVAL)
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return abs(got - mean) <= 4 * sd, mean, sd


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", [1, 20240601])
def test_default_interval_within_four_sd(programs: Programs, record: Recorder, seed: int) -> None:
    rec = record([programs.path("sampled")], interval=INTERVAL, seed=seed, timeout=150)
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    upid = profile.only_upid("sampled")
    truth = programs.truth("sampled")
    problems = []
    for fn, t in truth.items():
        got: Views = profile.views_of(upid, fn)
        size = t.alloc_space // t.alloc_objects  # every path allocates one size
        if size >= INTERVAL:
            if got != t:
                problems.append(f"{fn} ({size} B >= interval, must be exact): expected {t}, got {got}")
            continue
        for view, true_bytes in (("alloc_space", t.alloc_space), ("space", t.space)):
            ok, sd = _bytes_ok(getattr(got, view), true_bytes)
            if not ok:
                problems.append(
                    f"{fn}: {view} {getattr(got, view)} vs truth {true_bytes}: off by "
                    f"{(getattr(got, view) - true_bytes) / sd:+.1f} SD (SD {sd:.0f})"
                )
        for view, n in (("alloc_objects", t.alloc_objects), ("objects", t.objects)):
            ok, mean, sd = _count_ok(getattr(got, view), n, size)
            if not ok:
                problems.append(
                    f"{fn}: {view} {getattr(got, view)} samples, expected about {mean:.0f} "
                    f"(SD {sd:.0f}; counts are numbers of samples, not scaled)"
                )
        # Each sample of a small allocation is credited a whole number of intervals.
        if got.alloc_space % INTERVAL != 0:
            problems.append(f"{fn}: alloc_space {got.alloc_space} is not a multiple of {INTERVAL}")
    assert not problems, "\n".join([*problems, profile.describe_process(upid)])


@pytest.mark.timeout(180)
def test_fixed_seed_is_deterministic(programs: Programs, record: Recorder) -> None:
    """Single-threaded target, same seed: the same samples twice."""
    first = record([programs.path("sampled")], interval=INTERVAL, seed=99, timeout=150)
    second = record([programs.path("sampled")], interval=INTERVAL, seed=99, timeout=150)
    assert first.returncode == 0 and second.returncode == 0, first.describe() + second.describe()
    a, b = first.profile(), second.profile()
    ua, ub = a.only_upid("sampled"), b.only_upid("sampled")
    for fn in programs.truth("sampled"):
        assert a.views_of(ua, fn) == b.views_of(ub, fn), fn


@pytest.mark.timeout(300)
def test_unwinding_time_is_not_the_first_unwind_counted_64_times(programs: Programs, record: Recorder) -> None:
    """The client times 1 unwind in 64 and scales it. Timing each thread's first (the coldest:
    its unwind tables read for the first time) made a run of a few samples report ~64 of them;
    with a random phase per thread, a run of one or two samples is rarely timed at all."""
    timed, runs = 0, 0
    for seed in range(1, 9):
        rec = record([programs.path("tiny")], interval=65536, seed=seed, timeout=60)
        assert rec.returncode == 0, rec.describe()
        stats = rec.profile().stats()
        if not 0 < stats["heap_samples"] <= 3:
            continue
        runs += 1
        timed += stats["total_unwinding_time_us"] > 0
    assert runs >= 5, f"only {runs} of 8 seeds sampled 1-3 allocations of tiny"
    assert timed <= 2, f"{timed} of {runs} runs of 1-3 samples reported unwinding time"
