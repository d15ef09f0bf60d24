"""Consistent snapshots of a recording's heaps, taken on the recording loop's thread.

`Snapshotter.take(producer)` is handed to `Recording.every(1.0, ...)`: it
runs between two polls of the producer, so every process's totals are those
of the records drained so far, all read at one moment. It reads the trackers'
totals, every heap's as the report shows them (Producer.totals; tracker.h
hs_tracker_totals: one bucket per callsite, or per stack while the stack's
callsite is not known yet) and the frame tables, and
changes nothing: dumps and the profile are exactly those of a plain
recording. Frames are keyed by (module path, offset in it), the way a dump's
frames are, so a stack's bucket and its callsite's bucket add up to one row.

Counts are estimated objects, as the report's: a row's sampled counts, bytes and
real bytes go through estimate_int (heapscope/estimate.py) at its heap's interval,
the report's function on the report's inputs. Heaps of one interval (malloc's and
Python's) are added before the estimate, as the report adds a callsite's heaps; a
custom heap of another interval is estimated at its own. At interval 1 they are the
sample counts, exact.

Threads: the recording's trackers keep totals per (stack, thread) for the
view (RecordConfig.threads; tracker.h hs_tracker_threads), and each process's
view carries them grouped by thread, with the thread's name read from
/proc/PID/task/TID/comm (best effort: a thread that ended before its name was
read shows its id alone). A thread id the kernel hands out again after its
thread ended adds to the same row.

Lifetimes: while the view shows temporary allocations or lifetimes (it sets
`lifetimes`), each snapshot also reads every heap tracker's lifetime and size
cells per callsite (tracker_lifetime.h hs_tracker_lifetimes: the rows the final
dump writes to the profile and the report reads), kept per heap interval so the
allocations behind them are estimated as the report's (view/lifetimes.py). They
cost a pass over the tracker's live table, so no snapshot reads them otherwise.
Stacks whose callsite is not known yet have none (the loop resolves them every
100 ms); lifetimes are per process, never per thread.

The result is an immutable HeapSnapshot, swapped in under a lock; readers
(the view's thread) take `latest()` and never see a half-built one.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from heapscope.estimate import Estimate, combine, estimate_int
from heapscope.model import LIFETIME_BOUNDS, Frame, Mapping
from heapscope.records import Record
from heapscope.session import (
    LIFETIME_ROW,
    LT_FREED,
    LT_HEAPTRACK,
    LT_HELD,
    LT_SIZE,
    LT_UNKNOWN,
    SERIES_ROW,
    THREAD_ROW,
    TOTALS_ROW,
)
from heapscope.store.lifetimes import CallsiteLife, Cell, add_cell
from heapscope.store.series import Point, sum_heaps
from heapscope.view.lifetimes import Bucket, cell_estimate, quantile, temporary_cells

if TYPE_CHECKING:
    from heapscope.producer.process import ProcessState
    from heapscope.producer.producer import Producer

HISTORY = 600  # points of memory over time kept (10 minutes at one a second)
NOT_RECEIVED = ("[stack not received yet]", 0, "")
# Thread names are read again each snapshot (threads rename themselves) while a process has
# at most this many threads that allocated; past it, only names not known yet are read.
NAME_REFRESH_MAX = 64


# A frame: (module path, offset in the module, fixed name or ""); leaf first in a stack.
FrameKey = tuple[str, int, str]
# A stack's sampled totals per heap interval: interval -> [alloc bytes, free bytes, alloc count,
# free count, alloc real bytes, free real bytes].
Raw = dict[int, list[int]]


class Site(Record, frozen=True):
    """One stack of one process, now: sampled bytes, estimated objects (the report's views)."""

    frames: tuple[FrameKey, ...]  # leaf first
    alloc_bytes: int
    free_bytes: int
    objects: int  # estimated allocations not freed (exact at interval 1)
    alloc_objects: int  # estimated allocations made

    def value(self, view: str) -> int:
        """One of heapscope.model.VIEWS."""
        if view == "space":
            return self.alloc_bytes - self.free_bytes
        if view == "objects":
            return self.objects
        if view == "alloc_space":
            return self.alloc_bytes
        return self.alloc_objects


class ThreadView(Record, frozen=True):
    """What one thread of one process allocated (a block's free counts for the thread that allocated it)."""

    tid: int  # the kernel's thread id; 0: not known
    name: str  # its comm, "" when it could not be read
    sites: tuple[Site, ...]
    unreleased: int
    allocated: int

    @property
    def label(self) -> str:
        if not self.tid:
            return "thread not known"
        return f"{self.tid} {self.name}" if self.name else f"{self.tid}"


class SiteLife(Record, frozen=True):
    """One stack's lifetimes and sizes now, cumulative: per heap interval, the tracker's cells
    (store/lifetimes.py CallsiteLife, as the profile's final dump writes them). Not changed once
    published."""

    frames: tuple[FrameKey, ...]  # leaf first
    lives: tuple[tuple[int, CallsiteLife], ...]  # (heap interval, its cells)


class LifeFigures(Record, frozen=True):
    """One stack's temporary allocations and lifetimes, the report's figures (view/lifetimes.py):
    sampled bytes, and allocations estimated per cell at its heap's interval (exact at 1)."""

    frames: tuple[FrameKey, ...]
    temp_bytes: int  # sampled bytes freed within the threshold
    temp: Estimate  # allocations freed within it
    alloc_bytes: int
    alloc: Estimate
    held: Estimate  # allocations still live
    median: Bucket | None  # of the freed allocations' lifetimes (the bucket it falls in)
    p90: Bucket | None


class ProcessView(Record, frozen=True):
    pid: int
    name: str
    running: bool  # False: ended (its last totals are kept)
    sites: tuple[Site, ...]
    unreleased: int  # sampled bytes not freed
    allocated: int  # sampled bytes allocated since it connected
    threads: tuple[ThreadView, ...] = ()  # by tid; empty when the tracker keeps no threads
    # memory over time, its heaps summed (the trackers' series: tracker_series.h, as the profile keeps it)
    series: tuple[Point, ...] = ()
    lives: tuple[SiteLife, ...] = ()  # only in a snapshot taken while lifetimes were wanted

    @property
    def label(self) -> str:
        return f"{self.pid} {self.name.rsplit('/', 1)[-1] or '?'}" + ("" if self.running else " (ended)")


class HeapSnapshot(Record, frozen=True):
    seq: int  # 1, 2, ... in the order taken
    elapsed_s: float  # since the snapshotter started
    processes: tuple[ProcessView, ...]
    # (elapsed s, {pid: (unreleased, allocated)}), oldest first
    history: tuple[tuple[float, dict[int, tuple[int, int]]], ...]
    samples: int  # so far, every heap (the producer's stats(), as record's summary counts them)
    lifetimes: bool = False  # the processes' lives were read (Snapshotter.lifetimes)


class Snapshotter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: HeapSnapshot | None = None
        self._started = time.monotonic()
        self._seq = 0
        self._nodes: list[tuple[int, int]] = []  # callsite id - 1 -> (parent id or 0, frame id)
        self._frames: list[Frame] = []  # frame id - 1 -> frame
        self._mappings: list[Mapping] = []  # mapping id - 1 -> mapping
        self._paths: dict[int, tuple[FrameKey, ...]] = {}  # callsite id -> frames, leaf first
        self._ended: dict[int, ProcessView] = {}  # by pid: the last view of processes that ended
        self._history: deque[tuple[float, dict[int, tuple[int, int]]]] = deque(maxlen=HISTORY)
        self._thread_names: dict[tuple[int, int], str] = {}  # (pid, tid) -> the name read last
        # Set by the view while it shows lifetimes (a plain bool: read once per snapshot).
        self.lifetimes = False

    def latest(self) -> HeapSnapshot | None:
        with self._lock:
            return self._latest

    # -- on the recording loop's thread ----------------------------------------------

    def take(self, producer: Producer) -> None:
        self._catch_up(producer)
        views: list[ProcessView] = []
        running: set[int] = set()
        lifetimes = self.lifetimes
        for p in producer.running():
            view = self._process(producer, p, lifetimes)
            views.append(view)
            running.add(view.pid)
        samples = producer.stats().samples  # every heap, python.pymalloc included: record's count
        with self._lock:
            last = self._latest
        if last is not None:  # processes gone since: their last totals, marked ended
            for v in last.processes:
                if v.pid not in running and v.pid not in self._ended:
                    self._ended[v.pid] = ProcessView(v.pid, v.name, False, v.sites, v.unreleased, v.allocated,
                                                     v.threads, v.series, v.lives)
        views += [v for pid, v in self._ended.items() if pid not in running]
        now = time.monotonic() - self._started
        self._history.append((now, {v.pid: (v.unreleased, v.allocated) for v in views if v.running}))
        self._seq += 1
        snap = HeapSnapshot(self._seq, now, tuple(views), tuple(self._history), samples, lifetimes)
        with self._lock:
            self._latest = snap

    def _process(self, producer: Producer, p: ProcessState, lifetimes: bool) -> ProcessView:
        by_frames: dict[tuple[FrameKey, ...], Raw] = {}
        unresolved: dict[int, tuple[FrameKey, ...]] = {}  # stack id -> frames, for this snapshot
        heaps, by_thread = producer.totals(p)
        for interval, totals in heaps:
            for callsite, stack, *values in TOTALS_ROW.iter_unpack(totals):
                _add(by_frames, self._frames_of(producer, p, callsite, stack, unresolved), interval, values)
        sites = _sites(by_frames)
        threads: tuple[ThreadView, ...] = ()
        if by_thread is not None:
            malloc_interval = heaps[0][0]  # threads are malloc's heap's (Producer.totals)
            per_thread: dict[int, dict[tuple[FrameKey, ...], Raw]] = {}
            for callsite, stack, tid, *values in THREAD_ROW.iter_unpack(by_thread):
                _add(per_thread.setdefault(tid, {}), self._frames_of(producer, p, callsite, stack, unresolved),
                     malloc_interval, values)
            tids = sorted(per_thread)
            names = self._names_of(p.info.pid, tids)
            threads = tuple(_thread_view(tid, names.get(tid, ""), _sites(per_thread[tid])) for tid in tids)
        allocated = sum(s.alloc_bytes for s in sites)
        unreleased = sum(s.alloc_bytes - s.free_bytes for s in sites)
        return ProcessView(p.info.pid, p.info.name or p.info.cmdline, True, sites, unreleased, allocated, threads,
                           _series(p), self._lives(p) if lifetimes else ())

    def _lives(self, p: ProcessState) -> tuple[SiteLife, ...]:
        """Every heap's lifetimes and sizes per stack, as the final dump writes them."""
        acc: dict[tuple[FrameKey, ...], dict[int, CallsiteLife]] = {}
        trackers = [(p.flags.sampling_interval_bytes, p.ingest.tracker),
                    *((h.interval, h.tracker) for h in p.custom_heaps.values())]
        for interval, tracker in trackers:
            for callsite, life in lives_of(tracker.lifetimes()).items():
                acc.setdefault(self._path(callsite), {}).setdefault(interval, CallsiteLife()).merge(life)
        return tuple(SiteLife(frames, tuple(sorted(by.items()))) for frames, by in acc.items())

    def _frames_of(self, producer: Producer, p: ProcessState, callsite: int, stack: int,
                   unresolved: dict[int, tuple[FrameKey, ...]]) -> tuple[FrameKey, ...]:
        """A row's frames: its callsite's path, or its stack's pcs named the same way."""
        if callsite:
            return self._path(callsite)
        frames = unresolved.get(stack)
        if frames is None:
            frames = unresolved[stack] = producer.stack_keys(p, stack) or (NOT_RECEIVED,)
        return frames

    def _names_of(self, pid: int, tids: list[int]) -> dict[int, str]:
        """The threads' names, from /proc (best effort; the name read last when a thread is gone)."""
        refresh = len(tids) <= NAME_REFRESH_MAX
        out: dict[int, str] = {}
        for tid in tids:
            key = (pid, tid)
            if tid and (refresh or key not in self._thread_names):
                name = read_thread_name(pid, tid)
                if name is not None:
                    self._thread_names[key] = name
            out[tid] = self._thread_names.get(key, "")
        return out

    def _catch_up(self, producer: Producer) -> None:
        """Extend the id -> value lists by what was interned since the last snapshot.

        Ids are handed out densely from 1 in insertion order (trie.h, frames.py
        Interner), and a dict keeps insertion order, so the n-th key has id n.
        """
        self._nodes.extend(producer.callsite_paths(len(self._nodes) + 1))
        self._frames.extend(producer.frames_since(len(self._frames)))
        self._mappings.extend(producer.mappings_since(len(self._mappings)))

    def _path(self, callsite: int) -> tuple[FrameKey, ...]:
        path = self._paths.get(callsite)
        if path is None:
            out: list[FrameKey] = []
            node = callsite
            while node and node <= len(self._nodes):
                parent, frame_id = self._nodes[node - 1]
                out.append(self._frame_key(frame_id))
                node = parent
            path = self._paths[callsite] = tuple(out)
        return path

    def _frame_key(self, frame_id: int) -> FrameKey:
        if not 0 < frame_id <= len(self._frames):
            return ("[unknown]", 0, "")
        f = self._frames[frame_id - 1]
        m = self._mappings[f.mapping - 1] if 0 < f.mapping <= len(self._mappings) else None
        return (m.name if m is not None else "[unknown]", f.rel_pc, f.name or "")


def read_thread_name(pid: int, tid: int) -> str | None:
    """/proc/PID/task/TID/comm without its newline; None when the thread is gone (or not ours to read)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", "rb") as f:
            data = f.read(64)
    except OSError:
        return None
    return data.rstrip(b"\n").decode("utf-8", "replace")


def _add(acc: dict[tuple[FrameKey, ...], Raw], frames: tuple[FrameKey, ...], interval: int,
         values: list[int]) -> None:
    """A row's six totals (TOTALS_ROW's after its ids) into its stack's, at its heap's interval."""
    v = acc.setdefault(frames, {}).get(interval)
    if v is None:
        acc[frames][interval] = values
    else:
        for i, x in enumerate(values):
            v[i] += x


def _site(frames: tuple[FrameKey, ...], raw: Raw) -> Site:
    """A stack's bytes, and its counts estimated per interval the way the report does
    (heapscope/estimate.py desampled: objects from what is not freed, alloc_objects from what was allocated)."""
    ab = fb = objects = alloc_objects = 0
    for interval, (a_bytes, f_bytes, a_count, f_count, a_real, f_real) in raw.items():
        ab += a_bytes
        fb += f_bytes
        objects += estimate_int(a_count - f_count, a_bytes - f_bytes, interval, a_real - f_real)
        alloc_objects += estimate_int(a_count, a_bytes, interval, a_real)
    return Site(frames, ab, fb, objects, alloc_objects)


def _sites(acc: dict[tuple[FrameKey, ...], Raw]) -> tuple[Site, ...]:
    return tuple(_site(f, raw) for f, raw in acc.items() if any(v[0] or v[2] for v in raw.values()))


def _thread_view(tid: int, name: str, sites: tuple[Site, ...]) -> ThreadView:
    return ThreadView(tid, name, sites, sum(s.alloc_bytes - s.free_bytes for s in sites),
                      sum(s.alloc_bytes for s in sites))


def _series(p: ProcessState) -> tuple[Point, ...]:
    """The process's memory over time as its trackers keep it (every heap's, summed)."""
    trackers = [(p.heap_name, p.ingest.tracker), *((h.name, h.tracker) for h in p.custom_heaps.values())]
    rows = [(name, ts, u, e, a) for name, t in trackers for ts, u, e, a in SERIES_ROW.iter_unpack(t.series())]
    rows.sort(key=lambda r: r[1])
    return tuple(sum_heaps(rows))


def memory_columns(views: list[ProcessView], n: int) -> tuple[list[float], list[float]]:
    """The views' memory over time in `n` columns over the time their series span, summed:
    per column the largest unreleased bytes (the peak between two snapshots is not lost), and
    the allocated bytes at its end. A process that ended holds nothing after its last point.
    Empty lists when no view has a series."""
    shown = [v for v in views if v.series]
    if not shown or n <= 0:
        return [], []
    t0 = min(v.series[0][0] for v in shown)
    width = max(1, -(-(max(v.series[-1][0] for v in shown) + 1 - t0) // n))
    unreleased, allocated = [0.0] * n, [0.0] * n
    for v in shown:
        k, end, alloc = 0, 0, 0
        pts = v.series
        last_col = (pts[-1][0] - t0) // width
        for c in range(n):
            top = end  # what the last point before this column left
            while k < len(pts) and (pts[k][0] - t0) // width == c:
                top = max(top, pts[k][1])
                end, alloc = pts[k][2], pts[k][3]
                k += 1
            if c > last_col and not v.running:
                top = end = 0
            unreleased[c] += top
            allocated[c] += alloc
    return unreleased, allocated


_I64_MAX = (1 << 63) - 1


def _size_bounds(bucket: int) -> tuple[int, int]:
    """Size bucket b's sizes [2^b, 2^(b+1)); 0 and 1 in [0, 2) (the store's, bookkeeping/dump.py)."""
    return 1 << bucket if bucket else 0, min(1 << (bucket + 1), _I64_MAX)


def _life_bounds(bucket: int) -> tuple[int, int | None]:
    """Lifetime bucket b's [lo, hi) in ns, hi None for the last (heapscope.model.LIFETIME_BOUNDS)."""
    return (LIFETIME_BOUNDS[bucket - 1] if bucket else 0,
            LIFETIME_BOUNDS[bucket] if bucket < len(LIFETIME_BOUNDS) else None)


