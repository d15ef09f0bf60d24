"""The label dimension of the heap tracker (bookkeeping/tracker_labels.c): labelled mallocs
booked per (callsite, label set) beside the callsite totals, frees taken back from the set
that allocated, the peak per set, and nothing at all for a process that sets no labels."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from heapscope.bookkeeping.rows import DUMP_ROW, LABEL_DUMP_ROW, LABEL_PEAK_ROW

pytestmark = pytest.mark.timeout(60)

S1, S2 = 0x1111, 0x2222
A, B, C = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000
NOW = 1_000_000_000
ACME, GLOBEX = 1, 2


def label_rows(t: Any) -> list[tuple[int, ...]]:
    return sorted(LABEL_DUMP_ROW.iter_unpack(t.label_dump()))


def malloc(t: Any, seq: int, addr: int, size: int, stack: int, label: int = 0) -> None:
    t.malloc(seq, addr, size, size, stack, seq, NOW, 0, label)


def test_rows_per_label_set_and_frees_back_to_their_set(native_mod: ModuleType) -> None:
    t = native_mod.Tracker()
    malloc(t, 1, A, 100, S1, ACME)
    malloc(t, 2, B, 300, S1, GLOBEX)
    malloc(t, 3, C, 7, S1)  # no labels: in the callsite's rows only
    t.free(4, A, NOW)
    t.set_callsite(S1, 5)
    # The seed's rows as without labels: the sum over everything.
    assert sorted(DUMP_ROW.iter_unpack(t.dump())) == [(5, -1, -100, -100), (5, 3, 407, 407)]
    assert label_rows(t) == [(5, ACME, -1, -100, -100), (5, ACME, 1, 100, 100), (5, GLOBEX, 1, 300, 300)]
    assert label_rows(t) == []  # dumped: nothing changed since
    t.free(5, B, NOW)
    assert label_rows(t) == [(5, GLOBEX, -1, -300, -300)]


def test_an_address_reused_under_another_set_is_freed_from_the_first(native_mod: ModuleType) -> None:
    t = native_mod.Tracker()
    malloc(t, 1, A, 100, S1, ACME)
    malloc(t, 2, A, 50, S2, GLOBEX)  # its free was never seen: an implicit free of ACME's block
    t.set_callsite(S1, 5)
    t.set_callsite(S2, 6)
    assert label_rows(t) == [(5, ACME, -1, -100, -100), (5, ACME, 1, 100, 100), (6, GLOBEX, 1, 50, 50)]
    assert t.stats()["implicit_frees"] == 1


def test_ops_out_of_order_book_in_sequence_order(native_mod: ModuleType) -> None:
    t = native_mod.Tracker()
    t.free(2, A, NOW)  # arrives before its malloc
    malloc(t, 1, A, 64, S1, ACME)
    t.set_callsite(S1, 5)
    assert label_rows(t) == [(5, ACME, -1, -64, -64), (5, ACME, 1, 64, 64)]


def test_the_peak_per_label_set(native_mod: ModuleType) -> None:
    t = native_mod.Tracker()
    malloc(t, 1, A, 100, S1, ACME)
    malloc(t, 2, B, 300, S2, GLOBEX)  # the peak: 400
    t.free(3, B, NOW)
    malloc(t, 4, C, 50, S1, ACME)
    t.set_callsite(S1, 5)
    t.set_callsite(S2, 6)
    peak = sorted(LABEL_PEAK_ROW.iter_unpack(t.label_peak()))
    # (callsite, set, count, size, alloc_count, alloc_size, real, alloc_real) at the peak.
    assert peak == [(5, ACME, 1, 100, 1, 100, 100, 100), (6, GLOBEX, 1, 300, 1, 300, 300, 300)]


def test_a_stack_without_callsite_waits_for_a_later_dump(native_mod: ModuleType) -> None:
    t = native_mod.Tracker()
    malloc(t, 1, A, 100, S1, ACME)
    assert label_rows(t) == []
    t.set_callsite(S1, 5)
    assert label_rows(t) == [(5, ACME, 1, 100, 100)]


def test_no_labels_no_rows(native_mod: ModuleType) -> None:
    t = native_mod.Tracker()
    malloc(t, 1, A, 100, S1)
    t.free(2, A, NOW)
    t.set_callsite(S1, 5)
    assert t.label_dump() == b"" and t.label_peak() == b""
