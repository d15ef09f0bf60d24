"""Per-process heap state between dumps: stacks -> callsites, tracker rows -> dumps.

The tracker (tracker.h, in C) keeps the totals; this side resolves each
stack to its callsite once, tells the tracker, and reads back the rows of a
dump, already summed per callsite.

Two paths do the resolve, with the same frames and callsite ids. The
producer's: its Ingest keeps the STACK records in C and resolves them there
(producer/resolve_core.h; `held`), asking FrameTable.namer() for each pc or
Python frame it meets for the first time. The Python one below (define_stack,
a dict of tuples per stack) serves the unit tests and is the reference the
C path is tested against (tests/unit/producer/test_resolve.py).
"""

from __future__ import annotations

from heapscope.bookkeeping.frames import FrameTable, ProcessModules, PyCode, PySplice
from heapscope.bookkeeping.rows import DUMP_ROW, PEAK_ROW, unpack_rows
from heapscope.bookkeeping.trie import CallsiteTrie
from heapscope.model import CallsiteId, FrameId
from heapscope.slots import Slots

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, issue 13)

NO_FRAMES = "[no frames]"
UNDEFINED_STACK = "[stack never received]"

if TYPE_CHECKING:
    from typing import Protocol

    from heapscope.producer._ingest import Ingest, Trie

    class Tracker(Protocol):
        """What a dump needs of heapscope.producer._ingest.Tracker."""

        def set_callsite(self, stack_id: int, callsite_id: int, /) -> None: ...
        def unresolved(self) -> list[int]: ...
        def dump(self) -> bytes: ...
        def peak(self) -> bytes: ...


