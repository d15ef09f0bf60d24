"""The producer's per-record loop, in C (_ingest.c, ingest_core.c).

One `Ingest` per traced process reads that process's shared ring
(wire.h), applies MALLOC and FREE records in sequence order to a table of
live sampled allocations and to per-stack totals, and hands the rare records
(STACK, MODULE, HEAP) back to Python whole. No Python object is made per
MALLOC or FREE.

Packed outputs are little-endian u64 rows; read them with
`struct.iter_unpack("<5Q", ...)` or `"<7Q"` for the stream.
"""

class Ingest:
    """Reader and bookkeeper of one process's ring.

    NB: not thread-safe. drain() releases the GIL while it reads; any other
    call on the same object from another thread meanwhile raises
    RuntimeError.
    """

    def __init__(self, fd: int, ring_size: int, *, stream: bool = False,
                 dump_at_max: bool = False) -> None:
        """Map `fd` (HS_META_SIZE + ring_size bytes, MAP_SHARED, read/write).

        Raises ValueError if ring_size is not a power of two (>= 8), if the
        file is smaller than the mapping, or if the meta page's ring_size
        differs; OSError if fstat or mmap fails. With stream=True every
        applied op is also kept for take_stream(). With dump_at_max=True the
        per-stack state at the peak of unfreed sampled bytes is kept for
        peak(). Reading starts at the meta page's read_pos.
        """

    def drain(self, max_records: int = 0) -> list[bytes]:
        """Read committed records from read_pos; 0 = no limit, else stop after that many.

        MALLOC and FREE are applied (or wait for their turn in sequence
        order); PAD is skipped; STACK, MODULE and HEAP records are returned
        whole (header included), in ring order, ready for
        `codec.decode_record`. Consumed bytes are zeroed before read_pos is
        published (at the end, and at least every 64 KiB). Stops at a zero
        header (space reserved but not written yet) or when caught up with
        write_pos. Ops that waited more than 1 s for a missing sequence
        number stop waiting: the gap is skipped and counted.

        A well-framed record whose body does not fit its type, or of an
        unknown type, is counted in `malformed_records` and skipped. Broken
        framing (bad size, bad positions) marks the ring corrupt: this call
        returns what it had read and every later call returns []. Raises
        MemoryError if the tables could not grow (an op was dropped).
        """

    def flush(self) -> None:
        """Apply every pending op in sequence order, skipping the gaps.

        For when the process has ended and nothing more will come.
        """

    def totals(self) -> bytes:
        """Per stack seen, cumulative: 5 x u64 rows.

        stack_id, alloc_bytes, free_bytes, alloc_count, free_count; bytes are
        sample sizes. Rows are in the order stacks were first seen.
        """

    def peak(self) -> bytes:
        """dump_at_max: the state at the process's peak of unfreed sampled bytes.

        5 x u64 rows in the order of totals(): stack_id, bytes of the stack
        unfreed at the peak, 0, allocations unfreed at the peak, 0. Their
        bytes sum to stats()["peak_unfreed"]. heapprofd's semantics (docs/profile.md):
        the peak is per process, reached by a malloc; ValueError without
        dump_at_max.
        """

    def live(self) -> bytes:
        """Per live sampled allocation: 5 x u64 rows, in no particular order.

        addr, sample_size, alloc_size, stack_id, seq (of its malloc).
        """

    def take_stream(self) -> bytes:
        """The ops applied since the last call (stream=True; else b""): 7 x u64 rows.

        kind (1 malloc, 2 free), seq, addr, alloc_size, sample_size, stack_id, ts.
        For a free, sizes and stack are those of the allocation it freed
        (0 if the address was not live) and ts is 0. The free implied by a
        malloc at a still-live address has no row of its own.
        """

    def stats(self) -> dict[str, int]:
        """Counters since construction.

        records (all consumed, PAD and malformed included), mallocs, frees,
        pads, malformed_records, corrupt (0/1), late_records (seq already
        committed: applied at once), gaps_skipped (sequence numbers given
        up on), pending (ops waiting now), live_allocations, implicit_frees
        (malloc at a live address), untracked_frees (free of an address not
        live), committed_seq, max_pending; with dump_at_max also
        current_unfreed, peak_unfreed and peak_ts (ts of the peak's malloc),
        else 0.
        """

    @property
    def last_ts(self) -> int:
        """Largest MALLOC ts applied so far (ns, the client's CLOCK_MONOTONIC_COARSE)."""

    def close(self) -> None:
        """Unmap the ring and free the tables; idempotent. Later calls raise ValueError."""
