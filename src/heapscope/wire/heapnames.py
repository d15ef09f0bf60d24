"""The heaps heapscope names itself: wire.h's HS_MALLOC_HEAP_NAME, HS_PY_HEAP_NAME, the mmap and
brk heaps' (HS_MMAP_HEAP_*, HS_BRK_HEAP_*) and HS_ALL_HEAPS_NAME, mirrored here once for every
Python reader (model, heaps, codec), and checked against the C compiler's view by
tests/unit/wire/test_wire.py. No imports: the
model and the start of `record` read it.
"""

from __future__ import annotations

MALLOC_HEAP_ID = 1  # wire.h HS_MALLOC_HEAP_ID: the C library's malloc family
MALLOC_HEAP_NAME = "libc.malloc"  # wire.h HS_MALLOC_HEAP_NAME
PY_HEAP_NAME = "python.pymalloc"  # wire.h HS_PY_HEAP_NAME: Python's MEM and OBJ domains (client/pymem.c)
MMAP_HEAP_ID = 113  # wire.h HS_MMAP_HEAP_ID: the program's own mmap and mremap (client/maps.c)
MMAP_HEAP_NAME = "mmap"  # wire.h HS_MMAP_HEAP_NAME
BRK_HEAP_ID = 114  # wire.h HS_BRK_HEAP_ID: the program's own brk and sbrk (client/maps.c)
BRK_HEAP_NAME = "brk"  # wire.h HS_BRK_HEAP_NAME
#: The heaps of the memory malloc never sees, by id (docs/mmap-heaps.md).
MAP_HEAPS = {MMAP_HEAP_ID: MMAP_HEAP_NAME, BRK_HEAP_ID: BRK_HEAP_NAME}
ALL_HEAPS_NAME = "all"  # wire.h HS_ALL_HEAPS_NAME: `--heap all`, never a heap's own name
#: What a custom heap may not be called (client/heaps.c and heaps.py refuse these).
RESERVED = frozenset({MALLOC_HEAP_NAME, PY_HEAP_NAME, MMAP_HEAP_NAME, BRK_HEAP_NAME, ALL_HEAPS_NAME})
