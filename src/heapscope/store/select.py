"""Choosing what a command looks at: views, processes by pid, dumps by number.

One place for these, so that every command says the same line, with the same
error class, for the same mistake (an unknown view, a pid the profile does not
have, a dump number out of range).
"""

from __future__ import annotations

import sqlite3

from heapscope.errors import UnknownDumpError, UnknownProcessError, UnknownViewError, UsageError
from heapscope.model import BRK_HEAP_NAME, HEAP_NAME, MMAP_HEAP_NAME, PY_HEAP_NAME, VIEWS, CallsiteId
from heapscope.records import Record
from heapscope.store.reader import Dump, Process, Profile, ViewValues
from heapscope.store.values import req_int_from_sql

#: What each view measures, for --help texts.
VIEW_HELP = {
    "space": "bytes not yet freed at the dump",
    "alloc_space": "bytes allocated up to the dump, freed or not",
    "objects": "allocations not yet freed at the dump",
    "alloc_objects": "allocations made up to the dump",
}


class UnknownHeapError(UsageError):
    """--heap names a heap the profile does not have."""


def check_view(view: str) -> str:
    """`view` when it is one of VIEWS; UnknownViewError otherwise."""
    if view not in VIEWS:
        raise UnknownViewError(f"unknown view {view!r} (one of: {', '.join(VIEWS)})")
    return view


def process_label(p: Process) -> str:
    """`name (pid N)`: how a process is named in messages and exports (store/labels.py: `cc1
    parse.c (pid N)` for a compiler)."""
    from heapscope.store.labels import process_label as label

    return f"{label(p.info)} (pid {p.info.pid})"


def select_processes(profile: Profile, pid: int | None) -> list[Process]:
    """All processes (pid None), or those with `pid`; UnknownProcessError naming the pids present."""
    processes = profile.processes()
    if pid is None:
        return processes
    chosen = [p for p in processes if p.info.pid == pid]
    if not chosen:
        raise _unknown_pid(profile, pid, processes)
    return chosen


def process_with_dump(profile: Profile, pid: int | None, like: Process | None = None) -> Process:
    """The process `pid` that has a dump, or (pid None) the one with a dump that held the most
    at its peak (the first such in the profile's order when none has peak rows): pyenv's
    python3 shim starts env and bash before the Python program, under the same pid. `like`:
    a process of another profile; one of the same executable comes first (diff's two sides)."""
    processes = profile.processes()
    if pid is None:
        held: dict[int, int] = {}  # each process's heaps at their peaks, in one query
        for upid, _heap, size, _count in heap_peaks(profile):
            held[upid] = held.get(upid, 0) + size
        exe = (like.info.exe or like.info.name) if like is not None else None
        processes = sorted(processes, key=lambda p: (exe is not None and (p.info.exe or p.info.name) != exe,
                                                     -held.get(p.info.upid, 0)))
    for p in processes:
        if (pid is None or p.info.pid == pid) and profile.last_dump_ts(p.info.upid) is not None:
            return p
    if pid is not None and not any(p.info.pid == pid for p in processes):
        raise _unknown_pid(profile, pid, processes)
    what = f"process pid {pid} has no dump" if pid is not None else "no process has a dump"
    raise UnknownProcessError(f"{profile.path}: {what}")


def _unknown_pid(profile: Profile, pid: int, processes: list[Process]) -> UnknownProcessError:
    present = ", ".join(str(p) for p in sorted({p.info.pid for p in processes})) or "none"
    return UnknownProcessError(f"{profile.path}: no process with pid {pid} (pids present: {present})")


def dump_position(n: int | None, count: int, what: str, flag: str = "--dump") -> int:
    """The 0-based position of dump `n` among `count`: 1 is the first, -1 (and None) the last."""
    if n is None and count:
        return count - 1
    if n is None or n == 0 or not -count <= n <= count:
        shown = "(none)" if n is None else n
        raise UnknownDumpError(
            f"{flag} {shown}: {what} has {count} dump(s)" + (f" (use 1..{count}, or -1 for the last)" if count else ""))
    return n - 1 if n > 0 else count + n


def pick_dump(dumps: list[Dump], n: int | None, what: str) -> Dump | None:
    """Dump `n` of a process (see dump_position); None when it has no dumps and none was asked for."""
    if not dumps:
        return None
    return dumps[dump_position(n, len(dumps), what)]


def pick_dumps(dumps: list[Dump], n: int | None, what: str) -> list[Dump]:
    """All dumps when `n` is None, else just dump `n`."""
    if n is None:
        return dumps
    d = pick_dump(dumps, n, what)
    return [] if d is None else [d]


