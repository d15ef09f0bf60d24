"""Per-process heap state between dumps: stacks -> callsites, tracker rows -> dumps.

The tracker (tracker.h, in C) keeps the totals; the resolver (resolver.h,
in C) keeps the process's STACK records and resolves each stack to its
callsite once, into the trie and the tracker, asking FrameTable.namer() for
each pc or Python frame it meets for the first time. This side drives both
and reads back the rows of a dump, already summed per callsite.
"""

from __future__ import annotations

from heapscope.bookkeeping._native import lifetime_values
from heapscope.bookkeeping.frames import FrameTable, ProcessModules, PyCode, PySplice
from heapscope.bookkeeping.rows import (
    DUMP_ROW,
    LIFETIME_BOUNDS,
    LT_FREED,
    LT_HEAPTRACK,
    LT_HELD,
    LT_SIZE,
    LT_UNKNOWN,
    NOT_FREED,
    PEAK_ROW,
    SERIES_ROW,
    unpack_rows,
)
from heapscope.model import FrameId
from heapscope.records import Record, field
from heapscope.wire.codec import ModuleRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)

NO_FRAMES = "[no frames]"
UNDEFINED_STACK = "[stack never received]"

if TYPE_CHECKING:
    from heapscope.bookkeeping._native import Resolver, Tracker, Trie

_LT_KINDS = {LT_FREED: "freed", LT_HELD: "held", LT_UNKNOWN: "unknown", LT_HEAPTRACK: "heaptrack"}
_I64_MAX = (1 << 63) - 1


def _size_bounds(bucket: int) -> tuple[int, int]:
    """Size bucket b's sizes [2^b, 2^(b+1)); 0 and 1 in [0, 2)."""
    return 1 << bucket if bucket else 0, min(1 << (bucket + 1), _I64_MAX)


# The bounds of a row's buckets by index (its size bucket is a byte; a timed row's lifetime bucket
# l is [LIFETIME_BOUNDS[l - 1], LIFETIME_BOUNDS[l]), from 0, open at the top), not computed per row.
_SIZE_BOUNDS = tuple(_size_bounds(b) for b in range(256))
_TIMED = frozenset((LT_FREED, LT_HELD))
_LIFE_BOUNDS: tuple[tuple[int, int | None], ...] = tuple(
    (LIFETIME_BOUNDS[k - 1] if k else 0, LIFETIME_BOUNDS[k] if k < len(LIFETIME_BOUNDS) else None)
    for k in range(len(LIFETIME_BOUNDS) + 1))


# By kind code: the store's name of a lifetime row's kind (None: no row for it), and its lifetime
# buckets' bounds (None: a kind without a lifetime, [0, open)).
_KIND_NAMES = tuple(_LT_KINDS.get(k) for k in range(max(_LT_KINDS) + 1))
_KIND_BOUNDS = tuple(_LIFE_BOUNDS if k in _TIMED else None for k in range(max(_LT_KINDS) + 1))


