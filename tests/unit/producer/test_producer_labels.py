"""The producer's label sets (producer/labels.py), the client played by the test through the
real shared ring (FakeClient of test_producer.py)."""

from __future__ import annotations

import pytest
import wire_support as ws
from test_producer import MODULE, FakeClient, _end, _rows

from heapscope.model import HEAP_NAME
from heapscope.producer.producer import Producer

pytestmark = pytest.mark.timeout(30)


def _sets(producer: Producer) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for i, k, v in _rows(producer, "SELECT label_set_id, key, value FROM heapscope_label ORDER BY label_set_id, key"):
        out.setdefault(i, []).append((k, v))
    return out


def test_a_set_whose_record_comes_after_a_dump_is_renamed(producer: Producer) -> None:
    # GIVEN samples of sets 3 and 4 dumped before either set's record came (a full ring dropped
    # them; the client sends them again), then set 3's record
    c = FakeClient(producer)
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_module(MODULE), ws.encode_stack(7, [0x401100]))
    c.send(ws.encode_malloc(1, 0x1000, 100, 100, 7, 10, label_set=3),
           ws.encode_malloc(2, 0x2000, 50, 50, 7, 11, label_set=4))
    producer.dump_all("signal")
    assert _sets(producer) == {3: [("heapscope.label_set", "3")], 4: [("heapscope.label_set", "4")]}
    c.send(ws.encode_labelset(3, (("tenant", "acme"), ("route", "/r0"))))
    # a dump with no label rows of its own names it already
    producer.dump_all("signal")
    assert _sets(producer) == {3: [("route", "/r0"), ("tenant", "acme")], 4: [("heapscope.label_set", "4")]}
    c.send(ws.encode_malloc(3, 0x3000, 20, 20, 7, 12, label_set=3))
    # WHEN the process ends
    _end(producer, c)
    # THEN set 3 has its pairs, set 4 keeps its id's name and is counted as a loss
    assert _sets(producer) == {3: [("route", "/r0"), ("tenant", "acme")], 4: [("heapscope.label_set", "4")]}
    stats = {n: (v, s) for n, v, s in _rows(producer, "SELECT name, value, severity FROM stats WHERE idx = 1")}
    assert stats["label_sets_unnamed"] == (1, "data_loss")
    sums = dict(_rows(producer, "SELECT label_set_id, SUM(size) FROM heapscope_label_allocation"
                                " GROUP BY label_set_id"))
    assert sums == {3: 120, 4: 50}