# ---- which state of a process a view shows: the peak, the end, or dump N ----

#: Views that answer "what held memory": they show the peak unless told otherwise.
HELD_VIEWS = frozenset({"space", "objects"})

DUMP_HELP = ("which state to show: peak (the process's peak of unreleased memory), end (its last dump),"
             " or N (dump N, 1 = first, -1 = last); default: peak for space/objects, end for the alloc views")


def parse_dump(text: str) -> str | int:
    """`--dump` as given: 'peak', 'end', or a dump number; UnknownDumpError otherwise."""
    t = text.strip().lower()
    if t in ("peak", "end"):
        return t
    try:
        n = int(t)
    except ValueError:
        raise UnknownDumpError(
            f"--dump {text!r}: use peak, end, or a dump number (1 = first, -1 = last)") from None
    return n  # checked against each process's dumps when used (dump_position)


def default_dump(view: str) -> str:
    """peak for the views of held memory, end for the allocated totals (which only grow)."""
    return "peak" if view in HELD_VIEWS else "end"


class State(Record, frozen=True):
    """The values of one process at the state a command shows, and which state that is."""

    kind: str  # peak, end, dump
    ts: int
    label: str  # "peak at 1.20 s", "end (dump 2 of 2, exit)", "dump 1 of 3 (periodic)"
    values: dict[CallsiteId, ViewValues]  # raw sampled values (see heapscope.estimate)
    interval: int  # the process's sampling interval, for estimates


def process_interval(profile: Profile, p: Process | None = None) -> int:
    """The sampling interval in bytes: the process's own, else the profile's metadata, else 1."""
    if p is not None and p.flags is not None and p.flags.sampling_interval_bytes > 0:
        return p.flags.sampling_interval_bytes
    return profile.interval()


def _seconds(p: Process, ts: int) -> str:
    return f"{max(0, ts - p.info.start_ts) / 1e9:.2f} s" if p.info.start_ts else f"ts {ts}"


def process_state(profile: Profile, p: Process, choice: str | int | None, view: str = "space") -> State | None:
    """The state `choice` (None: default_dump(view)) of process `p`; None when it has no dumps.

    The peak falls back to the end, saying so, for a process without peak rows
    (profiles written before the peak table, or nothing allocated).
    """
    choice = default_dump(view) if choice is None else choice
    upid = p.info.upid
    peak = profile.peak_values(upid) if choice == "peak" else None
    chosen = _chosen(p, profile.dumps(upid), choice, None if peak is None else peak[0])
    if chosen is None:
        return None
    kind, ts, label = chosen
    values = peak[1] if peak is not None else profile.callsite_values(upid, ts)
    return State(kind, ts, label, values, process_interval(profile, p))


def state_labels(profile: Profile, processes: list[Process], choice: str | int | None,
                 view: str = "space") -> list[tuple[Process, str]]:
    """process_state's label of each of `processes` that has dumps, without its values: a
    line that names the state an export holds read every process's peak rows for it (a
    build's: 0.2 s), which the Perfetto export, reading each heap alone, read again."""
    choice = default_dump(view) if choice is None else choice
    peaks = _peak_stamps(profile) if choice == "peak" else {}
    chosen = ((p, _chosen(p, profile.dumps(p.info.upid), choice, peaks.get(p.info.upid))) for p in processes)
    return [(p, c[2]) for p, c in chosen if c is not None]


def _chosen(p: Process, dumps: list[Dump], choice: str | int, peak_ts: int | None) -> tuple[str, int, str] | None:
    """(kind, ts, label) of the state `choice` of `p`, given its dumps and its peak's ts (None:
    no peak rows, or not asked for); None when it has no dumps and no peak."""
    if peak_ts is not None:
        return "peak", peak_ts, f"peak at {_seconds(p, peak_ts)}"
    if not dumps:
        return None
    if isinstance(choice, int):
        pos = dump_position(choice, len(dumps), process_label(p))
        d = dumps[pos]
        return "dump", d.ts_end, f"dump {pos + 1} of {len(dumps)} ({d.reason or '?'}, at {_seconds(p, d.ts_end)})"
    d = dumps[-1]
    label = f"end (dump {len(dumps)} of {len(dumps)}, {d.reason or '?'}, at {_seconds(p, d.ts_end)})"
    return "end", d.ts_end, label + "; no peak recorded" if choice == "peak" else label


