"""store.tree: the callsite table's rows taken as read when `record` wrote them so (its C
loop, _callsites.c), else left to the checked conversions; a chain deeper than any stack is
damage either way."""

from __future__ import annotations

import pytest

from heapscope.store._callsites import plain_rows
from heapscope.store.tree import MAX_CALLSITE_DEPTH, plain_callsites
from heapscope.store.values import BadValue


def test_plain_rows_give_the_tree_and_its_depth() -> None:
    # 1 ─ 2 ─ 3, 4 under 1, and 9 under 7, which is not a row (a dangling parent: a root)
    rows: list[tuple[object, ...]] = [(1, None, 10), (2, 1, 11), (3, 2, 12), (4, 1, 13), (9, 7, 14)]
    assert plain_rows(rows) == ({1: (None, 10), 2: (1, 11), 3: (2, 12), 4: (1, 13), 9: (7, 14)}, 2)
    assert plain_rows([]) == ({}, -1)
    # ids far apart, or below 0, as well as ids numbered from 1
    far: list[tuple[object, ...]] = [(1, None, 1), (10**12, 1, 2), (10**12 + 1, 10**12, 3)]
    assert plain_rows(far) == ({1: (None, 1), 10**12: (1, 2), 10**12 + 1: (10**12, 3)}, 2)
    assert plain_rows([(-5, None, 1), (-2, -5, 2), (3, -2, 3)]) == ({-5: (None, 1), -2: (-5, 2), 3: (-2, 3)}, 2)
    assert plain_callsites([]) == {}


@pytest.mark.parametrize("row", [
    (2, 2, 10),  # its own parent
    (2, 3, 10),  # a parent after it
    ("2", 1, 10), (2, "1", 10), (2, 1, "10"),  # text where an integer belongs
    (True, None, 10), (2, 1, 10.0),  # a bool, a float
    (2, 1),  # not a row of three
])
def test_a_row_not_as_record_writes_them_is_left_to_the_checks(row: tuple[object, ...]) -> None:
    assert plain_rows([(1, None, 10), row]) is None
    assert plain_callsites([(1, None, 10), row]) is None


def test_a_chain_deeper_than_any_stack_is_damage() -> None:
    rows: list[tuple[object, ...]] = [(1, None, 1)] + [(i, i - 1, 1) for i in range(2, MAX_CALLSITE_DEPTH + 2)]
    got = plain_rows(rows[:-1])
    assert got is not None and got[1] == MAX_CALLSITE_DEPTH - 1
    assert len(plain_callsites(rows[:-1]) or {}) == MAX_CALLSITE_DEPTH
    with pytest.raises(BadValue, match="frames deep"):
        plain_callsites(rows)
