"""The stack ids' C unit test (stacks_test.c), run against client/stacks.c: equal stacks give
equal ids, and stacks of one depth that differ in one frame (at every position, depths 1 to
131: every tail of the four hash lanes) never share an id."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.timeout(120)
def test_stack_ids_c_unit(c_unit: Callable[[str, str], str]) -> None:
    c_unit("stacks_test.c", "stacks.c")