def _peak_stamps(profile: Profile) -> dict[int, int]:
    """upid -> the ts of its peak (Profile.peak_values' ts) in the heap shown, for every process
    with peak rows, in one query."""
    db = profile.sql_connection()
    with profile.reading():
        if not _has_table(db, "heapscope_peak_allocation"):
            return {}
        col = "heapscope_peak_allocation."
        return {req_int_from_sql(upid, col + "upid"): req_int_from_sql(ts, col + "ts")
                for upid, ts in db.execute("SELECT upid, MAX(ts) FROM heapscope_peak_allocation GROUP BY upid")}


# -- heaps (custom heaps; Python's heap) ----------------------------------------
#
# A pool's memory is seen twice: as the malloc block it carved from (in
# libc.malloc) and as the objects it hands out (in its own heap). So views
# that add values up show the default heap unless told otherwise, and list
# the others with their own peaks. The rule, also in docs/profile.md:
#   - libc.malloc with those of python.pymalloc, mmap and brk the profile
#     has (the client books each request once: in Python's heap when it came
#     through Python's allocator domains, in mmap and brk when the program
#     mapped the memory itself, never malloc's own mappings; so they are
#     disjoint and their sum is the program's memory: docs/mmap-heaps.md);
#   - else the only heap; else, as Perfetto's UI opens a heapprofd trace at
#     its first heap, the heap that held the most at its peak (ties by name).
# Several heaps shown together are named NAME+NAME (a heap name has no '+');
# --heap takes that form too. libc.malloc, python.pymalloc, mmap and brk share one peak
# (the producer's trackers share it: bookkeeping/tracker.h), so their rows of
# heapscope_peak_allocation are at one ts and add up to the process's peak;
# alone, each is its state there. A custom heap's rows are at its own peak:
# shown with another heap, the rows of each are summed (at most the peak of
# the sum), at the later ts.

#: --heap all: every heap merged, an explicit choice (pool memory counted twice).
ALL_HEAPS = "all"
#: Joins the heaps shown together (libc.malloc+python.pymalloc).
HEAP_JOIN = "+"

HEAP_HELP = ("the heap to show: the default is libc.malloc, with python.pymalloc (a Python program), mmap"
             " and brk (what the program mapped itself) added when present (they never hold the same memory);"
             " a heap by name, several as A+B, or all"
             " (every heap merged: memory a pool hands out is counted twice)")

#: The tables that carry a heap_name, shadowed by select_heap.
_HEAP_TABLES = ("heap_profile", "heap_profile_allocation", "heapscope_peak_allocation",
                "heapscope_memory_series", "heapscope_memory_sample", "heapscope_callsite_lifetime",
                "heapscope_callsite_size")
#: Those a profile written before them lacks (store/series.py, store/lifetimes.py).
_NEWER_TABLES = ("heapscope_memory_series", "heapscope_memory_sample", "heapscope_callsite_lifetime",
                 "heapscope_callsite_size")

#: The heaps shown together by default, those the profile has, in this order (the rule above).
_JOINT = (HEAP_NAME, PY_HEAP_NAME, MMAP_HEAP_NAME, BRK_HEAP_NAME)
_ORDER = {name: i for i, name in enumerate(_JOINT)}


def _heap_order(name: str) -> tuple[int, str]:
    return _ORDER.get(name, len(_JOINT)), name


def heap_names(profile: Profile) -> list[str]:
    """The heaps that have dumps in the profile: libc.malloc, python.pymalloc, mmap, brk, then by name."""
    return sorted(profile.heap_names(), key=_heap_order)


def heap_peaks(profile: Profile) -> list[tuple[int, str, int, int]]:
    """(upid, heap name, bytes, allocations) unreleased at each process heap's peak: libc.malloc's
    and python.pymalloc's at the one they share, a custom heap's at its own."""
    return sorted(profile.heap_peaks(), key=lambda x: (x[0], *_heap_order(x[1])))


def heap_members(shown: str | None) -> list[str] | None:
    """The heaps a choice shows (resolve_heap's answer): one or several; None for all."""
    return None if shown is None else shown.split(HEAP_JOIN)


def default_heap(profile: Profile) -> str | None:
    """The heap (or heaps, A+B) views show when no --heap is given (the rule above); None
    without dumps."""
    names = heap_names(profile)
    if HEAP_NAME in names:
        return HEAP_JOIN.join(n for n in names if n in _ORDER)
    if len(names) <= 1:
        return names[0] if names else None
    held: dict[str, int] = {}
    for _upid, name, size, _count in heap_peaks(profile):
        held[name] = held.get(name, 0) + size
    return min(names, key=lambda n: (-held.get(n, 0), n))


