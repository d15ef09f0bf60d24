"""multiprocessing workers with known allocations, one per start method (tests/integration/test_python.py).

`python workers.py METHOD...` runs, for each start method named, one worker
process whose function `work_<method>` makes N bytearrays of a size of its
own (each one malloc of size + 1 bytes), kept until the worker leaves with
os._exit. The parent allocates nothing of those sizes. `--print-truth`
prints {function: [count, request size]} as JSON.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys

N = 300
SIZES = {"fork": 1700, "spawn": 1800, "forkserver": 1900}


def leave(keep: list[bytearray], q: multiprocessing.Queue[int]) -> None:
    q.put(len(keep))
    q.close()
    q.join_thread()
    os._exit(0)


def work_fork(q: multiprocessing.Queue[int]) -> None:
    keep: list[bytearray] = []
    for _ in range(N):
        keep.append(bytearray(SIZES["fork"]))  # ALLOC work_fork
    leave(keep, q)


def work_spawn(q: multiprocessing.Queue[int]) -> None:
    keep: list[bytearray] = []
    for _ in range(N):
        keep.append(bytearray(SIZES["spawn"]))  # ALLOC work_spawn
    leave(keep, q)


def work_forkserver(q: multiprocessing.Queue[int]) -> None:
    keep: list[bytearray] = []
    for _ in range(N):
        keep.append(bytearray(SIZES["forkserver"]))  # ALLOC work_forkserver
    leave(keep, q)


def main() -> None:
    if "--print-truth" in sys.argv:
        print(json.dumps({f"work_{m}": [N, s + 1] for m, s in SIZES.items()}))
        return
    for method in sys.argv[1:]:
        ctx = multiprocessing.get_context(method)
        q = ctx.Queue()
        # A str method gives a BaseContext to the type checker; every real context has Process.
        p = ctx.Process(target=globals()[f"work_{method}"], args=(q,))  # type: ignore[attr-defined]
        p.start()
        assert q.get(timeout=60) == N
        p.join(60)
        assert p.exitcode == 0, (method, p.exitcode)


if __name__ == "__main__":
    main()
