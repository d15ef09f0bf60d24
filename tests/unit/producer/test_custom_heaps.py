"""The producer's side of custom heaps (wire.h, "Custom heaps"), with the client
played by the test through the real shared ring (FakeClient of test_producer.py)."""

from __future__ import annotations

import pytest
import wire_support as ws
from test_producer import MODULE, FakeClient, _end, _rows

from heapscope.model import HEAP_NAME
from heapscope.producer.producer import Producer
from heapscope.wire import codec

pytestmark = pytest.mark.timeout(30)


def _heap_rows(producer: Producer) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for heap, count, size in _rows(producer, "SELECT heap_name, count, size FROM heap_profile_allocation"
                                             " ORDER BY heap_name, size"):
        out.setdefault(heap, []).append((count, size))
    return out


def test_each_heap_has_its_own_sequence_and_rows(producer: Producer) -> None:
    # GIVEN malloc seq 1..2 and a custom heap with its own seq 1..3, its free arriving
    # before the malloc it frees, at an address malloc also uses
    c = FakeClient(producer)
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_heap(2, 1, "my.arena"),
           ws.encode_module(MODULE), ws.encode_stack(7, [0x401100]), ws.encode_stack(8, [0x401300]))
    c.send(ws.encode_malloc(1, 0x1000, 100, 100, 7, 10),
           ws.encode_heap_free(2, 2, 0x1000),                      # frees heap seq 1
           ws.encode_heap_malloc(2, 1, 0x1000, 40, 40, 8, 11),
           ws.encode_heap_malloc(2, 3, 0x1040, 24, 24, 8, 12),
           ws.encode_malloc(2, 0x2000, 50, 50, 7, 13))
    # WHEN the process ends
    _end(producer, c)
    # THEN malloc keeps 0x1000 live, the arena freed its own 0x1000 only
    assert _heap_rows(producer) == {HEAP_NAME: [(2, 150)], "my.arena": [(-1, -40), (2, 64)]}
    peaks = dict(_rows(producer, "SELECT heap_name, SUM(size) FROM heapscope_peak_allocation GROUP BY heap_name"))
    assert peaks == {HEAP_NAME: 150, "my.arena": 40}  # 40 live after seq 1; 24 after seq 3
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    assert stats["custom_heap_samples"] == 2 and stats["custom_heap_frees"] == 1
    assert stats["custom_heap_sequence_gaps"] == 0 and stats["malformed_records"] == 0
    assert stats["heap_samples"] == 2


def test_records_of_unknown_or_bad_heaps_are_counted_not_booked(producer: Producer) -> None:
    # GIVEN a malloc on a heap never announced, a heap with a bad name, one with an id
    # past the limit, and the same name twice
    c = FakeClient(producer)
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_heap(2, 1, "bad name"),
           ws.encode_heap(2 + codec.MAX_CUSTOM_HEAPS, 1, "far.away"),
           ws.encode_heap(3, 1, "ok.heap"), ws.encode_heap(4, 1, "ok.heap"), ws.encode_stack(8, [0x401300]))
    c.send(ws.encode_heap_malloc(9, 1, 0x1000, 40, 40, 8, 11), ws.encode_heap_malloc(2, 1, 0x1000, 40, 40, 8, 11),
           ws.encode_heap_malloc(3, 1, 0x2000, 8, 8, 8, 12))
    # WHEN the process ends
    _end(producer, c)
    # THEN only ok.heap has rows; the rest is counted as malformed
    assert set(_heap_rows(producer)) == {"ok.heap"}
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    assert stats["malformed_records"] == 3 + 2


def test_a_heap_record_of_the_wrong_size_is_malformed(producer: Producer) -> None:
    c = FakeClient(producer)
    c.send(ws.encode_heap(2, 1, "my.arena"))
    short = codec.HEADER.pack(codec.header(32, codec.RecordType.HEAP_MALLOC)) + b"\1" * 24
    long = (codec.HEADER.pack(codec.header(48, codec.RecordType.HEAP_FREE)) + codec.HEAP_FREE.pack(1, 2, 0, 16, 0)
            + b"\0" * 8)
    c.send(short, long)
    _end(producer, c)
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    assert stats["malformed_records"] == 2
    assert _heap_rows(producer) == {}


def test_the_mapped_heaps_share_mallocs_peak_and_have_their_own_stats(producer: Producer) -> None:
    # GIVEN the client's mmap and brk heaps (fixed ids, their own sequences) beside malloc: malloc
    # peaks at 100 first, mmap's 4096 comes after malloc freed it, brk's 50 last; and a heap that
    # claims mmap's id under another name, and one that claims the name under a custom id
    c = FakeClient(producer)
    c.send(ws.encode_heap(1, 1, HEAP_NAME), ws.encode_heap(codec.MMAP_HEAP_ID, 1, "mmap"),
           ws.encode_heap(codec.BRK_HEAP_ID, 1, "brk"), ws.encode_heap(codec.MMAP_HEAP_ID + 10, 1, "mmap"),
           ws.encode_heap(2, 1, "brk"), ws.encode_module(MODULE), ws.encode_stack(7, [0x401100]))
    c.send(ws.encode_malloc(1, 0x1000, 100, 100, 7, 10), ws.encode_free(2, 0x1000),
           ws.encode_heap_malloc(codec.MMAP_HEAP_ID, 1, 0x7000, 4096, 4096, 7, 11),
           ws.encode_heap_malloc(codec.BRK_HEAP_ID, 1, 0x9000, 50, 50, 7, 12))
    # WHEN the process ends
    _end(producer, c)
    # THEN both are heaps of their own, and the process's one peak is their sum's (4146), each
    # heap's rows at that one moment
    rows = _heap_rows(producer)
    assert rows["mmap"] == [(1, 4096)] and rows["brk"] == [(1, 50)], rows
    peaks = dict(_rows(producer, "SELECT heap_name, SUM(size) FROM heapscope_peak_allocation GROUP BY heap_name"))
    assert peaks == {HEAP_NAME: 0, "mmap": 4096, "brk": 50}, peaks
    stats = dict(_rows(producer, "SELECT name, value FROM stats WHERE idx = 1"))
    assert stats["peak_heap_bytes"] == 4146
    assert stats["mmap_heap_samples"] == stats["brk_heap_samples"] == 1, stats
    assert "custom_heap_samples" not in stats  # they are not the program's custom heaps
    assert stats["malformed_records"] == 2  # the two impostors
