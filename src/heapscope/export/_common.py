"""What every exporter needs: choosing processes and dumps, call paths, frame names."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from heapscope.model import CallsiteId, FrameId, MappingId
from heapscope.records import Record
from heapscope.store.alloc_labels import label_pairs, label_split
from heapscope.store.reader import FrameInfo, Profile, ViewValues, mapping_basename
from heapscope.store.reader import Process as StoredProcess
from heapscope.store.select import (
    State,
    check_view,
    pick_dump,
    pick_dumps,
    process_interval,
    process_label,
    process_state,
    select_processes,
)

T = TypeVar("T")

__all__ = ["Frames", "LabelParts", "SymLine", "check_view", "chosen_states", "interval_of", "pick_dump", "pick_dumps",
           "process_label", "select_processes", "wall_clock"]


def interval_of(profile: Profile, p: StoredProcess | None = None) -> int:
    """The sampling interval in bytes: the process's own, else the profile's metadata, else 1."""
    return process_interval(profile, p)


def chosen_states(profile: Profile, processes: list[StoredProcess], dump: str | int | None,
                  view: str) -> list[tuple[StoredProcess, State]]:
    """Each process with the state a single-state export shows: `dump` (peak, end or N), by
    default the peak for the views of held memory and the end for the allocated ones. Processes
    without dumps are left out."""
    out = []
    for p in processes:
        st = process_state(profile, p, dump, view)
        if st is not None:
            out.append((p, st))
    return out


class SymLine(Record, frozen=True):
    """One function of a frame: several per frame when calls were inlined."""

    name: str
    file: str  # '' when unknown
    line: int  # 0 when unknown


class Frames:
    """Frame facts with symbolization applied, and call paths of callsites (cached)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.info: dict[FrameId, FrameInfo] = profile.frames()
        self.callsites = profile.callsites()
        self._paths: dict[CallsiteId, tuple[FrameId, ...]] = {}
        self.mapping: dict[FrameId, MappingId] = {fid: f.mapping_id for fid, f in self.info.items()}
        # Perfetto's order: within a symbol set, the innermost (inlined) function comes first.
        self.symbols: dict[FrameId, list[SymLine]] = {
            fid: [SymLine(s.name, s.source_file, s.line_number) for s in lines]
            for fid, lines in profile.frame_symbols().items()}
        self._chains: dict[FrameId, tuple[SymLine, ...]] = {}

    def path(self, cs: CallsiteId) -> tuple[FrameId, ...]:
        """Frames of a callsite, root (outermost) first."""
        todo, base = self.walk_to(cs, self._paths)
        path = base if base is not None else ()
        for node_id, frame in reversed(todo):
            path = (*path, frame)
            self._paths[node_id] = path
        return path

    def walk_to(self, cs: CallsiteId, known: Mapping[CallsiteId, T]
                ) -> tuple[list[tuple[CallsiteId, FrameId]], T | None]:
        """The callsites from `cs` up to the first one in `known` (left out) or a root, leaf first,
        each with its frame, and what `known` holds for that one (None: a root was reached, or a
        callsite missing from the table). What the exporters build per callsite from its
        parent's (a path, encoded frames) is then made once for each; the reader refuses parent
        cycles, so the walk ends."""
        todo: list[tuple[CallsiteId, FrameId]] = []
        node: CallsiteId | None = cs
        while node is not None:
            got = known.get(node)
            if got is not None:
                return todo, got
            entry = self.callsites.get(node)
            if entry is None:
                break
            todo.append((node, entry[1]))
            node = entry[0]
        return todo, None

    def name(self, fid: FrameId) -> str:
        info = self.info.get(fid)
        return info.display_name if info is not None else f"[frame {fid}]"

    def library(self, fid: FrameId) -> str:
        info = self.info.get(fid)
        return mapping_basename(info.mapping_name) if info is not None else "[unknown]"

    def chain(self, fid: FrameId) -> tuple[SymLine, ...]:
        """The functions of one frame, outermost first (inlined callees after their caller)."""
        got = self._chains.get(fid)
        if got is None:
            lines = self.symbols.get(fid)
            got = tuple(reversed(lines)) if lines and all(s.name for s in lines) else (SymLine(self.name(fid), "", 0),)
            self._chains[fid] = got
        return got

    def names(self, cs: CallsiteId) -> Iterator[str]:
        """Function names of a callsite's path, root first, inlined functions expanded."""
        for fid in self.path(cs):
            for s in self.chain(fid):
                yield s.name


Pairs = tuple[tuple[str, str], ...]


class LabelParts:
    """A process's values at one state split by allocation label set (docs/labels.md): each
    callsite's labelled parts, then what is left without labels (pairs ()). A profile without
    labels gives each callsite's values whole."""

    def __init__(self, profile: Profile, upid: int, kind: str, ts: int) -> None:
        """The state of process `upid` that a State names: kind peak, or the dump at ts."""
        self.split = label_split(profile, upid, kind, ts)
        self.pairs = label_pairs(profile, upid) if self.split else {}

    def parts(self, cs: CallsiteId, v: ViewValues) -> list[tuple[Pairs, ViewValues]]:
        pieces = self.split.get(cs)
        if not pieces:
            return [((), v)]
        out: list[tuple[Pairs, ViewValues]] = []
        rest = v
        for label_set, part in pieces:
            out.append((self.pairs.get(label_set, (("heapscope.label_set", str(label_set)),)), part))
            rest = _minus(rest, part)
        if rest.space or rest.objects or rest.alloc_space or rest.alloc_objects:
            out.append(((), rest))
        return out


def _minus(a: ViewValues, b: ViewValues) -> ViewValues:
    def opt(x: int | None, y: int | None) -> int | None:
        return None if x is None or y is None else x - y

    return ViewValues(a.space - b.space, a.objects - b.objects, a.alloc_space - b.alloc_space,
                      a.alloc_objects - b.alloc_objects, opt(a.real_space, b.real_space),
                      opt(a.alloc_real_space, b.alloc_real_space))


def wall_clock(profile: Profile) -> Callable[[int], int]:
    """Map the profile's timestamps (CLOCK_MONOTONIC ns) to Unix ns.

    `record` stores `started_unix_ns` (time.time_ns() at start) and, when it
    has it, `started_monotonic_ns` taken at the same moment. Without the
    latter, the first process's start stands in for the monotonic start: it
    is a few milliseconds later, which is well inside one dump interval.
    Without a start time (profiles not written by `record`) timestamps stay
    as they are: ordered, but not dates.
    """
    meta = profile.metadata()
    try:
        unix0 = int(meta.get("started_unix_ns", "0"))
    except ValueError:
        unix0 = 0
    try:
        mono0 = int(meta["started_monotonic_ns"])
    except (KeyError, ValueError):
        starts = [p.info.start_ts for p in profile.processes() if p.info.start_ts > 0]
        mono0 = min(starts) if starts else 0
    if unix0 <= 0:
        return lambda ts: ts
    return lambda ts: max(0, unix0 + (ts - mono0))
