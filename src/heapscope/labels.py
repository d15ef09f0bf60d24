"""Allocation labels from Python: which request, tenant or job holds the memory.

    import heapscope
    with heapscope.label(tenant="acme", route="/search"):
        handle(request)

    @heapscope.label(job="reindex")          # a decorator too, of plain and async functions
    async def reindex(): ...

Every sample taken while the block runs carries the labels (docs/labels.md): `heapscope
report --by-label tenant`, `--label tenant=acme`. Labels follow contextvars: each thread and
each asyncio task has its own; blocks nest, an inner key replacing an outer one's value.

How a sample learns them: entering a block sets a ContextVar and binds the Python context
object the block runs in (the one PyThreadState.context points to) to the interned label
set in the client (client/labels.c, through ctypes with the GIL held); a sample on a thread
with Python state reads its thread state's current context and looks it up there: no Python
call from a malloc hook. Exact for the code of the block itself, on its thread or task, also
while the GIL is released (native code called from the block). Not followed: a task or
a contextvars.Context.run() started inside a block (a copy of the context) carries no
labels until it enters a block itself.

Anywhere else than under `heapscope record` (the client not loaded, or not profiling this
process) a block costs its ContextVar set and reset, and nothing is sent.

May import: heapscope.wire.codec (label limits).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import re
import threading

from heapscope.wire.codec import LABEL_KEY_MAX, LABEL_TEXT_MAX, LABEL_VALUE_MAX

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_KEY = re.compile(rf"[A-Za-z0-9_.-]{{1,{LABEL_KEY_MAX}}}")

#: The labels in force: (key, value) pairs sorted by key.
_current: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("heapscope_labels",
                                                                                         default=())


class _Client:
    """The client's label functions and where a thread state keeps its context; not found: off."""

    def __init__(self) -> None:
        import ctypes  # here: only a program that uses labels pays for it

        self.on = False
        self.offset = 0
        try:
            lib = ctypes.PyDLL(None)  # PyDLL: the GIL stays held across the calls (client/labels.c)
            self.bind = lib.heapscope_label_bind_v1
            python = lib.heapscope_label_python_v1
        except (OSError, AttributeError):
            return  # not under heapscope
        self.bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
        self.bind.restype = ctypes.c_uint32
        python.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        python.restype = ctypes.c_int
        api = ctypes.pythonapi
        api.PyThreadState_Get.restype = ctypes.c_void_p
        self._tstate = api.PyThreadState_Get
        self.offset = self._find_offset()
        getter = ctypes.cast(api.PyGILState_GetThisThreadState, ctypes.c_void_p).value
        if self.offset and python(getter, self.offset) == 0:
            self.on = True

    def _find_offset(self) -> int:
        """The offset of PyThreadState.context: the one word that is the running context's
        address while code runs in two contexts made here (only the thread state's own words
        are read; the struct is a few hundred bytes)."""
        import ctypes

        def words() -> list[int]:
            ts = int(self._tstate())
            return list((ctypes.c_uint64 * 64).from_address(ts))

        found: set[int] | None = None
        for _ in range(2):
            ctx = contextvars.Context()
            seen = ctx.run(words)
            offs = {8 * i for i, w in enumerate(seen) if w == id(ctx)}
            found = offs if found is None else found & offs
        return min(found) if found and len(found) == 1 else 0

    def context(self) -> int:
        import ctypes

        return int(ctypes.c_uint64.from_address(int(self._tstate()) + self.offset).value)


_client: _Client | None = None
_lock = threading.Lock()


def _the_client() -> _Client:
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = _Client()
    return _client


def _text(pairs: tuple[tuple[str, str], ...]) -> bytes:
    return b"".join(k.encode() + b"\0" + v.encode("utf-8", "surrogateescape") + b"\0" for k, v in pairs)


def _merged(outer: tuple[tuple[str, str], ...], kv: dict[str, str]) -> tuple[tuple[str, str], ...]:
    d = dict(outer)
    d.update(kv)
    return tuple(sorted(d.items()))


class label:  # noqa: N801 - used as a function: heapscope.label(tenant="acme")
    """Labels for the allocations of a block, a function or a coroutine (module docstring).
    Keys: 1 to 63 characters of [A-Za-z0-9_.-]; values: str of up to 127 UTF-8 bytes without
    NUL (other values are str()'d). ValueError for a bad key or value."""

    def __init__(self, **kv: object) -> None:
        if not kv:
            raise ValueError("heapscope.label needs at least one key=value")
        self._kv: dict[str, str] = {}
        for k, v in kv.items():
            text = v if isinstance(v, str) else str(v)
            if not _KEY.fullmatch(k):
                raise ValueError(f"label key {k!r}: 1 to {LABEL_KEY_MAX} characters of [A-Za-z0-9_.-]")
            if "\0" in text or len(text.encode("utf-8", "surrogateescape")) > LABEL_VALUE_MAX:
                raise ValueError(f"label {k}: a value of at most {LABEL_VALUE_MAX} bytes without NUL")
            self._kv[k] = text
        self._entered: list[tuple[contextvars.Token[tuple[tuple[str, str], ...]], int, bool]] = []

    def __enter__(self) -> label:
        outer = _current.get()
        pairs = _merged(outer, self._kv)
        token = _current.set(pairs)  # first: it makes the thread's context if it had none
        client = _the_client()
        ctx, bound = 0, False
        if client.on:
            ctx = client.context()
            text = _text(pairs)
            bound = len(text) <= LABEL_TEXT_MAX and client.bind(ctx, text, len(text), len(pairs)) != 0
        self._entered.append((token, ctx, bound))
        return self

    def __exit__(self, *exc: object) -> None:
        token, ctx, bound = self._entered.pop()
        _current.reset(token)
        if bound:
            outer = _current.get()
            text = _text(outer)
            # The outer block's set again (or none): its id comes back from the client's table.
            _the_client().bind(ctx, text, len(text), len(outer))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        kv = self._kv
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with label(**kv):
                    return await fn(*args, **kwargs)
            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with label(**kv):
                return fn(*args, **kwargs)
        return run


def current() -> dict[str, str]:
    """The labels in force here (this thread's or task's context)."""
    return dict(_current.get())
