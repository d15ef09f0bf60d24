"""A Python target with known allocations per Python function (tests/integration/test_python.py).

Each function makes N bytearrays of its own size S; a bytearray(S) asks the
allocator for S + 1 bytes, past pymalloc's 512-byte limit, so each one is one
malloc. The line of each allocation carries a marker comment `ALLOC <name>`,
which the test reads to know the line to expect. The program ends
with os._exit, so what it keeps is still held at the final dump. `small` makes N bytes objects of
200 bytes, which pymalloc serves itself (33 + 200 bytes each, never a malloc):
they are seen only through the wrapped allocator domains. `--print-truth`
prints {function: [count, request size, kept, through pymalloc]} as JSON.
"""

from __future__ import annotations

import array
import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterator

N = 400
SIZES = {"kept": 1000, "freed": 1100, "gen": 1200, "coro": 1300, "worker": 1400, "Holder.method": 1500}
SMALL = 200
BYTES_HEADER = 33  # offsetof(PyBytesObject, ob_sval) + 1, on 64-bit 3.8-3.13
KEEP: list[object] = []


def kept() -> None:
    for _ in range(N):
        KEEP.append(bytearray(SIZES["kept"]))  # ALLOC kept


def small() -> None:
    keep: list[object] = [None] * N
    for i in range(N):
        keep[i] = bytes(SMALL)  # ALLOC small
    KEEP.append(keep)


def freed() -> None:
    tmp = []
    for _ in range(N):
        tmp.append(bytearray(SIZES["freed"]))  # ALLOC freed
    del tmp


def gen() -> Iterator[bytearray]:
    for _ in range(N):
        yield bytearray(SIZES["gen"])  # ALLOC gen


def consume() -> None:
    KEEP.extend(gen())


async def coro() -> None:
    for _ in range(N):
        await asyncio.sleep(0)
        KEEP.append(bytearray(SIZES["coro"]))  # ALLOC coro


def worker() -> None:
    for _ in range(N):
        KEEP.append(bytearray(SIZES["worker"]))  # ALLOC worker


class Holder:
    def method(self) -> None:
        for _ in range(N):
            KEEP.append(bytearray(SIZES["Holder.method"]))  # ALLOC Holder.method


def extension() -> None:
    # array (a C extension module in most builds) allocates its buffer itself.
    data = bytes(50000)
    KEEP.append(array.array("B", data))  # ALLOC extension


def main() -> None:
    if "--print-truth" in sys.argv:
        truth = {name: [N, size + 1, name != "freed", False] for name, size in SIZES.items()}
        truth["small"] = [N, BYTES_HEADER + SMALL, True, True]
        print(json.dumps(truth))
        return
    kept()
    small()
    freed()
    consume()
    asyncio.run(coro())
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    Holder().method()
    extension()
    # Leave without finalization, which would free KEEP: the last dump then
    # holds every kept bytearray (space and objects are known too).
    sys.stdout.flush()
    os._exit(0)


main()
