"""A Python target for `heapscope record -p PID` (tests/integration/test_python_attach.py).

Prints `ready`, then runs one command per line of stdin:
  wrap   waits (bounded, running bytecode) until the MEM and OBJ allocator
         domains are no longer the ones it found at start, i.e. the attach's
         pending call wrapped them; prints `wrapped 1` or `wrapped 0`
  small  makes N bytes objects of SMALL bytes in `small`, which pymalloc
         serves itself (33 + SMALL bytes each), kept; prints `ok small`
  big    makes N bytearrays of BIG bytes in `big` (each BIG + 1 bytes, past
         pymalloc's limit, so one malloc each), kept; prints `ok big`
  quit   leaves with os._exit(0)
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

N = 500
SMALL = 200
BIG = 2000
KEEP: list[object] = []


class Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p), ("calloc", ctypes.c_void_p),
                ("realloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


def allocators() -> list[tuple[object, object]]:
    out: list[tuple[object, object]] = []
    for domain in (1, 2):  # PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ
        a = Allocator()
        ctypes.pythonapi.PyMem_GetAllocator(domain, ctypes.byref(a))
        out.append((a.ctx, a.malloc))
    return out


def small() -> None:
    keep: list[object] = [None] * N
    for i in range(N):
        keep[i] = bytes(SMALL)  # ALLOC small
    KEEP.append(keep)


def big() -> None:
    keep: list[object] = [None] * N
    for i in range(N):
        keep[i] = bytearray(BIG)  # ALLOC big
    KEEP.append(keep)


def main() -> None:
    if "--print-truth" in sys.argv:
        print(f"{N} {33 + SMALL} {BIG + 1} {bytearray.__basicsize__}")
        return
    before = allocators()
    small()  # once before the attach: what a first call makes once (caches) is not in the truth
    big()
    KEEP.clear()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "wrap":
            deadline = time.monotonic() + 30
            while allocators() == before and time.monotonic() < deadline:
                pass  # bytecode runs: the main thread's eval loop takes pending calls here
            print("wrapped", int(allocators() != before), flush=True)
        elif cmd == "small":
            small()
            print("ok small", flush=True)
        elif cmd == "big":
            big()
            print("ok big", flush=True)
        elif cmd == "quit":
            sys.stdout.flush()
            os._exit(0)


main()
