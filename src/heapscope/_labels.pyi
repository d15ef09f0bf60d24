"""A label block's call into the client, in C (_labels.c): heapscope.labels' fast path.

The client's heapscope_label_bind_v1 is found with dlsym at the first call and looked for
again every 4096 calls while it is not found. May import: nothing of heapscope.
"""

def bind(ctx: int, text: bytes, count: int, /) -> int:
    """heapscope_label_bind_v1(ctx, text, len(text), count): the context the client bound
    or unbound (ctx 0: the calling thread's current one); 0 when not profiled."""

def found() -> bool:
    """Whether a bind so far has found the client (it does not look itself)."""
