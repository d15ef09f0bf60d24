"""The top-functions report: per process, which functions hold (or allocated) the most.

Owns the arithmetic of self and total values; builds typed rows from a
store.reader.Profile and prints nothing (cli/report.py does).

A function is a (frame name, mapping basename) pair, so the same symbol in
two libraries stays apart and unsymbolized frames get their `lib+0x...`
name. For one view at one timestamp:

    self(F)  = sum of the callsites whose own (leaf) frame is F
    total(F) = sum of the callsites that have F anywhere on their path,
               each callsite counted once per function even when F recurses

    root ── main ── parse ── parse ── malloc site A (100)
                 └─ emit ──────────── malloc site B (30)

    main: self 0, total 130; parse: self 100, total 100 (not 200); emit: self 30, total 30
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from heapscope.model import CallsiteId, FrameId
from heapscope.store.reader import Process as StoredProcess
from heapscope.store.reader import Profile, Stat, ViewValues, mapping_basename
from heapscope.store.select import check_view, select_processes
from heapscope.view.units import human_bytes


@dataclass(frozen=True, slots=True)
class FunctionRow:
    """One line of the report."""

    function: str  # demangled name, or `lib+0x...` when unknown
    library: str  # basename of the mapping's file
    self_value: int  # callsites whose leaf frame is this function
    total_value: int  # callsites with this function anywhere on their path, once each


@dataclass(slots=True)
class ProcessReport:
    """The report of one process for one view at one timestamp."""

    process: StoredProcess
    view: str  # one of heapscope.model.VIEWS
    ts: int | None  # the dump timestamp the values are taken at; None without dumps
    dump_count: int
    view_total: int  # the view's value over the whole process (all callsites)
    rows: list[FunctionRow]  # every function with a non-zero self or total, by total desc
    warnings: list[str] = field(default_factory=list)  # producer flags and data-loss stats
    coverage: str = ""  # "seen N of RSS M": the heaps' peak against the process's peak RSS


def build_reports(
    profile: Profile, view: str, pid: int | None = None,
    focus: re.Pattern[str] | None = None, ignore: re.Pattern[str] | None = None,
    python_only: bool = False,
) -> list[ProcessReport]:
    """One report per process of the profile (only those with `pid` when given).

    With `focus`, only callsites with a matching function on their path count;
    with `ignore`, callsites with a matching function on their path do not.
    """
    check_view(view)
    processes = select_processes(profile, pid)
    return [build_process_report(profile, p, view, focus=focus, ignore=ignore, python_only=python_only)
            for p in processes]


def build_process_report(
    profile: Profile, process: StoredProcess, view: str, ts: int | None = None,
    focus: re.Pattern[str] | None = None, ignore: re.Pattern[str] | None = None,
    python_only: bool = False,
) -> ProcessReport:
    """The report of one process at `ts` (default: its last dump)."""
    upid = process.info.upid
    dumps = profile.dumps(upid)
    if ts is None and dumps:
        ts = max(d.ts_end for d in dumps)
    values = profile.callsite_values(upid, ts) if ts is not None else {}
    if focus is not None or ignore is not None:
        values = filter_callsites(profile, values, focus, ignore)
    leaf_values = {cs: v.get(view) for cs, v in values.items()}
    rows = function_rows(profile, leaf_values, python_only)
    return ProcessReport(
        process=process,
        view=view,
        ts=ts,
        dump_count=len(dumps),
        view_total=sum(leaf_values.values()),
        rows=rows,
        warnings=process_warnings(process, profile.stats(upid)),
        coverage=coverage_line(profile.stats(upid)),
    )


def filter_callsites(
    profile: Profile, values: dict[CallsiteId, ViewValues],
    focus: re.Pattern[str] | None, ignore: re.Pattern[str] | None,
) -> dict[CallsiteId, ViewValues]:
    """The callsites whose path passes `focus` (a function matches) and `ignore` (none matches)."""
    from heapscope.view.tree import build_tree, path_filter

    tree = build_tree(profile, sorted(values))
    ok = path_filter(tree, focus, ignore)
    return {cs: v for cs, v in values.items() if ok[tree.node_of[cs]]}


def function_rows(profile: Profile, leaf_values: dict[CallsiteId, int],
                  python_only: bool = False) -> list[FunctionRow]:
    """Self and total per function from per-callsite values, sorted by total, then self, desc.

    With python_only, native frames are skipped: a Python function's self is
    what it allocated through native code it called, and stacks without any
    Python frame do not count."""
    callsites = profile.callsites()
    frames = profile.frames()
    python = profile.python_frames() if python_only else None

    # Intern functions to small ints so the path walk below hashes ints only.
    function_ids: dict[tuple[str, str], int] = {}
    frame_function: dict[FrameId, int] = {}

    def function_of(frame_id: FrameId) -> int:
        fn = frame_function.get(frame_id)
        if fn is None:
            info = frames.get(frame_id)
            key = (info.display_name, mapping_basename(info.mapping_name)) if info else (
                f"[frame {frame_id}]", "[unknown]")
            fn = function_ids.setdefault(key, len(function_ids))
            frame_function[frame_id] = fn
        return fn

    self_values: dict[int, int] = {}
    total_values: dict[int, int] = {}
    for leaf, value in leaf_values.items():
        if value == 0:
            continue
        seen: set[int] = set()
        node: CallsiteId | None = leaf
        first = True
        # Walk leaf -> root; the reader has refused parent cycles.
        while node is not None:
            entry = callsites.get(node)
            if entry is None:
                break
            parent, frame_id = entry
            if python is not None and frame_id not in python:
                node = parent
                continue
            fn = function_of(frame_id)
            if first:
                self_values[fn] = self_values.get(fn, 0) + value
                first = False
            if fn not in seen:
                seen.add(fn)
                total_values[fn] = total_values.get(fn, 0) + value
            node = parent

    names = {fn: key for key, fn in function_ids.items()}
    rows = [
        FunctionRow(function=names[fn][0], library=names[fn][1],
                    self_value=self_values.get(fn, 0), total_value=total)
        for fn, total in total_values.items()
        if total != 0 or self_values.get(fn, 0) != 0
    ]
    rows.sort(key=lambda r: (-r.total_value, -r.self_value, r.function, r.library))
    return rows


def coverage_line(stats: list[Stat]) -> str:
    """"seen N of RSS M" from the peak_heap_bytes and peak_rss_bytes stats; "" without an RSS."""
    by_name = {s.name: s.value for s in stats}
    rss = by_name.get("peak_rss_bytes", 0)
    if not rss:
        return ""
    return f"seen {human_bytes(by_name.get('peak_heap_bytes', 0))} of RSS {human_bytes(rss)} (peaks)"


def process_warnings(process: StoredProcess, stats: list[Stat]) -> list[str]:
    """What went wrong while recording this process, one short phrase each."""
    out: list[str] = []
    f = process.flags
    if f is not None:
        # `disconnected` (exited before the session ended) is normal for a
        # child process, so it is a fact of the process, not a warning.
        if f.buffer_overran:
            out.append("buffer overran")
        if f.buffer_corrupted:
            out.append("buffer corrupted")
        if f.rejected_concurrent:
            out.append("rejected (another session profiles it)")
        if f.hit_guardrail:
            out.append("hit guardrail")
        if f.client_error:
            out.append(f"client error: {f.client_error}")
    for s in stats:
        if s.name in ("python_frames", "python_allocators") and s.severity == "data_loss":
            out.append(s.description)  # the one line saying why Python is not fully seen
        elif s.severity in ("data_loss", "error") and s.value != 0:
            out.append(f"{s.name} = {s.value:,}")
    return out
