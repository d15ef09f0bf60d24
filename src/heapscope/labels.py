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
process) a block costs its ContextVar set and reset, and nothing is sent; the client is
looked for again every 4096 blocks, so that one `record -p` attached since is found.

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
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

_KEY = re.compile(rf"[A-Za-z0-9_.-]{{1,{LABEL_KEY_MAX}}}")

Pairs = tuple[tuple[str, str], ...]


class _Set:
    """A label set as the client takes it: its pairs sorted by key, and their text (key NUL
    value NUL ...). Made once per (outer set, block's pairs) and kept (_sets)."""

    __slots__ = ("pairs", "text", "count")

    def __init__(self, pairs: Pairs) -> None:
        self.pairs = pairs
        self.text = b"".join(k.encode() + b"\0" + v.encode("utf-8", "surrogateescape") + b"\0" for k, v in pairs)
        self.count = len(pairs)


_EMPTY = _Set(())
#: The labels in force.
_current: contextvars.ContextVar[_Set] = contextvars.ContextVar("heapscope_labels", default=_EMPTY)
#: (outer set's pairs, a block's pairs) -> the set they make; bounded, as a program's label sets are.
_sets: dict[tuple[Pairs, Pairs], _Set] = {}
_SETS_KEPT = 4096


class _Client:
    """The client's bind function once it is found and knows where a thread state keeps its
    context; `bind` None: not profiled (every block only sets its ContextVar)."""

    def __init__(self) -> None:
        import ctypes  # here: only a program that uses labels pays for it

        self.bind: Callable[[int, bytes, int, int], int] | None = None
        try:
            lib = ctypes.PyDLL(None)  # PyDLL: the GIL stays held across the calls (client/labels.c)
            bind = lib.heapscope_label_bind_v1
            python = lib.heapscope_label_python_v1
        except (OSError, AttributeError):
            return  # not under heapscope
        bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
        bind.restype = ctypes.c_void_p
        python.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32]
        python.restype = ctypes.c_int
        api = ctypes.pythonapi
        api.PyThreadState_Get.restype = ctypes.c_void_p
        offset = _context_offset(api.PyThreadState_Get)
        getter = ctypes.cast(api.PyGILState_GetThisThreadState, ctypes.c_void_p).value
        initialized = ctypes.cast(api.Py_IsInitialized, ctypes.c_void_p).value
        if offset and python(getter, initialized, offset) == 0:
            self.bind = bind


def _context_offset(tstate: Callable[[], int]) -> int:
    """The offset of PyThreadState.context: the one word that is the running context's address
    while code runs in two contexts made here (only the thread state's own first words are read;
    the struct is a few hundred bytes)."""
    import ctypes

    def words() -> list[int]:
        return list((ctypes.c_uint64 * 64).from_address(int(tstate())))

    found: set[int] | None = None
    for _ in range(2):
        ctx = contextvars.Context()
        offs = {8 * i for i, w in enumerate(ctx.run(words)) if w == id(ctx)}
        found = offs if found is None else found & offs
    return min(found) if found and len(found) == 1 else 0


_client: _Client | None = None
_lock = threading.Lock()


def _the_client() -> _Client:
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = _Client()
    return _client


_misses = 0


def _not_found() -> None:
    """Every 4096 blocks entered while the client is not found, look again: a client that
    `heapscope record -p` attached since is found (as the C header does)."""
    global _misses, _client
    _misses += 1
    if _misses % 4096 == 0:
        _client = None


def _set_of(outer: _Set, kv: Pairs) -> _Set:
    got = _sets.get((outer.pairs, kv))
    if got is None:
        d = dict(outer.pairs)
        d.update(kv)
        got = _Set(tuple(sorted(d.items())))
        if len(got.text) > LABEL_TEXT_MAX:
            raise ValueError(f"labels {dict(got.pairs)}: more than {LABEL_TEXT_MAX} bytes in all")
        if len(_sets) < _SETS_KEPT:
            _sets[(outer.pairs, kv)] = got
    return got


#: A block's pairs as given -> as checked: a request handler makes the same few over and over.
_checked: dict[tuple[tuple[str, object], ...], Pairs] = {}


def _check(items: tuple[tuple[str, object], ...]) -> Pairs:
    if not items:
        raise ValueError("heapscope.label needs at least one key=value")
    pairs = []
    for k, v in items:
        text = v if isinstance(v, str) else str(v)
        if not _KEY.fullmatch(k):
            raise ValueError(f"label key {k!r}: 1 to {LABEL_KEY_MAX} characters of [A-Za-z0-9_.-]")
        if "\0" in text or len(text.encode("utf-8", "surrogateescape")) > LABEL_VALUE_MAX:
            raise ValueError(f"label {k}: a value of at most {LABEL_VALUE_MAX} bytes without NUL")
        pairs.append((k, text))
    return tuple(pairs)


class label:  # noqa: N801 - used as a function: heapscope.label(tenant="acme")
    """Labels for the allocations of a block, a function or a coroutine (module docstring).
    Keys: 1 to 63 characters of [A-Za-z0-9_.-]; values: str of up to 127 UTF-8 bytes without
    NUL (other values are str()'d). ValueError for a bad key or value."""

    __slots__ = ("_kv", "_entered")

    def __init__(self, **kv: object) -> None:
        items = tuple(kv.items())
        try:
            checked = _checked.get(items)
        except TypeError:  # a value that is not hashable: checked each time
            checked = None
        if checked is None:
            checked = _check(items)
            if len(_checked) < _SETS_KEPT and all(isinstance(v, str) for _, v in items):
                _checked[items] = checked
        self._kv: Pairs = checked
        self._entered: list[tuple[contextvars.Token[_Set], int]] = []

    def __enter__(self) -> label:
        labels = _set_of(_current.get(), self._kv)
        token = _current.set(labels)  # first: it makes the thread's context if it had none
        bind = (_client or _the_client()).bind
        if bind is None:
            _not_found()
        # The client binds the context this block runs in, and says which (0: not profiled).
        ctx = bind(0, labels.text, len(labels.text), labels.count) or 0 if bind is not None else 0
        self._entered.append((token, ctx))
        return self

    def __exit__(self, *exc: object) -> None:
        token, ctx = self._entered.pop()
        _current.reset(token)
        if ctx:
            # The outer block's set again, or none (its id comes back from the client's table).
            outer = _current.get()
            bind = _client.bind if _client is not None else None
            if bind is not None:
                bind(ctx, outer.text, len(outer.text), outer.count)

    def __call__(self, fn: F) -> F:
        kv = dict(self._kv)
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with label(**kv):
                    return await fn(*args, **kwargs)
            return run_async  # type: ignore[return-value]  # the same signature, wrapped

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with label(**kv):
                return fn(*args, **kwargs)
        return run  # type: ignore[return-value]


def current() -> dict[str, str]:
    """The labels in force here (this thread's or task's context)."""
    return dict(_current.get().pairs)