class ProcessHeap(Slots):
    """What a process's dumps need: its stacks, modules and callsites."""

    __slots__ = ("modules", "frame_cache", "stacks", "py_stacks", "python", "callsites", "unreleased", "dumps",
                 "held", "parked_at")
    modules: ProcessModules
    frame_cache: dict[int, FrameId]
    stacks: dict[int, tuple[int, ...]]  # defined, not yet resolved
    py_stacks: dict[int, tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]]
    python: PySplice
    callsites: dict[int, CallsiteId]  # stack id -> callsite
    unreleased: int  # sum of the sizes of every row dumped so far
    dumps: int
    # The Ingest that keeps this process's stacks and resolves them in C (the producer's
    # case); None: stacks come through define_stack and resolve in Python.
    held: Ingest | None
    parked_at: int  # modules.generation at the last resolve_known(): stacks parked then wait for a new module

    def __init__(self, modules: ProcessModules | None = None, frame_cache: dict[int, FrameId] | None = None,
                 stacks: dict[int, tuple[int, ...]] | None = None,
                 py_stacks: dict[int, tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]] | None = None,
                 python: PySplice | None = None, callsites: dict[int, CallsiteId] | None = None, unreleased: int = 0,
                 dumps: int = 0, held: Ingest | None = None) -> None:
        self.modules = ProcessModules() if modules is None else modules
        self.frame_cache = {} if frame_cache is None else frame_cache
        self.stacks = {} if stacks is None else stacks
        self.py_stacks = {} if py_stacks is None else py_stacks
        self.python = PySplice() if python is None else python
        self.callsites = {} if callsites is None else callsites
        self.unreleased = unreleased
        self.dumps = dumps
        self.held = held
        self.parked_at = -1

    def define_stack(self, stack_id: int, pcs: tuple[int, ...],
                     py: tuple[tuple[int, int, int], ...] | None = None) -> None:
        if stack_id in self.callsites:
            return
        if py is None:
            self.stacks[stack_id] = pcs
        else:
            self.py_stacks[stack_id] = (pcs, py)

    def callsite(self, stack_id: int) -> int | None:
        """The callsite a stack resolved to; None while it has none."""
        if self.held is not None:
            return self.held.callsite(stack_id) or None
        return self.callsites.get(stack_id)

    def pending_stack(self, stack_id: int, held: Ingest | None = None
                      ) -> tuple[tuple[int, ...], tuple[tuple[int, int, int], ...] | None] | None:
        """(pcs, Python frames or None) of a stack not resolved yet: defined here, or
        held as its wire record by this heap's Ingest (else by `held`, the Ingest
        that holds stacks when no profile is kept); None if none waits."""
        pcs = self.stacks.get(stack_id)
        if pcs is not None:
            return pcs, None
        both = self.py_stacks.get(stack_id)
        if both is not None:
            return both
        source = self.held if self.held is not None else held
        raw = source.held_stack(stack_id) if source is not None else None
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
        if self.held is not None:
            self.held.define_code(key)

    def resolve_known(self, frames: FrameTable, trie: CallsiteTrie | Trie) -> None:
        """While the process runs (the producer's idle moments): resolve the stacks kept in C
        whose every pc is in a module already known and every code object received; the
        others wait for the next dump, so each resolves as it would at that dump. Nothing
        for the Python path."""
        if self.held is not None and not frames.discard:
            self._resolve_held(frames, trie, wait=True, known_only=True)

    def _resolve_held(self, frames: FrameTable, trie: CallsiteTrie | Trie, wait: bool,
                      known_only: bool = False) -> None:
        """The C path of resolve() (resolve_core.h), on the stacks the Ingest keeps."""
        from heapscope.producer._ingest import Trie

        assert self.held is not None
        if not isinstance(trie, Trie):
            raise TypeError("stacks kept in C resolve into the C Trie (producer._ingest.Trie)")
        mods, splice = self.modules, self.python
        lo = splice.eval_lo
        interp = mods.find(lo) if lo else None
        istart, iend = (mods.modules[interp].start, mods.modules[interp].end) if interp is not None else (0, 0)
        namer = frames.namer(mods, self.frame_cache, splice, NO_FRAMES, known_only)
        # A stack that waits for a module (a pc in none known) is tried again once one came.
        retry = not known_only or mods.generation != self.parked_at
        self.parked_at = mods.generation
        _n, unplaced = self.held.resolve(trie, namer, lo, splice.eval_hi, istart, iend, wait, retry)
        splice.unplaced += unplaced

    def resolve(self, frames: FrameTable, trie: CallsiteTrie | Trie, tracker: Tracker) -> None:
        """Turn stacks received since the last dump into callsites, and tell the tracker.

        Done at dump time rather than on arrival: by then every module the
        client announced before the dump is known, whatever the order of
        records in the ring.
        """
        if frames.discard:
            return
        if self.held is not None:
            self._resolve_held(frames, trie, wait=True)
            return
        for stack_id, pcs in self.stacks.items():
            path = frames.frames_of(self.modules, self.frame_cache, pcs)
            cs = CallsiteId(trie.callsite(path or [frames.special(NO_FRAMES)]))
            self.callsites[stack_id] = cs
            tracker.set_callsite(stack_id, cs)
        self.stacks.clear()
        self.resolve_python(frames, trie, tracker, final=False)

    def resolve_python(self, frames: FrameTable, trie: CallsiteTrie | Trie, tracker: Tracker, final: bool) -> None:
        """Stacks with Python frames: spliced once every code object they name has arrived
        (a code record may come after a stack another thread sent), or at the final dump."""
        if self.held is not None:
            self._resolve_held(frames, trie, wait=not final)
            return
        done: list[int] = []
        for stack_id, (pcs, py) in self.py_stacks.items():
            path = frames.frames_of_python(self.modules, self.frame_cache, pcs, py, self.python, wait=not final)
            if path is None:
                continue
            cs = CallsiteId(trie.callsite(path or [frames.special(NO_FRAMES)]))
            self.callsites[stack_id] = cs
            tracker.set_callsite(stack_id, cs)
            done.append(stack_id)
        for stack_id in done:
            del self.py_stacks[stack_id]

    def dump_rows(self, tracker: Tracker, frames: FrameTable, trie: CallsiteTrie | Trie,
                  final: bool) -> list[tuple[int, int, int, int]]:
        """Rows (callsite, count, size, real size) of what changed since the previous dump.

        A stack whose definition has not arrived yet waits for the next dump;
        at the final dump it is booked under a placeholder frame so that no
        byte is lost.
        """
        flat = self.dump_values(tracker, frames, trie, final)
        return list(zip(flat[0::4], flat[1::4], flat[2::4], flat[3::4], strict=True))

    def dump_values(self, tracker: Tracker, frames: FrameTable, trie: CallsiteTrie | Trie,
                    final: bool) -> tuple[int, ...]:
        """dump_rows' rows in one flat tuple: callsite, count, size, real size, the next callsite, ...
        (what the writer binds, store/writer.py add_dump_values: no tuple per row for the
        collector to visit; a compiler's final dump has ~20k rows)."""
        self.resolve(frames, trie, tracker)
        if final:
            self.resolve_python(frames, trie, tracker, final=True)
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
    def peak_values(tracker: Tracker) -> tuple[int, ...]:
        """peak_rows' rows in one flat tuple."""
        return unpack_rows(PEAK_ROW, tracker.peak())
