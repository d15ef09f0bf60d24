"""Frames and mappings: interning, and the per-process pc -> frame cache."""

from __future__ import annotations

import bisect

from heapscope.bookkeeping.pylines import LineTable
from heapscope.model import Frame, FrameId, Mapping, MappingId, unknown_code_name
from heapscope.records import Record, field
from heapscope.wire.codec import ModuleRecord

FILTERED = "FILTERED"
UNKNOWN_MAPPING = Mapping(build_id="", exact_offset=0, start_offset=0, start=0, end=0, load_bias=0,
                          name="[unknown]")

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Generic, TypeVar

    T = TypeVar("T")
else:  # Interner is generic for the type checker only: no typing import at run time
    T = object
    Generic = {T: object}  # Generic[T] -> object


class Interner(Generic[T]):
    """Hands out dense ids from 1 for distinct values, and remembers new ones."""

    def __init__(self) -> None:
        self.ids: dict[T, int] = {}
        self.new: list[tuple[int, T]] = []

    def intern(self, value: T) -> int:
        i = self.ids.get(value)
        if i is None:
            i = len(self.ids) + 1
            self.ids[value] = i
            self.new.append((i, value))
        return i

    def take_new(self) -> list[tuple[int, T]]:
        new, self.new = self.new, []
        return new


def unknown_code_mapping(pid: int) -> Mapping:
    """Where process `pid`'s pcs in no loaded object go (model.unknown_code_name)."""
    return Mapping(build_id="", exact_offset=0, start_offset=0, start=0, end=0, load_bias=0,
                   name=unknown_code_name(pid))


def mapping_of(m: ModuleRecord) -> Mapping:
    return Mapping(
        build_id=m.build_id.hex(),
        exact_offset=m.file_offset,
        start_offset=0,
        start=m.start,
        end=m.end,
        load_bias=m.vaddr - m.file_offset,
        name=m.path,
    )


class ProcessModules(Record):
    """The loaded objects of one process, searchable by address."""

    starts: list[int] = field(default_factory=list)
    modules: list[ModuleRecord] = field(default_factory=list)
    mapping_ids: list[int] = field(default_factory=list)
    generation: int = 0  # modules added so far: what waits for a module may resolve once it moves
    # the mapping of pcs in no module: the process's own (unknown_code_mapping) when known
    unknown: Mapping = UNKNOWN_MAPPING

    def add(self, m: ModuleRecord, mapping_id: int) -> None:
        """Add `m`; the modules whose addresses it overlaps are gone (unloaded before it was
        loaded there): see `overlapped`."""
        self.generation += 1
        lo = bisect.bisect_left(self.starts, m.start)
        if lo > 0 and self.modules[lo - 1].end > m.start:
            lo -= 1
        hi = bisect.bisect_left(self.starts, m.end, lo)
        self.starts[lo:hi] = [m.start]
        self.modules[lo:hi] = [m]
        self.mapping_ids[lo:hi] = [mapping_id]

    def overlapped(self, m: ModuleRecord) -> list[ModuleRecord]:
        """The known modules at addresses of `m` that are another object (another path or
        build id, or placed otherwise): what a library loaded where an unloaded one was
        replaces. The same object sent again (a fork child's scan) replaces nothing."""
        lo = bisect.bisect_left(self.starts, m.start)
        if lo > 0 and self.modules[lo - 1].end > m.start:
            lo -= 1
        hi = bisect.bisect_left(self.starts, m.end, lo)
        return [k for k in self.modules[lo:hi]
                if (k.path, k.build_id, k.base, k.start, k.end) != (m.path, m.build_id, m.base, m.start, m.end)]

    def find(self, addr: int) -> int | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.modules[i].end:
            return i
        return None


def python_mapping(file: str) -> Mapping:
    """The pseudo-mapping of a Python source file: no build id, no addresses."""
    return Mapping(build_id="", exact_offset=0, start_offset=0, start=0, end=0, load_bias=0, name=file)


UNKNOWN_CODE = "[python code not received]"

# resolver.h: enum hs_name_kind, HS_FID_FILTERED, HS_FID_NOCACHE.
_NAME_PC, _NAME_PYFRAME = 0, 1
_FID_FILTERED, _FID_NOCACHE = 1 << 32, 1 << 33


class PyCode(Record):
    """A code object of one process, as its HS_REC_PYCODE described it.

    Its line table is decoded when a frame first needs a line (`line()`): a
    test suite sends thousands of code objects, most never in a resolved stack.
    """

    name: str  # qualified name (3.11+), plain name before
    file: str
    lines: LineTable | None  # None when the table could not be decoded (or is not yet: raw)
    raw: tuple[int, bytes, int] | None = None  # (format, table, first line), until decoded

    def line(self, offset: int) -> int | None:
        """The line at instruction byte `offset`; None if unknown."""
        if self.raw is not None:
            fmt, table, first_line = self.raw
            self.raw = None
            try:
                self.lines = LineTable.decode(fmt, table, first_line)
            except (ValueError, IndexError):
                self.lines = None
        return self.lines.line(offset) if self.lines is not None else None


class PySplice(Record):
    """What the splice of one process needs: its code objects and the eval loop's range."""

    codes: dict[int, PyCode] = field(default_factory=dict)
    # (code key, instruction offset) -> frame, for codes received: a test runner's stacks
    # share most of their 30-odd Python frames, each worth a line lookup and three interns.
    frame_ids: dict[tuple[int, int], FrameId] = field(default_factory=dict)
    eval_lo: int = 0
    eval_hi: int = 0
    unplaced: int = 0  # Python frames put at the root end: no eval activation to put them at


