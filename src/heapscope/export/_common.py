"""What every exporter needs: choosing processes and dumps, call paths, frame names."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from heapscope.errors import HeapscopeError, UsageError
from heapscope.model import VIEWS, CallsiteId, FrameId
from heapscope.store.reader import Dump, FrameInfo, Profile, mapping_basename
from heapscope.store.reader import Process as StoredProcess

_MAX_DEPTH_GUARD = 1 << 20


def check_view(view: str) -> None:
    if view not in VIEWS:
        raise UsageError(f"unknown view {view!r} (one of: {', '.join(VIEWS)})")


def select_processes(profile: Profile, pid: int | None) -> list[StoredProcess]:
    """All processes, or those with `pid` (an error naming the pids present when none has it)."""
    processes = profile.processes()
    if pid is None:
        return processes
    chosen = [p for p in processes if p.info.pid == pid]
    if not chosen:
        present = ", ".join(str(p) for p in sorted({p.info.pid for p in processes})) or "none"
        raise HeapscopeError(f"{profile.path}: no process with pid {pid} (pids present: {present})")
    return chosen


def pick_dump(dumps: list[Dump], n: int | None, what: str) -> Dump | None:
    """Dump `n` of a process: 1 is the first, -1 (and None) the last. None when it has no dumps."""
    if not dumps:
        return None
    if n is None:
        return dumps[-1]
    if n == 0 or not -len(dumps) <= n <= len(dumps):
        raise UsageError(f"--dump {n}: {what} has {len(dumps)} dump(s) (use 1..{len(dumps)}, or -1 for the last)")
    return dumps[n - 1] if n > 0 else dumps[n]


def pick_dumps(dumps: list[Dump], n: int | None, what: str) -> list[Dump]:
    """All dumps when `n` is None, else just dump `n`."""
    if n is None:
        return dumps
    d = pick_dump(dumps, n, what)
    return [] if d is None else [d]


def process_label(p: StoredProcess) -> str:
    return f"{p.info.name or '?'} (pid {p.info.pid})"


def interval_of(profile: Profile, p: StoredProcess | None = None) -> int:
    """The sampling interval in bytes: the process's own, else the profile's metadata, else 1."""
    if p is not None and p.flags is not None and p.flags.sampling_interval_bytes > 0:
        return p.flags.sampling_interval_bytes
    try:
        return max(1, int(profile.metadata().get("interval", "1")))
    except ValueError:
        return 1


@dataclass(frozen=True, slots=True)
class SymLine:
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
        self.mapping: dict[FrameId, int] = {
            FrameId(_i(r[0])): _i(r[1]) for r in profile._rows("SELECT id, mapping FROM stack_profile_frame")}
        self.symbols: dict[FrameId, list[SymLine]] = {}
        rows = profile._rows(
            "SELECT f.id, s.name, s.source_file, s.line_number FROM stack_profile_frame f"
            " JOIN stack_profile_symbol s ON s.symbol_set_id = f.symbol_set_id"
            " WHERE f.symbol_set_id IS NOT NULL ORDER BY f.id, s.id")
        # Perfetto's order: within a symbol set, the innermost (inlined) function comes first.
        for fid, name, file, line in rows:
            self.symbols.setdefault(FrameId(_i(fid)), []).append(
                SymLine(str(name or ""), str(file or ""), _i(line)))
        self._chains: dict[FrameId, tuple[SymLine, ...]] = {}

    def path(self, cs: CallsiteId) -> tuple[FrameId, ...]:
        """Frames of a callsite, root (outermost) first."""
        got = self._paths.get(cs)
        if got is not None:
            return got
        todo: list[tuple[CallsiteId, FrameId]] = []
        node: CallsiteId | None = cs
        base: tuple[FrameId, ...] = ()
        while node is not None and len(todo) < _MAX_DEPTH_GUARD:
            known = self._paths.get(node)
            if known is not None:
                base = known
                break
            entry = self.callsites.get(node)
            if entry is None:
                break
            todo.append((node, entry[1]))
            node = entry[0]
        path = base
        for node_id, frame in reversed(todo):
            path = (*path, frame)
            self._paths[node_id] = path
        return path

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


def _i(v: object) -> int:
    """An integer column value (NULL reads as 0)."""
    return int(v) if isinstance(v, int | float | str) else 0
