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
set in the client (client/labels.c, one direct C call through heapscope._labels with the
GIL held); a sample on a thread with Python state reads its thread state's current context
and looks it up there: no Python call from a malloc hook. Exact for the code of the block
itself, on its thread or task, also while the GIL is released (native code called from the
block). Not followed: a task or a contextvars.Context.run() started inside a block (a copy
of the context) carries no labels until it enters a block itself.

Anywhere else than under `heapscope record` (the client not loaded, or not profiling this
process) a block costs its ContextVar set and reset and a call that returns 0, and nothing
is sent; the client is looked for again every 4096 blocks (_labels.c), so that one
`record -p` attached since is found.

May import: heapscope._labels, heapscope.wire.codec (label limits).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import re

from heapscope._labels import Block as _Block
from heapscope._labels import setup as _setup
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
    value NUL ...). Made once per (outer set, block's pairs) and kept in the outer set's
    `inner` (a block's enter is then one dict lookup)."""

    __slots__ = ("pairs", "text", "count", "inner")

    def __init__(self, pairs: Pairs) -> None:
        self.pairs = pairs
        self.text = b"".join(k.encode() + b"\0" + v.encode("utf-8", "surrogateescape") + b"\0" for k, v in pairs)
        self.count = len(pairs)
        self.inner: dict[Pairs, _Set] = {}


_EMPTY = _Set(())
#: The labels in force.
_current: contextvars.ContextVar[_Set] = contextvars.ContextVar("heapscope_labels", default=_EMPTY)
#: How many sets the `inner` dicts keep in all: bounded, as a program's label sets are.
_kept = 0
_SETS_KEPT = 4096


def _set_of(outer: _Set, kv: Pairs) -> _Set:
    """The set that a block of pairs kv makes inside outer (outer.inner missed)."""
    global _kept
    d = dict(outer.pairs)
    d.update(kv)
    got = _Set(tuple(sorted(d.items())))
    if len(got.text) > LABEL_TEXT_MAX:
        raise ValueError(f"labels {dict(got.pairs)}: more than {LABEL_TEXT_MAX} bytes in all")
    if _kept < _SETS_KEPT:
        outer.inner[kv] = got
        _kept += 1
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


def _checked_pairs(items: tuple[tuple[str, object], ...]) -> Pairs:
    """A block's pairs as given -> as checked, kept for the next block that gives them (the
    C side, _labels.Block, looks in _checked first)."""
    checked = _check(items)
    if len(_checked) < _SETS_KEPT and all(isinstance(v, str) for _, v in items):
        _checked[items] = checked
    return checked


_setup(_current, _checked, _checked_pairs, _set_of)


class label(_Block):  # noqa: N801 - used as a function: heapscope.label(tenant="acme")
    """Labels for the allocations of a block, a function or a coroutine (module docstring).
    Keys: 1 to 63 characters of [A-Za-z0-9_.-]; values: str of up to 127 UTF-8 bytes without
    NUL (other values are str()'d). ValueError for a bad key or value.

    Construction, enter and exit are _labels.Block's, in C: a request pays them each time
    (in Python they cost ~3 us a block); what happens once per distinct set stays here."""

    __slots__ = ()

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
