"""Ground truth for the Python peak comparison (docs/python-frames.md section 7): the
script's own code holds COUNT bytes objects of SIZE bytes (it prints their sys.getsizeof sum)
and imports modules that `memray run` has imported before any script starts (asyncio, logging,
decimal, typing: memray 1.20's imports of rich, textual and jinja2 bring them in). At interval 1
heapscope and `memray run --trace-python-allocators` agree on the script's own bytes; heapscope's
whole peak also holds the interpreter's start-up and these imports, memray's holds neither.

    heapscope record -i 1 -o hs.db -- python pyimports.py 32 65536
    python -m memray run --trace-python-allocators -o mr.bin pyimports.py 32 65536
    python peak_split.py --script pyimports.py --heapscope hs.db --memray mr.bin

Usage: python pyimports.py COUNT SIZE
"""

import asyncio  # noqa: F401
import decimal  # noqa: F401
import logging  # noqa: F401
import sys
import typing  # noqa: F401


def main() -> int:
    count, size = int(sys.argv[1]), int(sys.argv[2])
    held = [b"x" * size for _ in range(count)]
    print(sum(sys.getsizeof(b) for b in held))
    return 0


if __name__ == "__main__":
    sys.exit(main())