def lives_of(rows: bytes) -> dict[int, CallsiteLife]:
    """A tracker's LIFETIME_ROW rows per callsite, keyed as the profile's tables are read
    (store/lifetimes.py read_lifetimes), so that the report's functions take them as they are."""
    out: dict[int, CallsiteLife] = {}
    for callsite, kind, bucket, count, size, real in LIFETIME_ROW.iter_unpack(rows):
        life = out.setdefault(callsite, CallsiteLife())
        cell = Cell(count, size, real)
        size_lo = _size_bounds(bucket & 0xFF)[0]
        if kind == LT_SIZE:
            add_cell(life.sizes, _size_bounds(bucket), cell)
        elif kind == LT_FREED:
            add_cell(life.freed, (*_life_bounds(bucket >> 8), size_lo), cell)
        elif kind == LT_HELD:
            add_cell(life.held, (*_life_bounds(bucket >> 8), size_lo), cell)
        elif kind == LT_UNKNOWN:
            add_cell(life.unknown, size_lo, cell)
        elif kind == LT_HEAPTRACK:
            add_cell(life.heaptrack, size_lo, cell)
    return out


def life_figures(frames: tuple[FrameKey, ...], by_interval: dict[int, CallsiteLife],
                 threshold: int | str) -> LifeFigures:
    """A stack's figures over its heaps: the report's temporary view and lifetimes
    (view/lifetimes.py temporary_rows, lifetime_rows), each cell estimated at its heap's interval."""
    temp_bytes = alloc_bytes = 0
    temp: list[Estimate] = []
    alloc: list[Estimate] = []
    held: list[Estimate] = []
    weights: dict[Bucket, float] = {}
    for interval, life in by_interval.items():
        for c in temporary_cells(life, threshold):
            temp_bytes += c.size
            temp.append(cell_estimate(c, interval))
        for c in life.sizes.values():
            alloc_bytes += c.size
            alloc.append(cell_estimate(c, interval))
        held += [cell_estimate(c, interval) for c in life.held.values()]
        for (lo, hi, _size), c in life.freed.items():
            weights[(lo, hi)] = weights.get((lo, hi), 0.0) + cell_estimate(c, interval).value
    return LifeFigures(frames, temp_bytes, combine(temp), alloc_bytes, combine(alloc), combine(held),
                       quantile(weights, 0.5), quantile(weights, 0.9))
