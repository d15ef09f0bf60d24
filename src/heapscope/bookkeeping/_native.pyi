"""The bookkeeping's C state (_native.c).

`Tracker` (tracker.c) is one process's heap bookkeeping:
sequence ordering, the live sampled allocations, cumulative totals per
callsite (per stack until its callsite is set), the peak of sampled
unreleased bytes, and the rows of each dump. Its packed outputs are rows of
the structs of tracker.h; read them with the Structs of
heapscope.bookkeeping.rows.

`Trie` (trie.h) is the callsite trie shared by every process; `Resolver`
(resolver.h) keeps one process's stacks and resolves them into both.
`addr2line` reads a CPython line table (pylines.h).
"""

from collections.abc import Callable, Sequence

class Tracker:
    """One process's heap bookkeeping.

    NB: not thread-safe. While the Ingest that owns it drains (GIL
    released), any call from another thread raises RuntimeError.
    """

    def __init__(self, *, stream: bool = False, dump_at_max: bool = False, threads: bool = False) -> None:
        """With stream=True every applied op is kept for take_stream(). With
        dump_at_max=True dump() reports the state at the peak. With
        threads=True totals are also kept per (stack, thread) for threads()."""

    def malloc(self, seq: int, addr: int, alloc_size: int, sample_size: int, stack_id: int, ts: int,
               now_ns: int, tid: int = 0, label_set: int = 0, /) -> None:
        """A sampled malloc with sequence number seq, arrived at now_ns (CLOCK_MONOTONIC),
        made by thread tid (its kernel id; 0 = not known) under label set label_set (0:
        none). Its free counts for that thread and that set.

        Applied now if every smaller seq was, else kept until they are (or
        until they are given up on: expire(), flush()). A malloc at an
        address still live first frees it (implicit_frees).
        """

    def free(self, seq: int, addr: int, now_ns: int, ts: int = 0, /) -> None:
        """A free of a sampled address, in sequence order as malloc(), sent at ts (the
        records' clock; 0: not known): its allocation's lifetime ends there."""

    def expire(self, now_ns: int, /) -> None:
        """Give up on missing seqs whose successor arrived more than 1 s before now_ns."""

    def flush(self) -> None:
        """Apply every pending op in sequence order, skipping the gaps.

        For when the process has ended and nothing more will come.
        """

    def set_callsite(self, stack_id: int, callsite_id: int, /) -> None:
        """From now on stack_id books into callsite_id (>= 1), with what it booked so far.

        A stack keeps its first callsite; ValueError for callsite 0.
        """

    def dump(self) -> bytes:
        """DUMP_ROW rows of what changed per callsite since the previous dump.

        (callsite_id, count, size): new allocations as a row with count,
        size >= 0, new frees as one with count, size <= 0. With dump_at_max
        the cumulative state reported is the unreleased state at the peak
        (so a row may shrink it). Stacks without a callsite wait.
        """

    def peak(self) -> bytes:
        """PEAK_ROW rows of the state at the peak of sampled unreleased bytes, cumulative.

        (callsite_id, count, size unreleased at the peak, alloc_count,
        alloc_size allocated up to the peak), for callsites that allocated
        something before the peak. The peak is reached by a malloc;
        stats()["peak_unfreed"] is the sum of size over all buckets (over
        all the trackers sharing the peak: share_peak).
        """

    def share_peak(self, other: Tracker) -> None:
        """From now on this tracker's peak is `other`'s (and that of every tracker sharing it).

        For the heaps of one process whose sum is its memory (libc.malloc and
        python.pymalloc): their peak is the moment their sum of sampled
        unreleased bytes is largest, and each one's peak() rows, dump_at_max
        dumps and windows are its state at that moment. A window
        (new_window) is one for all of them. ValueError unless this tracker
        has had no op and shares no other peak, or when 8 already share it.
        """

    @property
    def peak_group(self) -> int:
        """Equal for the trackers sharing one peak (share_peak), distinct otherwise."""

    def new_window(self) -> None:
        """Start a peak window (a test, say) at the current state.

        From now on peak() and stats()["window_peak"] follow the window's own
        peak, and window() reports what changed since. The process's peak
        is kept: peak() and stats()["peak_unfreed"] answer with the highest
        over all windows. Resolve stacks (set_callsite) first: the rows of
        a kept peak hold callsites only. Not meant for dump_at_max.
        """

    def window(self) -> bytes:
        """WINDOW_ROW rows, one per bucket changed since new_window().

        (callsite_id, stack_id (callsite 0: not known yet), unreleased
        size and count at the window's peak minus at its start, the same at
        the end (now), sampled bytes allocated since). Their window total is
        stats()["window_peak"] - stats()["window_base"].
        """

    def totals(self) -> bytes:
        """TOTALS_ROW rows, cumulative, in the order buckets were made.

        (callsite_id, stack_id, alloc_bytes, free_bytes, alloc_count,
        free_count): a callsite's (stack_id 0), or a stack's that has no
        callsite yet (callsite_id 0). Bytes are sample sizes.
        """

    def live(self) -> bytes:
        """LIVE_ROW rows, one per live sampled allocation, in no particular order.

        (addr, sample_size, alloc_size, stack_id, seq of its malloc).
        """

    def series(self) -> bytes:
        """SERIES_ROW rows, the heap's memory over time, oldest first (tracker_series.h).

        (ts of the span's first op, its largest sampled unreleased bytes, those at
        its end, sampled bytes allocated in all at its end); at most HS_SERIES_CAP.
        """

    def samples(self) -> bytes:
        """SAMPLE_ROW rows, the kept samples: freed ones, then live ones (free_ts 2^64 - 1).

        (callsite_id (0 while the stack has none), stack_id, alloc_ts (its span's),
        free_ts, sampled bytes, weight: the samples a row stands for).
        """

    def threads(self) -> bytes:
        """THREAD_ROW rows, one per (stack, thread) that allocated, in first-seen order.

        (callsite_id (0 while the stack has none), stack_id, tid,
        alloc_bytes, free_bytes, alloc_count, free_count), cumulative; a
        free counts for the thread of its malloc. b"" unless threads=True.
        """

    def label_dump(self) -> bytes:
        """LABEL_DUMP_ROW rows: what changed per (callsite, label set) since the previous
        call, signs as dump()'s; b"" until a labelled malloc (bookkeeping/tracker_labels.h)."""

    def label_peak(self) -> bytes:
        """LABEL_PEAK_ROW rows: each (callsite, label set) at the process's peak, as peak()."""

    def lifetimes(self) -> bytes:
        """LIFETIME_ROW rows (callsite_id, kind, bucket, count, size, real_size), cumulative,
        one per (callsite, kind, bucket) with samples: lifetimes of the freed samples, ages of
        the live ones, sizes of all, heaptrack's temporaries (rows.py LT_*). Stacks without a
        callsite are left out."""

    @property
    def keeps_threads(self) -> bool:
        """Made with threads=True: threads() has rows."""

    def unresolved(self) -> list[int]:
        """Ids of the stacks that booked something and have no callsite yet."""

    def take_stream(self) -> bytes:
        """STREAM_ROW rows of the ops applied since the last call (stream=True; else b"").

        (kind 1 malloc / 2 free, seq, addr, alloc_size, sample_size,
        stack_id, ts). For a free, sizes and stack are those of the
        allocation it freed (0 if the address was not live) and ts is 0. The
        free implied by a malloc at a still-live address has no row of its own.
        """

    def stats(self) -> dict[str, int]:
        """Counters since construction.

        late_records (seq already committed: applied at once), gaps_skipped
        (sequence numbers given up on), pending (ops waiting now),
        live_allocations, implicit_frees (malloc at a live address),
        untracked_frees (free of an address not live), committed_seq,
        max_pending, sampled_bytes (allocated in all), current_unfreed,
        peak_unfreed and peak_ts (ts of the malloc that made the peak),
        window_base (current_unfreed at new_window()) and window_peak (the
        window's peak; both 0 and the process's peak before any window).
        current_unfreed is this tracker's; the peak figures, window_base and
        joint_unfreed (unfreed now) are over the peak_heaps trackers sharing
        the peak (share_peak; 1 alone).
        """

    @property
    def last_ts(self) -> int:
        """Largest MALLOC ts applied so far (ns, the client's CLOCK_MONOTONIC_COARSE)."""

    def close(self) -> None:
        """Free the tables; idempotent. Later calls raise ValueError."""