def resolve_heap(profile: Profile, heap: str | None) -> str | None:
    """--heap as given (None: not given) -> the heap (or heaps, A+B, in heap_names' order) to
    show, None for every heap merged (--heap all). UnknownHeapError naming the heaps present for
    a heap the profile lacks."""
    if heap is None:
        return default_heap(profile)
    if heap == ALL_HEAPS:
        return None
    names = heap_names(profile)
    wanted = set(heap.split(HEAP_JOIN))
    missing = sorted(wanted - set(names))
    if missing:
        raise UnknownHeapError(f"{profile.path}: no heap named {missing[0]!r} (heaps: {', '.join(names) or 'none'};"
                               f" or {ALL_HEAPS} for every heap merged)")
    return HEAP_JOIN.join(n for n in names if n in wanted)


def select_heap(profile: Profile, heap: str | None) -> str | None:
    """Make every later read of `profile` see only one heap: `heap` as --heap takes it (None:
    the default heap; "all": every heap, merged). Returns the heap shown, None for all.

    Temporary views named like the tables shadow them on this connection
    (SQLite resolves an unqualified name in the temp schema first), so every
    reader query, view and export sees one heap without knowing of heaps.
    Can be called again to switch heaps. UnknownHeapError as resolve_heap.
    """
    shown = resolve_heap(profile, heap)
    with profile.reading():
        _shadow_heaps(profile, heap_members(shown))
    return shown


def _text_literal(text: str) -> str:
    """`text` as an SQL literal that any text survives (quotes, NULs): its UTF-8 bytes in hex."""
    return f"CAST(X'{text.encode('utf-8', 'surrogateescape').hex()}' AS TEXT)"


def _shadow_heaps(profile: Profile, members: list[str] | None) -> None:
    from heapscope.store.alloc_labels import labelled_source

    db = profile.sql_connection()
    for table in _HEAP_TABLES:
        db.execute(f"DROP VIEW IF EXISTS temp.{table}")
    profile.forget_values()
    source = {t: labelled_source(db, t) for t in _HEAP_TABLES}  # --label's rows (store/alloc_labels.py)
    labelled = any(src.startswith("temp.") for src in source.values())
    if (members is None or len(heap_names(profile)) <= len(members) == 1) and not labelled:
        return  # nothing to hide
    if members is None:  # every heap, one label's rows
        for table in _HEAP_TABLES:
            if source[table].startswith("temp."):
                db.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {source[table]}")
        return
    hide = len(heap_names(profile)) > len(members)
    # Views take no parameters; each name is one of heap_names, read from the profile.
    among = "(" + ", ".join(_text_literal(n) for n in members) + ")"
    # Rows at one peak per process already (as `record` writes them): the heaps' peak rows need
    # no view to line them up, only the heap filter the other tables take (a build's summary read
    # its peaks 55 ms slower through that view; the check costs ~20).
    one_peak = len(members) == 1 or profile.peaks_at_one_ts()
    for table in _HEAP_TABLES:
        peaks = table == "heapscope_peak_allocation"
        lined_up = peaks and not one_peak
        if not lined_up and not hide and not source[table].startswith("temp."):
            continue
        if (peaks or table in _NEWER_TABLES) and not _has_table(db, table):
            continue
        if lined_up:
            # Each heap's peak rows, all at the latest of those peaks: a reader takes one
            # peak per process (peak_tops.peak_callsites). One ts for heaps sharing a peak.
            # CROSS JOIN keeps the rows outside and the per-process peaks inside, looked
            # up by an automatic index: with a plain JOIN SQLite scanned every row once per
            # process (a build's 98k rows, 113 processes: 1.05 s for a read of all, 0.14 now).
            cols = [str(r[1]) for r in db.execute(f"PRAGMA main.table_info({table})")]
            out = ", ".join("m.peak_ts AS ts" if c == "ts" else f"a.{c}" for c in cols)
            db.execute(f"CREATE TEMP VIEW {table} AS SELECT {out} FROM {source[table]} a CROSS JOIN"
                       f" (SELECT upid, MAX(ts) AS peak_ts FROM {source[table]} WHERE heap_name IN {among}"
                       f" GROUP BY upid) m ON m.upid = a.upid WHERE a.heap_name IN {among}")
            continue
        db.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {source[table]} WHERE heap_name IN {among}")


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    row = db.execute("SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row is not None


def heap_label(heap: str | None) -> str:
    """How a heap choice is named in headers: the heap's name (heaps: "A + B"), or 'all heaps merged'."""
    return (" + ".join(heap.split(HEAP_JOIN)) if heap is not None else "all heaps merged")
