"""A Python target whose two heaps peak at different moments (tests/integration/test_python_heaps.py).

  phase 1  native()  malloc(64 KiB) x 128 through ctypes (8 MiB in libc.malloc),
                     all freed again
  phase 2  small()   bytes(200) x 40000 (PyObject_Malloc(233) each, 8.9 MiB in
                     python.pymalloc), held to the end

So libc.malloc's own peak is in phase 1 and python.pymalloc's in phase 2: the
sum of the two own peaks is 8 MiB more than the program ever held at once
(about 9 MiB plus the interpreter's own, in phase 2). `--print-truth` prints
{function: [count, request size, kept, heap]} as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

NATIVE_N, NATIVE_SIZE = 128, 64 * 1024
SMALL_N = 40000
BYTES_HEADER = 33  # offsetof(PyBytesObject, ob_sval) + 1 on 64-bit 3.8-3.13
KEEP: list[object] = []
LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]
LIBC.free.restype = None
LIBC.free.argtypes = [ctypes.c_void_p]


def native() -> None:
    blocks = [0] * NATIVE_N
    malloc, free = LIBC.malloc, LIBC.free
    for i in range(NATIVE_N):
        blocks[i] = malloc(NATIVE_SIZE)  # ALLOC native
    for b in blocks:
        free(b)


def small() -> None:
    keep: list[object] = [None] * SMALL_N
    for i in range(SMALL_N):
        keep[i] = bytes(200)  # ALLOC small
    KEEP.append(keep)


def main() -> None:
    if "--print-truth" in sys.argv:
        print(json.dumps({
            "native": [NATIVE_N, NATIVE_SIZE, False, "libc.malloc"],
            "small": [SMALL_N, BYTES_HEADER + 200, True, "python.pymalloc"],
        }))
        return
    native()
    small()
    sys.stdout.flush()
    os._exit(0)  # no finalization: what KEEP holds is still held at the final dump


main()
