"""A label block's call into the client, in C (_labels.c): heapscope.labels' fast path.

The client's heapscope_label_bind_v1 is found with dlsym at the first call and looked for
again every 4096 calls while it is not found. May import: nothing of heapscope.
"""

from typing import Any

from typing_extensions import Self

def bind(ctx: int, text: bytes, count: int, /) -> int:
    """heapscope_label_bind_v1(ctx, text, len(text), count): the context the client bound
    or unbound (ctx 0: the calling thread's current one); 0 when not profiled."""

def found() -> bool:
    """Whether a bind so far has found the client (it does not look itself)."""

def setup(current: object, checked: dict[Any, Any], check: object, set_of: object, /) -> None:
    """What Block reads and calls: the ContextVar of the labels in force, the cache of checked
    pairs, and labels.py's functions for a cache miss."""

class Block:
    """`with heapscope.label(...)`'s construction, enter and exit; labels.label derives from it."""

    def __new__(cls, **kv: object) -> Self: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> bool: ...
    @property
    def _kv(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def _entered(self) -> list[tuple[object, int, object]]: ...