class FrameTable:
    """Interns mappings and frames for all processes of a recording."""

    def __init__(self, skip_prefixes: tuple[str, ...] = ()) -> None:
        self.mappings: Interner[Mapping] = Interner()
        self.frames: Interner[Frame] = Interner()
        self.skip_prefixes = skip_prefixes
        # The profile is not kept (the pytest plugin without --heapscope-output reads
        # only its per-test windows): no stack is resolved, their records stay in C
        # (the process's Resolver, read by id), and the producer makes no dump.
        self.discard: bool = False
        self.filtered: set[int] = set()  # ids of FILTERED frames
        # Python frames: id -> (qualified name, file, line); new ones are taken by
        # the writer with their symbol rows (take_new_python).
        self.python: dict[int, tuple[str, str, int | None]] = {}
        self._python_new: list[tuple[int, str, str, int | None]] = []
        # (mapping id, rel_pc) -> frame id of the frames of code in a module: each process of
        # a build meets its compiler's frames at addresses of its own (its cache is per process),
        # and a Frame record made and hashed per pc was most of the resolver's Python time.
        self._code_frames: dict[tuple[int, int], int] = {}
        # The same for Python frames: a source file's mapping id, and (mapping id, line, function)
        # -> frame id (the instructions of one line are one frame; every process of a Python test
        # run or build meets the same library frames at its own code keys).
        self._python_mids: dict[str, MappingId] = {}
        self._python_frames: dict[tuple[int, int, str], int] = {}

    def add_module(self, mods: ProcessModules, m: ModuleRecord) -> None:
        mods.add(m, self.mappings.intern(mapping_of(m)))

    @staticmethod
    def forget_range(cache: dict[int, FrameId], start: int, end: int) -> None:
        """Drop the cached frames of return addresses in [start, end] (a pc - 1 in the range):
        another object is now there."""
        for pc in [pc for pc in cache if start < pc <= end]:
            del cache[pc]

    def namer(self, mods: ProcessModules, cache: dict[int, FrameId], splice: PySplice,
              no_frames: str, known_only: bool = False) -> Callable[[int, int, int], int]:
        """What the C resolve (resolver.h) asks to name a frame it has not met:
        (kind, a, b) -> frame id | flags (the kinds and flags are resolver.h's). `known_only`: a pc in no module known
        yet is answered 0, "not now" (its stack waits)."""
        filtered = self.filtered

        def name(kind: int, a: int, b: int) -> int:
            if kind == _NAME_PC:
                fid = cache.get(a)
                if fid is None:
                    if known_only and mods.find(a - 1) is None:
                        return 0
                    fid = cache[a] = FrameId(self._intern_pc(mods, a))
                flags = 0
            elif kind == _NAME_PYFRAME:
                fid = self._python_frame(splice, a, b)
                flags = 0 if a in splice.codes else _FID_NOCACHE
            else:
                fid, flags = self.special(no_frames), 0
            return fid | flags | (_FID_FILTERED if fid in filtered else 0)
        return name

    def _python_frame(self, splice: PySplice, key: int, lasti: int) -> FrameId:
        known = splice.frame_ids.get((key, lasti))
        if known is not None:
            return known
        code = splice.codes.get(key)
        if code is None:
            return self.special(UNKNOWN_CODE)
        fid = self._python_frame_of(code, lasti)
        splice.frame_ids[(key, lasti)] = fid
        return fid

    def _python_frame_of(self, code: PyCode, lasti: int) -> FrameId:
        line = code.line(lasti)
        mid = self._python_mids.get(code.file)
        if mid is None:
            mid = self._python_mids[code.file] = MappingId(self.mappings.intern(python_mapping(code.file)))
        if self.skip_prefixes and code.file.startswith(self.skip_prefixes):
            skipped = self.frames.intern(Frame(mid, 0, FILTERED))
            self.filtered.add(skipped)
            return FrameId(skipped)
        key = (mid, line or 0, code.name)
        fid = self._python_frames.get(key)
        if fid is None:
            fid = self._python_frames[key] = self.frames.intern(Frame(mid, line or 0, code.name))
        if fid not in self.python:
            self.python[fid] = (code.name, code.file, line)
            self._python_new.append((fid, code.name, code.file, line))
        return FrameId(fid)

    def take_new_python(self) -> list[tuple[int, str, str, int | None]]:
        """(frame id, function, file, line) of the Python frames interned since the last call."""
        new, self._python_new = self._python_new, []
        return new

    def special(self, name: str) -> FrameId:
        """A frame that stands for no code: an empty stack, a stack never defined."""
        mid = MappingId(self.mappings.intern(UNKNOWN_MAPPING))
        return FrameId(self.frames.intern(Frame(mid, 0, name)))

    def _intern_pc(self, mods: ProcessModules, pc: int) -> int:
        # Return addresses point after the call; pc - 1 is inside it, which is
        # what symbolizers want and what keeps a call at a function's end in it.
        addr = pc - 1
        i = mods.find(addr)
        if i is None:
            mid = MappingId(self.mappings.intern(mods.unknown))
            return self.frames.intern(Frame(mid, addr))
        m = mods.modules[i]
        mid = MappingId(mods.mapping_ids[i])
        rel = addr - m.base
        fid = self._code_frames.get((mid, rel))
        if fid is not None:
            return fid
        if self.skip_prefixes and m.path.startswith(self.skip_prefixes):
            fid = self.frames.intern(Frame(mid, 0, FILTERED))
            self.filtered.add(fid)
        else:
            fid = self.frames.intern(Frame(mid, rel))
        self._code_frames[(mid, rel)] = fid
        return fid
