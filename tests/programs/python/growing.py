"""A Python program that grows to a known size, says so, and waits (tests/integration/test_live.py).

argv: CTL (a FIFO), MIB. Makes MIB MiB of small bytes objects (200 bytes of data each:
pymalloc's, in Python's heap) and as much again of 64 KiB bytearrays (malloc's, through
pymalloc's fall-through), all kept; prints `grown BYTES` (the bytes requested, both halves),
then waits for a line on CTL and leaves with os._exit(0), still holding them.
"""

from __future__ import annotations

import os
import sys

SMALL = 200
BIG = 64 * 1024


def grow_small(total: int) -> list[bytes]:
    keep: list[bytes] = []
    for _ in range(total // (33 + SMALL)):  # a bytes object is 33 bytes of header + its data
        keep.append(bytes(SMALL))
    return keep


def grow_big(total: int) -> list[bytearray]:
    return [bytearray(BIG) for _ in range(total // BIG)]


def main() -> None:
    ctl, mib = sys.argv[1], int(sys.argv[2])
    total = mib << 20
    kept = [grow_small(total), grow_big(total)]
    print("grown", 2 * total, flush=True)
    with open(ctl) as f:
        f.readline()
    sys.stdout.flush()
    del kept
    os._exit(0)


main()
