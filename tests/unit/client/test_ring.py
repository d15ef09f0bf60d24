"""The ring writer's C unit test (ring_test.c), run against client/ring.c: records come back
whole and in order across wraps, the sequence has no gap (dropped records and two writers
included), a full or nonsensical ring drops and counts, oversized records and a shutting-down
ring are refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.timeout(180)
def test_ring_c_unit(c_unit: Callable[[str, str], str]) -> None:
    c_unit("ring_test.c", "ring.c")
