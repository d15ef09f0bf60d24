"""C only: the LD_PRELOAD client (libheapscope.so) that runs inside the target.

It interposes the malloc family, samples allocations per thread, unwinds in
the target, interns stacks, and writes wire records (heapscope/wire/wire.h)
into the ring the producer shares with it. Nothing in here is imported from
Python; the package only ships the built library in this folder.

May import: nothing of heapscope (no Python here).
"""
