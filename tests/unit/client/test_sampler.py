"""The sampler's C unit test (sampler_test.c), run against client/sampler.c."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.timeout(120)
def test_sampler_c_unit(c_unit: Callable[[str, str], str]) -> None:
    c_unit("sampler_test.c", "sampler.c")
