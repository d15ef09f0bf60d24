"""A Python target for the reallocs of Python's allocator domains (tests/integration/test_python_heaps.py).

`grown` asks PyMem_Malloc for N blocks of 600 bytes (over pymalloc's 512: it
takes each from malloc); `shrunk` resizes each of them to 40 bytes with
PyMem_Realloc, from a line of its own. Such a block is not one pymalloc
carved, so pymalloc passes the resize on to realloc(): the client must book it
in python.pymalloc only, on its fast path too (a block not sampled resized
within the fast range), never a second time through the malloc hook. The
blocks are freed with PyMem_Free at the end of `shrunk`. Each allocation line
carries a marker comment `ALLOC <name>`.
"""

from __future__ import annotations

import ctypes

N = 2000
API = ctypes.pythonapi
API.PyMem_Malloc.restype = ctypes.c_void_p
API.PyMem_Malloc.argtypes = [ctypes.c_size_t]
API.PyMem_Realloc.restype = ctypes.c_void_p
API.PyMem_Realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
API.PyMem_Free.restype = None
API.PyMem_Free.argtypes = [ctypes.c_void_p]


def grown(keep: list[int]) -> None:
    malloc = API.PyMem_Malloc
    for i in range(N):
        keep[i] = malloc(600)  # ALLOC grown


def shrunk(keep: list[int]) -> None:
    realloc = API.PyMem_Realloc
    for i in range(N):
        keep[i] = realloc(keep[i], 40)  # ALLOC shrunk
    free = API.PyMem_Free
    for p in keep:
        free(p)


def main() -> None:
    keep = [0] * N
    grown(keep)
    shrunk(keep)


if __name__ == "__main__":
    main()
