"""Run by each installed CPython with the probe library's path: walks its own
frames through pyframes_probe.c in many shapes of call chain and prints, for
test_pyframes.py, what the walker saw next to the sys._getframe() chain.

Must stay valid Python 3.8 (annotations postponed: 3.8 cannot subscript list at run time).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import sys
import threading
from collections.abc import Iterator
from types import CodeType, FrameType

probe = ctypes.CDLL(sys.argv[1])  # CDLL: the GIL is released during calls
probe.probe_walk.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
probe.probe_walk.restype = ctypes.c_int
probe.probe_status.restype = ctypes.c_char_p
probe.probe_detect_as.argtypes = [ctypes.c_ulong, ctypes.c_int]
BUF = ctypes.create_string_buffer(1 << 21)
results: dict[str, object] = {}


def qualname(code: CodeType) -> str:
    name: str = getattr(code, "co_qualname", code.co_name)
    return name


def chain(frame: FrameType | None) -> list[list[object]]:
    out: list[list[object]] = []
    while frame is not None:
        out.append([qualname(frame.f_code), frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return out


def capture(label: str) -> str:
    n = probe.probe_walk(BUF, len(BUF))
    expected = chain(sys._getframe())
    results[label] = {"n": n, "walk": BUF.value.decode("utf-8", "surrogateescape"), "expected": expected}
    return label


def c() -> str:
    return capture("nested")


def b() -> str:
    return c()


def a() -> str:
    return b()


class Klass:
    def method(self) -> str:
        return capture("method")

    @staticmethod
    def static() -> str:
        return capture("staticmethod")


def generator() -> Iterator[str]:
    yield capture("generator")


def outer_generator() -> Iterator[str]:
    yield from generator()


async def inner_coroutine() -> str:
    await asyncio.sleep(0)
    return capture("async")


async def coroutine() -> str:
    return await inner_coroutine()


def in_thread() -> None:
    a2()


def a2() -> None:
    capture("thread")


def recurse(k: int) -> str:
    if k == 0:
        return capture("deep")
    return recurse(k - 1)


def naïve() -> str:
    return capture("latin1-name")


def 名前() -> str:
    return capture("ucs2-name")


def 𠀀() -> str:
    return capture("ucs4-name")


def fork_case() -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        capture("fork")
        os.write(w, json.dumps(results["fork"]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    results["fork"] = json.loads(data)


def main() -> None:
    state = probe.probe_detect()
    a()
    Klass().method()
    Klass.static()
    next(generator())
    list(outer_generator())
    asyncio.run(coroutine())
    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    (lambda: capture("lambda"))()
    [capture("listcomp") for _ in range(1)]
    list(map(lambda x: capture("map"), [1]))
    sorted([2, 1], key=lambda x: capture("sorted-key") and x)
    recurse(300)
    naïve()
    名前()
    𠀀()
    fork_case()
    eval_known = probe.probe_eval_range_known()
    probe.probe_keys.argtypes = [ctypes.c_uint64] * 3
    keys_ok = probe.probe_keys(id(a.__code__), id(b.__code__), id(main))
    # Unknown versions: a future one, then a free-threaded 3.13.
    unsupported = []
    for version, free_threaded in ((0x030E00F0, 0), (0x030D00F0, 1), (0x020700F0, 0)):
        st = probe.probe_detect_as(version, free_threaded)
        n = probe.probe_walk(BUF, len(BUF))
        unsupported.append([st, n, BUF.value.decode(), probe.probe_status().decode()])
    again = probe.probe_detect()
    print(json.dumps({
        "version": list(sys.version_info[:2]),
        "state": state,
        "status": probe.probe_status().decode(),
        "eval_range_known": eval_known,
        "keys_ok": keys_ok,
        "cases": results,
        "unsupported": unsupported,
        "redetected": again,
    }))


main()
