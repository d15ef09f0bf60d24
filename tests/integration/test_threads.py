"""Eight threads free each other's blocks and reuse each other's addresses."""

from __future__ import annotations

import pytest
from hs_integration import Programs, Recorder, assert_exact


@pytest.mark.timeout(180)
def test_threads_hand_off_exact_per_thread_function(programs: Programs, record: Recorder) -> None:
    rec = record([programs.path("threads")], interval=1, timeout=150)
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    upid = profile.only_upid("threads")
    truth = programs.truth("threads")
    assert_exact(profile, upid, truth, context=rec.describe())

    total = sum(v.alloc_space for v in truth.values())
    got = sum(profile.views_of(upid, fn).alloc_space for fn in truth)
    assert got == total


@pytest.mark.timeout(180)
def test_threads_no_callsite_goes_negative(programs: Programs, record: Recorder) -> None:
    """A free applied before its malloc (or to the wrong reuse of an address) shows up
    as a callsite with negative space."""
    rec = record([programs.path("threads")], interval=1, timeout=150)
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    upid = profile.only_upid("threads")
    negative = {cs: v for cs, v in profile.callsite_views(upid).items() if v.space < 0 or v.objects < 0}
    assert not negative, f"{negative}\n{profile.describe_process(upid)}"
