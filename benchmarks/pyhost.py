"""A Python host for the native synthetic workload, so memray (which profiles Python
processes) can be measured on the same allocations: loads alloc_bench as a shared
library with ctypes and calls bench_run(threads, total_ops, -1).

Usage: python pyhost.py LIBRARY THREADS TOTAL_OPS
"""

import ctypes
import sys


def main() -> int:
    lib = ctypes.CDLL(sys.argv[1])
    lib.bench_run.restype = ctypes.c_uint64
    lib.bench_run.argtypes = (ctypes.c_int, ctypes.c_long, ctypes.c_long)
    work = int(sys.argv[4]) if len(sys.argv) > 4 else -1
    print("checksum", lib.bench_run(int(sys.argv[2]), int(sys.argv[3]), work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