class Trie:
    """The callsite trie shared by every process of a recording (trie.h).

    One node per distinct path of frames from the root, ids from 1 in
    creation order, never reused. Resolver.resolve() adds to it without a
    Python object per frame.
    """

    def callsite(self, frames: Sequence[int], /) -> int:
        """The callsite for `frames` (frame ids, root first); creates the missing nodes.

        ValueError for no frame."""

    def take_new(self) -> list[tuple[int, int, int | None, int]]:
        """(id, depth, parent id or None, frame id) of the nodes made since the last call."""

    def take_new_flat(self) -> list[int | None]:
        """take_new()'s rows in one flat list: id, depth, parent id or None, frame id, the next id, ..."""

    def paths_from(self, first: int, /) -> list[tuple[int, int]]:
        """(parent id or 0, frame id) of the nodes with ids from `first` on, in id order."""

    def __len__(self) -> int: ...


class Resolver:
    """One process's stacks, kept as their STACK records until resolved into the Trie and
    the process's Tracker (resolver.h). The producer's Ingest keeps every STACK record it
    reads here (Ingest.resolver); keep() does the same for a caller without a ring.

    NB: not thread-safe. While the Ingest that feeds it drains (GIL released),
    any call from another thread raises RuntimeError.
    """

    def keep(self, record: bytes, /) -> None:
        """Keep one whole STACK record (header included), as the ring reader does with those
        it reads: a stack already resolved keeps its callsite; one defined again while it
        waits waits as last defined. ValueError for anything but a well-formed STACK record."""

    def held_stack(self, stack_id: int, /) -> bytes | None:
        """The kept STACK record of stack_id, whole (header included, checked, ready for
        `codec.decode_record`); None if none is kept (never received, or resolved)."""

    def define_code(self, key: int, /) -> None:
        """The HS_REC_PYCODE of code object `key` was received (a Python stack naming a code
        object not received yet waits, resolve(wait=True))."""

    def forget_pcs(self) -> None:
        """Forget the frame named for every pc: another object was loaded where one was
        unloaded, and its pcs are named again (by the namer) as they next come."""

    def resolve(self, trie: Trie, tracker: Tracker, namer: Callable[[int, int, int], int], eval_lo: int,
                eval_hi: int, interp_start: int, interp_end: int, wait: bool,
                retry_parked: bool = True) -> tuple[int, int]:
        """Resolve the waiting stacks into `trie` and `tracker` (set_callsite).

        Native stacks first, then those with Python frames, each spliced where
        its eval loop activations (pcs in (eval_lo, eval_hi]) are, the
        interpreter's own frames ([interp_start, interp_end)) between them left
        out. `namer(kind, a, b)` names a frame met for the first time
        (FrameTable.namer: kind 0 a pc, 1 a Python (code key, offset), 2 the
        frame of an empty stack) and returns its id, with bit 32 set for a
        FILTERED frame and bit 33 for an answer not to keep; a pc answered 0
        parks its stack: it is tried again by a resolve with retry_parked
        (first, in the order stacks parked). Returns (stacks resolved, Python
        frames put at the root). An exception of the namer propagates; the
        stacks not resolved wait.
        """

    def frames(self, stack_id: int, namer: Callable[[int, int, int], int], eval_lo: int, eval_hi: int,
               interp_start: int, interp_end: int) -> list[int] | None:
        """The frame ids of a kept stack as a final resolve() would put it in the trie, root
        first, without resolving it (a code object not received yet named as it is); None
        when no such stack is kept (never received, or resolved) or the namer answers a pc
        0. For a reader of a few stacks by id (the pytest plugin, which keeps no profile)."""

    def callsite(self, stack_id: int, /) -> int:
        """The callsite stack_id resolved to; 0 while it has none."""

    def sample_values(self, rows: bytes, not_freed: int, /) -> list[int | None]:
        """Tracker.samples()'s rows as the store's memory-sample rows, in one flat list: (callsite,
        alloc_ts, free_ts or None when it is `not_freed`, size, weight) a row, a callsite of 0 taken
        from this resolver by the row's stack, a row whose stack has none left out."""

    def bind(self, tracker: Tracker, /) -> list[int]:
        """Give `tracker`'s unresolved stacks (a custom heap's) their callsites here; the ids of those
        that have none."""

    def waiting(self) -> list[int]:
        """Ids of the stacks kept and not resolved yet, in the order resolve() takes them:
        parked ones, native stacks, then those with Python frames, each in the order of
        their first definition."""


def lifetime_values(rows: bytes, kinds: tuple[str | None, ...],
                    life: tuple[tuple[tuple[int, int | None], ...] | None, ...], sizes: tuple[tuple[int, int], ...],
                    size_kind: int, /) -> tuple[list[int | str | None], list[int]]:
    """Tracker.lifetimes()'s rows as the store's rows, each table's in one flat list: a row of kind
    `size_kind` as (callsite, lo, hi, count, size, real_size) with sizes[bucket & 0xFF]; a row of a
    kind named in `kinds` (by code; None, or past them: left out) as (callsite, kinds[kind], lo_ns,
    hi_ns, size_lo, size_hi, count, size, real_size), its lifetime's bounds life[kind][bucket >> 8],
    or (0, None) when life[kind] is None. IndexError for a bucket past the bounds given."""


def addr2line(fmt: int, table: bytes, first_line: int, offset: int, /) -> int | None:
    """The line of the instruction at byte `offset` of a CPython line table of format `fmt`
    (heapscope.bookkeeping.pylines: LNOTAB, LINES_310, LOCATIONS), as that version's
    PyCode_Addr2Line gives it; None when it has none. ValueError for an unknown format."""
