"""The heaps heapscope names itself: wire.h's HS_MALLOC_HEAP_NAME, HS_PY_HEAP_NAME and
HS_ALL_HEAPS_NAME, mirrored here once for every Python reader (model, heaps, codec), and
checked against the C compiler's view by tests/unit/wire/test_wire.py. No imports: the
model and the start of `record` read it.
"""

from __future__ import annotations

MALLOC_HEAP_ID = 1  # wire.h HS_MALLOC_HEAP_ID: the C library's malloc family
MALLOC_HEAP_NAME = "libc.malloc"  # wire.h HS_MALLOC_HEAP_NAME
PY_HEAP_NAME = "python.pymalloc"  # wire.h HS_PY_HEAP_NAME: Python's MEM and OBJ domains (client/pymem.c)
ALL_HEAPS_NAME = "all"  # wire.h HS_ALL_HEAPS_NAME: `--heap all`, never a heap's own name
#: What a custom heap may not be called (client/heaps.c and heaps.py refuse these).
RESERVED = frozenset({MALLOC_HEAP_NAME, PY_HEAP_NAME, ALL_HEAPS_NAME})