class ProcessHeap(Record):
    """What a process's dumps need: its modules, code objects and stacks."""

    resolver: Resolver  # the process's stacks, kept in C until resolved (the Ingest feeds it)
    modules: ProcessModules = field(default_factory=ProcessModules)
    frame_cache: dict[int, FrameId] = field(default_factory=dict)
    python: PySplice = field(default_factory=PySplice)
    unreleased: int = 0  # sum of the sizes of every row dumped so far
    dumps: int = 0
    # modules.generation at the last resolve_known(): stacks parked then wait for a new module
    parked_at: int = field(init=False, default=-1)

    def callsite(self, stack_id: int) -> int | None:
        """The callsite a stack resolved to; None while it has none."""
        return self.resolver.callsite(stack_id) or None

    def pending_stack(self, stack_id: int) -> tuple[tuple[int, ...], tuple[tuple[int, int, int], ...] | None] | None:
        """(pcs, Python frames or None) of a stack not resolved yet, as its kept record
        says; None if none waits."""
        raw = self.resolver.held_stack(stack_id)
        if raw is None:
            return None
        from heapscope.wire.codec import MalformedRecord, StackRecord, decode_record

        try:
            rec = decode_record(raw)
        except MalformedRecord:
            return None
        if not isinstance(rec, StackRecord):
            return None
        return rec.pcs, (rec.py if rec.python else None)

    def pending_pcs(self, stack_id: int) -> tuple[int, ...] | None:
        """The pcs of a stack without Python frames that is not resolved yet; None if none waits."""
        stack = self.pending_stack(stack_id)
        return stack[0] if stack is not None and stack[1] is None else None

    def define_code(self, key: int, name: str, file: str, fmt: int, table: bytes, first_line: int) -> None:
        """A code object of this process (HS_REC_PYCODE); its lines are decoded once, when first needed."""
        self.python.codes[key] = PyCode(name, file, None, (fmt, bytes(table), first_line))
        self.resolver.define_code(key)

    def resolve_known(self, frames: FrameTable, trie: Trie, tracker: Tracker) -> None:
        """While the process runs (the producer's idle moments): resolve the stacks whose
        every pc is in a module already known and every code object received; the others
        wait for the next dump, so each resolves as it would at that dump."""
        if not frames.discard:
            self._resolve(frames, trie, tracker, wait=True, known_only=True)

    def _splice(self) -> tuple[int, int, int, int]:
        """Where the resolver splices Python frames: the eval loop's (lo, hi], the interpreter's object."""
        mods, lo = self.modules, self.python.eval_lo
        interp = mods.find(lo) if lo else None
        istart, iend = (mods.modules[interp].start, mods.modules[interp].end) if interp is not None else (0, 0)
        return lo, self.python.eval_hi, istart, iend

    def _resolve(self, frames: FrameTable, trie: Trie, tracker: Tracker, wait: bool,
                 known_only: bool = False) -> None:
        mods, splice = self.modules, self.python
        namer = frames.namer(mods, self.frame_cache, splice, NO_FRAMES, known_only)
        # A stack that waits for a module (a pc in none known) is tried again once one came.
        retry = not known_only or mods.generation != self.parked_at
        self.parked_at = mods.generation
        _n, unplaced = self.resolver.resolve(trie, tracker, namer, *self._splice(), wait, retry)
        splice.unplaced += unplaced

    def replace_modules(self, gone: list[ModuleRecord], frames: FrameTable, trie: Trie, tracker: Tracker) -> None:
        """Another object was loaded where the modules `gone` were (a dlclose, then a dlopen
        at their addresses): the stacks received so far are theirs and resolve now, by them
        (those that wait, for a module not known yet or a code object, resolve later, by what
        is known then); the frames named for pcs in them are forgotten, so later stacks name
        the new one. Called before the new module is added."""
        self.resolve_known(frames, trie, tracker)
        for m in gone:
            frames.forget_range(self.frame_cache, m.start, m.end)
        self.resolver.forget_pcs()

    def frames_of(self, stack_id: int, frames: FrameTable) -> list[FrameId] | None:
        """The frames of a stack not resolved yet, root first, as its resolve will give them
        (interned in `frames`), without resolving it; None if none waits."""
        namer = frames.namer(self.modules, self.frame_cache, self.python, NO_FRAMES)
        path = self.resolver.frames(stack_id, namer, *self._splice())
        return None if path is None else [FrameId(f) for f in path]

    def resolve(self, frames: FrameTable, trie: Trie, tracker: Tracker, final: bool = False) -> None:
        """Turn stacks received since the last dump into callsites, and tell the tracker.

        Done at dump time (and early, resolve_known) rather than on arrival: by
        then every module the client announced before the dump is known,
        whatever the order of records in the ring. A stack with Python frames
        waits for every code object it names, but at the final dump.
        """
        if frames.discard:
            return
        self._resolve(frames, trie, tracker, wait=True)
        if final:  # those still waiting for a code object: named as they are
            self._resolve(frames, trie, tracker, wait=False)

    def dump_rows(self, tracker: Tracker, frames: FrameTable, trie: Trie,
                  final: bool) -> list[tuple[int, int, int, int]]:
        """Rows (callsite, count, size, real size) of what changed since the previous dump.

        A stack whose definition has not arrived yet waits for the next dump;
        at the final dump it is booked under a placeholder frame so that no
        byte is lost.
        """
        flat = self.dump_values(tracker, frames, trie, final)
        return list(zip(flat[0::4], flat[1::4], flat[2::4], flat[3::4], strict=True))

    def dump_values(self, tracker: Tracker, frames: FrameTable, trie: Trie,
                    final: bool) -> tuple[int, ...]:
        """dump_rows' rows in one flat tuple: callsite, count, size, real size, the next callsite, ...
        (what the writer binds, store/writer.py add_dump_values: no tuple per row for the
        collector to visit; a compiler's final dump has ~20k rows)."""
        self.resolve(frames, trie, tracker, final)
        if final:
            stray = tracker.unresolved()
            if stray:
                cs = trie.callsite([frames.special(UNDEFINED_STACK)])
                for stack_id in stray:
                    tracker.set_callsite(stack_id, cs)
        flat = unpack_rows(DUMP_ROW, tracker.dump())
        self.unreleased += sum(flat[2::4])
        self.dumps += 1
        return flat

    @staticmethod
    def peak_rows(tracker: Tracker) -> list[tuple[int, int, int, int, int, int, int]]:
        """Rows (callsite, count, size, alloc_count, alloc_size, real_size, alloc_real_size) at the peak."""
        return list(PEAK_ROW.iter_unpack(tracker.peak()))

    @staticmethod
    def lifetime_values(tracker: Tracker) -> tuple[list[int | str | None], list[int]]:
        """The tracker's lifetimes and sizes per callsite, cumulative, as the store's rows
        (store/schema.sql), each kind in one flat list, as the writer binds them (store/writer.py
        add_lifetime_values): (callsite, kind, lo_ns, hi_ns or None, size_lo, size_hi, count, size,
        real_size) a row and (callsite, lo, hi, count, size, real_size) a row. Made in C from the
        bounds here (a build's ~250k rows took 0.22 s of its producer's CPU in Python)."""
        return lifetime_values(tracker.lifetimes(), _KIND_NAMES, _KIND_BOUNDS, _SIZE_BOUNDS, LT_SIZE)

    @staticmethod
    def peak_values(tracker: Tracker) -> tuple[int, ...]:
        """peak_rows' rows in one flat tuple."""
        return unpack_rows(PEAK_ROW, tracker.peak())

    def memory_values(self, tracker: Tracker) -> tuple[tuple[int, ...], list[int | None]]:
        """The heap's memory over time and its kept samples, each in one flat sequence, as the
        writer binds them (store/writer.py add_memory): (ts, unreleased, its end, allocated) a point, and
        (callsite, alloc_ts, free_ts or None, size, weight) a sample. After the final dump's
        resolve every stack has its callsite; a sample of one that has none is left out."""
        return unpack_rows(SERIES_ROW, tracker.series()), self.resolver.sample_values(tracker.samples(), NOT_FREED)
