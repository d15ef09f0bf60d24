"""The rows the heap tracker hands to Python, declared once each.

Each `struct.Struct` mirrors one struct of bookkeeping/tracker.h field for
field (little-endian u64/i64, no padding), in `ROWS` by its C name with its
field names; tests/unit/bookkeeping/test_rows.py checks sizes and offsets
against the compiler, as tests/unit/wire/test_wire.py does for wire.h.
"""

from __future__ import annotations

import struct

from heapscope.model import LIFETIME_BOUNDS as LIFETIME_BOUNDS

DUMP_ROW = struct.Struct("<Qqqq")  # what changed at one callsite since the previous dump
PEAK_ROW = struct.Struct("<7Q")  # one callsite at the process's peak, cumulative
WINDOW_ROW = struct.Struct("<2Q4qQ")  # one bucket's change since a peak window began
TOTALS_ROW = struct.Struct("<8Q")  # one bucket of totals now
LIVE_ROW = struct.Struct("<5Q")  # one live sampled allocation
STREAM_ROW = struct.Struct("<7Q")  # one op as applied (--stream-allocations)
THREAD_ROW = struct.Struct("<9Q")  # one (stack, thread) pair's totals now (Tracker(threads=True))
SERIES_ROW = struct.Struct("<4Q")  # one point of a heap's memory over time (tracker_series.h)
SAMPLE_ROW = struct.Struct("<6Q")  # one kept sample with its malloc's and free's times
NOT_FREED = 2**64 - 1  # SAMPLE_ROW's free_ts of a live sample (HS_NOT_FREED)
LABEL_DUMP_ROW = struct.Struct("<QQqqq")  # what changed at one (callsite, label set) since the previous label dump
LABEL_PEAK_ROW = struct.Struct("<8Q")  # one (callsite, label set) at the process's peak, cumulative
LIFETIME_ROW = struct.Struct("<6Q")  # one lifetime or size bucket of one callsite, cumulative

ROWS: dict[str, tuple[struct.Struct, tuple[str, ...]]] = {
    "hs_dump_row": (DUMP_ROW, ("callsite_id", "count", "size", "real_size")),
    "hs_peak_row": (PEAK_ROW, ("callsite_id", "count", "size", "alloc_count", "alloc_size", "real_size",
                                 "alloc_real_size")),
    "hs_window_row": (WINDOW_ROW, ("callsite_id", "stack_id", "peak_size", "peak_count", "end_size", "end_count",
                                   "alloc_size")),
    "hs_totals_row": (TOTALS_ROW, ("callsite_id", "stack_id", "alloc_bytes", "free_bytes", "alloc_count",
                                   "free_count", "alloc_real", "free_real")),
    "hs_live_row": (LIVE_ROW, ("addr", "sample_size", "alloc_size", "stack_id", "seq")),
    "hs_stream_row": (STREAM_ROW, ("kind", "seq", "addr", "alloc_size", "sample_size", "stack_id", "ts")),
    "hs_thread_row": (THREAD_ROW, ("callsite_id", "stack_id", "tid", "alloc_bytes", "free_bytes", "alloc_count",
                                   "free_count", "alloc_real", "free_real")),
    "hs_series_row": (SERIES_ROW, ("ts", "unreleased", "end", "allocated")),
    "hs_sample_row": (SAMPLE_ROW, ("callsite_id", "stack_id", "alloc_ts", "free_ts", "size", "weight")),
    "hs_label_dump_row": (LABEL_DUMP_ROW, ("callsite_id", "label_set", "count", "size", "real_size")),
    "hs_label_peak_row": (LABEL_PEAK_ROW, ("callsite_id", "label_set", "count", "size", "alloc_count",
                                           "alloc_size", "real_size", "alloc_real_size")),
    "hs_lifetime_row": (LIFETIME_ROW, ("callsite_id", "kind", "bucket", "count", "size", "real_size")),
}



def unpack_rows(row: struct.Struct, data: bytes) -> tuple[int, ...]:
    """Every row of `data` (rows of `row`, back to back) in one flat tuple of their values."""
    n, rest = divmod(len(data), row.size)
    if rest:
        raise ValueError(f"{len(data)} bytes are not rows of {row.size}")
    fmt = row.format
    return struct.unpack(fmt[0] + fmt[1:] * n, data) if n else ()


OP_MALLOC, OP_FREE = 1, 2  # hs_stream_row.kind (HS_OP_MALLOC, HS_OP_FREE)
# hs_lifetime_row.kind (tracker_lifetime.h HS_LT_*): freed (bucket of its lifetime), still held (of
# its age), freed without a lifetime, every sample by size, heaptrack's temporary.
LT_FREED, LT_HELD, LT_UNKNOWN, LT_SIZE, LT_HEAPTRACK = 1, 2, 3, 4, 5
# Lifetime buckets: heapscope.model.LIFETIME_BOUNDS (test_rows checks them against the C). Size
# bucket b holds sizes [2^b, 2^(b+1)), 0 and 1 in 0.
