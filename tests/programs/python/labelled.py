"""Allocation labels from Python: work per tenant on threads and in asyncio tasks that
interleave on one thread, with known sizes. --print-truth prints, per tenant, the bytes its
bytearrays hold (allocated under its label)."""

import asyncio
import sys
import threading

import heapscope

SIZES = {"acme": 100_000, "globex": 300_000, "initech": 700_000}
THREADS_EACH, STEPS = 3, 5
kept = []


def work(tenant: str) -> None:
    with heapscope.label(tenant=tenant):
        kept.append(bytearray(SIZES[tenant]))


async def task(tenant: str) -> None:
    with heapscope.label(tenant=tenant, kind="async"):
        for _ in range(STEPS):
            await asyncio.sleep(0)  # the other tenants' tasks run here, on this thread
            kept.append(bytearray(SIZES[tenant]))


@heapscope.label(tenant="initech")
def decorated() -> None:
    kept.append(bytearray(SIZES["initech"]))


async def main() -> None:
    await asyncio.gather(*(task(t) for t in SIZES))


if __name__ == "__main__":
    if sys.argv[1:] == ["--print-truth"]:
        for t, size in SIZES.items():
            print("tenant", t, size * (THREADS_EACH + STEPS + (t == "initech")))
        sys.exit(0)
    threads = [threading.Thread(target=work, args=(t,)) for t in SIZES for _ in range(THREADS_EACH)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    asyncio.run(main())
    decorated()
    kept.append(bytearray(50_000))  # unlabelled
