"""Which dumps a flamegraph's timeline carries when a process has more than the cap."""

from __future__ import annotations

from itertools import pairwise

from heapscope.view.flamegraph import kept_dumps


def test_every_dump_kept_within_the_cap_or_without_one() -> None:
    assert kept_dumps(5, 5) == [0, 1, 2, 3, 4]
    assert kept_dumps(5, 0) == [0, 1, 2, 3, 4]
    assert kept_dumps(0, 3) == []


def test_past_the_cap_evenly_spread_from_the_first_to_the_last() -> None:
    assert kept_dumps(9, 3) == [0, 4, 8]
    kept = kept_dumps(86_400, 100)  # a day of dumps every second
    assert len(kept) == 100 and kept[0] == 0 and kept[-1] == 86_399
    gaps = {b - a for a, b in pairwise(kept)}
    assert max(gaps) - min(gaps) <= 1


def test_the_dump_asked_for_and_the_end_are_kept_whatever_the_cap() -> None:
    assert kept_dumps(9, 3, chosen=5) == [0, 4, 5, 8]
    assert kept_dumps(9, 1) == [8]
    assert kept_dumps(9, 1, chosen=0) == [0, 8]
