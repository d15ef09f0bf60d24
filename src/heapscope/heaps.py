"""Custom heaps from Python: report the allocations of your own pools.

    import heapscope.heaps
    pool = heapscope.heaps.register("myapp.buffers")
    pool.alloc(addr, size)
    pool.free(addr)

The same API as the C header (src/heapscope/include/heapscope.h), through
ctypes on the functions the client library exports (client/heaps.c). Under
`heapscope record` the library is preloaded into the interpreter and the
heap shows up in the profile under its name; anywhere else `register`
returns a heap whose `alloc` and `free` do nothing (`heap.enabled` is False).

Addresses are integers: anything non-zero below 2**56 that identifies the
allocation in this heap (an address, an id() of an object, an offset);
each heap has its own. Report a free before the address can be handed out
again. Frees of addresses never reported are ignored.

Attached to later (`heapscope record -p`): heaps registered before the attach
stay disabled; register the name again (cheap while not profiled) to get it.

May import: heapscope.wire.heapnames (a program imports it, under `record` or not: that small module only).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from heapscope.wire.heapnames import RESERVED

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from typing import Any

NAME_MAX = 31  # wire.h HS_HEAP_NAME_SIZE - 1
_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{NAME_MAX}}}")
_ADDR_LIMIT = 1 << 56


def valid_name(name: str) -> bool:
    """1 to 31 characters of [A-Za-z0-9._-], not a heap heapscope names itself
    (the rule of client/heaps.c)."""
    return bool(_NAME.fullmatch(name)) and name not in RESERVED


class _Api:
    """The client's exported functions, looked up once; None when not loaded."""

    def __init__(self) -> None:
        self.register: Callable[..., Any] | None = None
        self.alloc: Callable[..., Any] | None = None
        self.free: Callable[..., Any] | None = None
        import ctypes  # here: only a program that uses custom heaps pays for it

        try:
            lib = ctypes.CDLL(None)
            register = lib.heapscope_heap_register_v1
            alloc = lib.heapscope_heap_alloc_v1
            free = lib.heapscope_heap_free_v1
        except (OSError, AttributeError):
            return  # not under heapscope: every call is a no-op
        register.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        register.restype = ctypes.c_uint32
        alloc.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint64]
        alloc.restype = None
        free.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        free.restype = None
        self.register, self.alloc, self.free = register, alloc, free


_api: _Api | None = None
_lock = threading.Lock()


def _functions() -> _Api:
    """The functions; looked up again while not found, so that a client loaded since
    (`heapscope record -p` attached to this process) is found by the next register."""
    global _api
    with _lock:
        if _api is None or _api.register is None:
            _api = _Api()
        return _api


class Heap:
    """A registered heap. `id` is 0 when the process is not profiled."""

    __slots__ = ("_alloc", "_free", "id", "interval", "name")

    def __init__(self, name: str, heap_id: int, interval: int, api: _Api) -> None:
        self.name = name
        self.id = heap_id
        self.interval = interval
        self._alloc = api.alloc if heap_id else None
        self._free = api.free if heap_id else None

    @property
    def enabled(self) -> bool:
        """True when heapscope profiles this heap."""
        return self.id != 0

    def alloc(self, addr: int, size: int) -> None:
        """`size` bytes at `addr` were handed out from this heap."""
        if self._alloc is not None and 0 < addr < _ADDR_LIMIT and size > 0:
            self._alloc(self.id, addr, min(size, (1 << 64) - 1))

    def free(self, addr: int) -> None:
        """`addr` goes back to this heap (before it can be handed out again)."""
        if self._free is not None and 0 < addr < _ADDR_LIMIT:
            self._free(self.id, addr)

    def __repr__(self) -> str:
        return f"Heap({self.name!r}, id={self.id})"


def register(name: str, interval: int = 0) -> Heap:
    """Register a heap by name, sampled every `interval` bytes on average
    (0: the session's interval; 1: every allocation). Registering a name
    again gives the same heap. ValueError for a bad name or interval."""
    if not isinstance(name, str) or not valid_name(name):
        raise ValueError(f"bad heap name {name!r}: 1 to {NAME_MAX} characters of A-Z a-z 0-9 . _ -"
                         + (", and not a reserved name" if name in RESERVED else ""))
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0 or interval >= 1 << 64:
        raise ValueError(f"bad interval {interval!r}: an integer >= 0 (0: the session's)")
    api = _functions()
    heap_id = int(api.register(name.encode("ascii"), interval)) if api.register is not None else 0
    return Heap(name, heap_id, interval, api)
