"""The address set's C unit test (addrset_test.c), run against client/addrset.c:
the filter in front of the set has no false negatives, alone and under threads
sharing one filter word; it is exact inside its span; keys of one bucket
(aliases, heap keys, sub-granule objects, crowds) keep its bit until the last
goes; a pinned range stays set; a fork child's reset empties it, the shards' first tables
(static storage) included."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.timeout(180)
def test_addrset_c_unit(c_unit: Callable[[str, str], str]) -> None:
    c_unit("addrset_test.c", "addrset.c")
