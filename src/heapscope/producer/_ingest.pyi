"""The producer's ring reader, in C.

`Ingest` (_ingest.c, ingest_core.c) reads one process's shared ring
(wire.h): MALLOC and FREE records go to its `Tracker`, STACK records to its
`Resolver` (both of heapscope.bookkeeping._native); the other rare records
(MODULE, HEAP, PYCODE, ...) come back to Python whole. No Python object is
made per MALLOC, FREE or STACK.
"""

from heapscope.bookkeeping._native import Resolver, Tracker

class Ingest:
    """Reader of one process's ring, feeding its own Tracker and Resolver.

    NB: not thread-safe. drain() releases the GIL while it reads; any other
    call on it or its tracker from another thread meanwhile raises
    RuntimeError.
    """

    def __init__(self, fd: int, ring_size: int, *, stream: bool = False,
                 dump_at_max: bool = False, threads: bool = False, tsc: bool = False) -> None:
        """Map `fd` (HS_META_SIZE + ring_size bytes, MAP_SHARED, read/write).

        Raises ValueError if ring_size is not a power of two (>= 8), if the
        file is smaller than the mapping, or if the meta page's ring_size
        differs; OSError if fstat or mmap fails. stream, dump_at_max and
        threads are the Tracker's. Reading starts at the meta page's read_pos.
        tsc: the client stamps records with the TSC (wire.h HS_CFG_TSC); their ts are
        converted to CLOCK_MONOTONIC ns from tsc_start()'s anchor (ValueError where there
        is no TSC).
        """

    def ns_of(self, ts: int, /) -> int:
        """A record's ts as CLOCK_MONOTONIC ns: converted from the TSC with tsc=True, else as is
        (the records this Ingest hands to Python: custom heaps' HEAP_MALLOC and HEAP_FREE)."""

    @property
    def tracker(self) -> Tracker:
        """The Tracker this ring's MALLOC and FREE records go to."""

    @property
    def resolver(self) -> Resolver:
        """The Resolver this ring's STACK records are kept by."""

    def route(self, heap_id: int, tracker: Tracker) -> bool:
        """From the next drain on, apply the HEAP_MALLOC and HEAP_FREE records of heap_id to
        `tracker` here instead of returning them; False when every route (4) is taken."""

    def routed(self, heap_id: int) -> tuple[int, int]:
        """The HEAP_MALLOC and HEAP_FREE records of heap_id applied by its route."""

    def drain(self, now_ns: int, max_records: int = 0) -> list[bytes]:
        """Read committed records from read_pos at time now_ns; max_records 0 = no limit.

        MALLOC and FREE go to the tracker (arrived at now_ns; then
        tracker.expire(now_ns)); STACK records to the resolver
        (Resolver.keep); PAD is skipped; the other records (MODULE, HEAP,
        PYCODE, ...) are returned whole (header included), in ring order, ready
        for `codec.decode_record`. Consumed bytes are zeroed before read_pos
        is published (at the end, and at least every 64 KiB). Stops at a
        zero header (space reserved but not written yet), when caught up
        with write_pos, or before a STACK that follows a MODULE it returns
        (the caller applies the module before that stack is kept: a library
        loaded where an unloaded one was must not name the stacks before it).

        A well-framed record whose body does not fit its type, or of an
        unknown type, is counted in `malformed_records` and skipped. Broken
        framing (bad size, bad positions) marks the ring corrupt: this call
        returns what it had read and every later call returns []. Raises
        MemoryError if a table could not grow (an op was dropped).
        """

    def stats(self) -> dict[str, int]:
        """The reader's counters and its tracker's (Tracker.stats()).

        records (all consumed, PAD and malformed included), mallocs, frees,
        pads, malformed_records, held_stacks (STACK records handed to the
        resolver), corrupt (0/1).
        """

    def close(self) -> None:
        """Unmap the ring and close the tracker; idempotent. Later calls raise ValueError."""


def tsc_start() -> int:
    """Read the TSC and CLOCK_MONOTONIC together: the anchor every Ingest(tsc=True) converts from.
    Called before any client is told to stamp with the TSC (producer/tsc.py). Returns the
    anchor's TSC reading."""
