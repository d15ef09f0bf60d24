"""A Python target for the heaps of a Python program (tests/integration/test_python_heaps.py).

Each function allocates N objects of a known request size through Python's
allocator domains, from a line marked `ALLOC <name>`:
  big     bytearray(3000): PyObject_Malloc(3001), which pymalloc passes on to
          malloc (over 512 bytes): booked once, in python.pymalloc
  small   bytes(200): PyObject_Malloc(33 + 200), served by pymalloc itself
  gone    bytearray(2000), freed again before the end
  native  malloc(7777) called through ctypes: libc.malloc only
  mixed   malloc(5555) through ctypes, freed through PyMem_Free (pymalloc's
          free passes a block it did not carve on to free()): libc.malloc,
          freed
At interval 1 each function's Python-heap bytes are exact, and the malloc
heap holds none of the first three. `--print-truth` prints
{function: [count, request size, kept, heap]} as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

N = 300
BYTES_HEADER = 33  # offsetof(PyBytesObject, ob_sval) + 1 on 64-bit 3.8-3.13
KEEP: list[object] = []
LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]


def big() -> None:
    keep: list[object] = [None] * N
    for i in range(N):
        keep[i] = bytearray(3000)  # ALLOC big
    KEEP.append(keep)


def small() -> None:
    keep: list[object] = [None] * N
    for i in range(N):
        keep[i] = bytes(200)  # ALLOC small
    KEEP.append(keep)


def gone() -> None:
    tmp: list[object] = [None] * N
    for i in range(N):
        tmp[i] = bytearray(2000)  # ALLOC gone
    del tmp


def native() -> None:
    keep = [0] * N
    malloc = LIBC.malloc
    for i in range(N):
        keep[i] = malloc(7777)  # ALLOC native
    KEEP.append(keep)


def mixed() -> None:
    keep = [0] * N
    malloc = LIBC.malloc
    for i in range(N):
        keep[i] = malloc(5555)  # ALLOC mixed
    free = ctypes.pythonapi.PyMem_Free
    free.restype = None
    free.argtypes = [ctypes.c_void_p]
    for p in keep:
        free(p)


def main() -> None:
    if "--print-truth" in sys.argv:
        print(json.dumps({
            "big": [N, 3001, True, "python.pymalloc"],
            "small": [N, BYTES_HEADER + 200, True, "python.pymalloc"],
            "gone": [N, 2001, False, "python.pymalloc"],
            "native": [N, 7777, True, "libc.malloc"],
            "mixed": [N, 5555, False, "libc.malloc"],
        }))
        return
    big()
    small()
    gone()
    native()
    mixed()
    sys.stdout.flush()
    os._exit(0)  # no finalization: what KEEP holds is still held at the final dump


main()
