"""Run by test_pyframes.py: calls the probe's walk from functions whose code
objects are made and dropped one after another (CodeType.replace with a new
name and first line), so that a new code object often lands where the last
one was, in a frame at the same place running the same instruction. The
probe checks the sampler's walk (with its memo) against the plain walk and
the code keys (pyframes_probe.c, probe_walk); prints how many code objects
took the address of the one before, and how many walks disagreed.

Usage: python pyframes_recycle.py PROBE_LIB
"""

from __future__ import annotations

import ctypes
import sys
import types

p = ctypes.CDLL(sys.argv[1])
p.probe_detect()
p.probe_walk.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
buf = ctypes.create_string_buffer(1 << 16)


def target() -> int:
    return int(p.probe_walk(buf, len(buf)))


def run(rounds: int) -> tuple[int, int]:
    same = bad = 0
    last = None
    for i in range(rounds):
        if sys.version_info >= (3, 11):
            code = target.__code__.replace(co_name=f"t{i}", co_qualname=f"t{i}", co_firstlineno=1000 + i)
        else:
            code = target.__code__.replace(co_name=f"t{i}", co_firstlineno=1000 + i)
        fn = types.FunctionType(code, globals())
        same += id(code) == last
        last = id(code)
        bad += fn() < 0
        del fn, code
    return same, bad


print(*run(300))
