"""A multiprocessing `spawn` worker with known allocations (tests/integration/test_python.py).

The worker is a fresh interpreter (exec), so the preloaded client profiles
it as a process of its own: N bytearrays of SIZE bytes in `work`, kept until
the worker leaves with os._exit.
"""

import multiprocessing
import os

N = 300
SIZE = 1700


def work(q):
    keep = []
    for _ in range(N):
        keep.append(bytearray(SIZE))  # ALLOC work
    q.put(len(keep))
    q.close()
    q.join_thread()
    os._exit(0)


if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(q,))
    p.start()
    assert q.get(timeout=60) == N
    p.join(60)
