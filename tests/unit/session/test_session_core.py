"""RecordingOptions (session/core.py): what a recording is asked to do, checked before any target starts."""

from __future__ import annotations

import math
from typing import Any

import pytest

from heapscope.errors import UsageError
from heapscope.session import RecordingOptions


@pytest.mark.parametrize("kw", [
    {"duration": math.nan}, {"duration": math.inf}, {"duration": 0.0}, {"duration": -1.0},
    {"continuous_ms": -1}, {"continuous_ms": 2**62}, {"phase_ms": -5},
])
def test_recording_options_refuse_non_finite_and_out_of_range(kw: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        RecordingOptions(**kw)
