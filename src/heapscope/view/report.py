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

The Python view (the default for a process whose stacks hold Python frames;
`report --native` turns it off) leaves native frames out: what
native code allocated counts for the Python frame that called it. Its rows
are (function, file, line), as memray's are: `make pyobjects.py:20` and
`make pyobjects.py:21` are two rows, so a row's location is the very line
that holds its self, and a function's lines each rank on their own. A stack
without any Python frame (what the interpreter allocated before running any
code) is one row, NO_PYTHON. Native rows stay one per function; their
location is the line of the function through which the most is held (its
total, callees included).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence

from heapscope.errors import UsageError
from heapscope.estimate import (
    Estimate,
    add_values,
    bytes_stderr,
    combine,
    desampled,
    desampled_map,
    view_estimate,
)
from heapscope.model import CallsiteId, FrameId
from heapscope.records import Record, field, replace
from heapscope.store.reader import Process as StoredProcess
from heapscope.store.reader import Profile, Stat, ViewValues, mapping_basename
from heapscope.store.select import State, check_view, process_interval, process_state, select_processes
from heapscope.units import format_bytes
from heapscope.view._paths import function_totals
from heapscope.view.summary import MINOR_SHARE, count_names, is_minor
from heapscope.view.tree import NO_PYTHON, frame_functions


class FunctionRow(Record, frozen=True):
    """One line of the report."""

    function: str  # demangled name, or `lib+0x...` when unknown; inlined ones end with ` [inlined]`
    library: str  # basename of the mapping's file
    self_value: int  # callsites whose leaf frame is this function
    total_value: int  # callsites with this function anywhere on their path, once each
    source: str = ""  # a Python row's file:line; a native row's line where it holds the most; '' when unknown
    samples: int | None = None  # object views at interval > 1: the raw samples behind self_value


#: How the table is ranked.
SORTS = ("self", "total")


class ProcessReport(Record):
    """The report of one process (or of processes merged) for one view at one state."""

    process: StoredProcess  # the first of `processes`
    view: str  # one of heapscope.model.VIEWS
    ts: int | None  # the timestamp the values are taken at; None without dumps
    dump_count: int
    view_total: int  # the view's value over the whole process (all callsites), objects de-sampled
    rows: list[FunctionRow]  # every function with a non-zero self or total, ranked by `sort`
    warnings: list[str] = field(default_factory=list)  # producer flags and data-loss stats
    state: str = ""  # which state the values are of: "peak at 1.20 s", "end (...)"
    processes: list[StoredProcess] = field(default_factory=list)  # more than one when merged
    samples: int = 0  # raw sample count behind the view (its objects family)
    estimate: Estimate | None = None  # the object views at interval > 1: estimate and standard error
    interval: int = 1
    common: list[str] = field(default_factory=list)  # root functions on every stack, left out of rows
    sort: str = "self"
    values: dict[CallsiteId, ViewValues] = field(default_factory=dict)  # per callsite, `view` de-sampled
    coverage: str = ""  # "seen N of RSS M": the heaps' peak against the process's peak RSS (one process)
    python_only: bool = False  # the Python view: native frames left out of rows (and of --tree/--stacks)
    has_python: bool = False  # some stack of the report holds a Python frame


class ProcessLine(Record, frozen=True):
    """One line of the table of processes a report opens with."""

    process: StoredProcess
    peak: int  # sampled bytes unreleased at the process's peak (or at its end without peak rows)
    allocated: int  # bytes allocated up to the end
    samples: int  # samples taken up to the end
    lifetime_ns: int | None  # end_ts - start_ts, None when unknown


def build_reports(
    profile: Profile, view: str, pid: int | None = None,
    focus: re.Pattern[str] | None = None, ignore: re.Pattern[str] | None = None,
    dump: str | int | None = None, sort: str = "self", merge: str | None = None, keep_common: bool = False,
    python_only: bool | None = False, skip: Collection[int] = (),
) -> list[ProcessReport]:
    """One report per process of the profile (only those with `pid` when given; none for a
    group whose processes are all in `skip`, upids: what is not shown is not computed).

    With `focus`, only callsites with a matching function on their path count;
    with `ignore`, callsites with a matching function on their path do not.
    `dump` chooses the state (store.select.process_state); `merge="exe"`
    gives one report per executable, its processes' values summed. With
    `keep_common`, root functions on every stack stay in the rows. With
    `python_only`, native frames are left out (function_rows); with None, in
    each report whose stacks hold a Python frame (what `report` does by default).
    """
    check_view(view)
    processes = select_processes(profile, pid)
    groups: dict[str, list[StoredProcess]] = {}
    for p in processes:
        groups.setdefault(executable(p) if merge is not None else str(p.info.upid), []).append(p)
    return [build_group_report(profile, g, view, focus=focus, ignore=ignore, dump=dump, sort=sort,
                               keep_common=keep_common, python_only=python_only)
            for g in groups.values() if not all(p.info.upid in skip for p in g)]


def executable(p: StoredProcess) -> str:
    """What `--merge exe` groups by: the executable's path, else the process name."""
    return p.info.exe or p.info.name or "?"


def build_process_report(
    profile: Profile, process: StoredProcess, view: str, ts: int | None = None,
    focus: re.Pattern[str] | None = None, ignore: re.Pattern[str] | None = None,
    dump: str | int | None = None, sort: str = "self", python_only: bool | None = False,
) -> ProcessReport:
    """The report of one process at the state `dump` (default: by view), or at dump timestamp `ts`."""
    if ts is not None:
        upid = process.info.upid
        values = profile.callsite_values(upid, ts)
        state = State("dump", ts, f"at ts {ts}", values, process_interval(profile, process))
        return _report(profile, [process], [state], view, focus, ignore, sort, python_only=python_only)
    return build_group_report(profile, [process], view, focus=focus, ignore=ignore, dump=dump, sort=sort,
                              python_only=python_only)


def build_group_report(
    profile: Profile, processes: list[StoredProcess], view: str,
    focus: re.Pattern[str] | None = None, ignore: re.Pattern[str] | None = None,
    dump: str | int | None = None, sort: str = "self", keep_common: bool = False,
    python_only: bool | None = False,
) -> ProcessReport:
    """One report over `processes`, each at its own state `dump`, values summed per callsite."""
    states = [process_state(profile, p, dump, view) for p in processes]
    return _report(profile, processes, states, view, focus, ignore, sort, keep_common, python_only)


def _report(profile: Profile, processes: list[StoredProcess], states: list[State | None], view: str,
            focus: re.Pattern[str] | None, ignore: re.Pattern[str] | None, sort: str,
            keep_common: bool = False, python_only: bool | None = False) -> ProcessReport:
    if sort not in SORTS:
        raise UsageError(f"unknown sort {sort!r} (one of: {', '.join(SORTS)})")
    raw: dict[CallsiteId, ViewValues] = {}
    estimates: dict[CallsiteId, ViewValues] = {}
    interval = 1
    # De-sampling changes only the object views: for a byte view the estimates are the
    # values as sampled (a compiler's peak: 2,500 callsites a process, each estimated twice).
    objects = view in ("objects", "alloc_objects")
    shown = [s for s in states if s is not None]
    if len(shown) == 1:
        interval = max(interval, shown[0].interval)
        raw = dict(shown[0].values)
        estimates = desampled_map(raw, shown[0].interval) if objects else raw
    for st in shown if len(shown) > 1 else ():
        interval = max(interval, st.interval)
        for cs, v in st.values.items():
            _add(raw, cs, v)
            _add(estimates, cs, desampled(v, st.interval) if objects else v)
    if focus is not None or ignore is not None:
        keep = filter_callsites(profile, raw, focus, ignore)
        raw = {cs: v for cs, v in raw.items() if cs in keep}
        estimates = {cs: v for cs, v in estimates.items() if cs in keep}
    leaf_values = {cs: v.get(view) for cs, v in estimates.items()}
    python = profile.python_frames()
    has_python = holds_python(profile, leaf_values, python)
    by_python = has_python if python_only is None else python_only
    rows, common = function_rows(profile, leaf_values, sort, keep_common, by_python, python)
    if view in ("objects", "alloc_objects") and interval > 1:
        raw_rows, _ = function_rows(profile, {cs: v.get(view) for cs, v in raw.items()}, sort, True, by_python,
                                    python)
        # A Python row is its line: the source is part of its key.
        raw_self = {(x.function, x.library, x.source if by_python else ""): x.self_value for x in raw_rows}
        rows = [replace(x, samples=raw_self.get((x.function, x.library, x.source if by_python else ""), 0))
                for x in rows]
    est = None
    samples = sum(v.objects if view in ("space", "objects") else v.alloc_objects for v in raw.values())
    if view in ("objects", "alloc_objects") and interval > 1:
        est = combine([view_estimate({cs: v}, view, st.interval) for st in states if st is not None
                       for cs, v in st.values.items() if cs in raw])
    if len(processes) == 1:
        label = shown[0].label if shown else ""
    else:
        kinds = sorted({s.kind for s in shown})
        label = f"sum of {len(processes)} processes, each at its {'/'.join(kinds) or 'state'}"
    first = processes[0]
    warnings = [w for p in processes for w in process_warnings(p, profile.stats(p.info.upid))]
    return ProcessReport(
        process=first, view=view, ts=shown[0].ts if shown else None,
        dump_count=sum(len(profile.dumps(p.info.upid)) for p in processes),
        view_total=sum(leaf_values.values()), rows=rows, warnings=warnings, state=label,
        processes=list(processes), samples=samples, estimate=est, interval=interval, common=common, sort=sort,
        values=estimates,
        coverage=coverage_line(profile.stats(first.info.upid)) if len(processes) == 1 else "",
        python_only=by_python, has_python=has_python,
    )


def _add(acc: dict[CallsiteId, ViewValues], cs: CallsiteId, v: ViewValues) -> None:
    o = acc.get(cs)
    acc[cs] = v if o is None else add_values(o, v)


def process_lines(profile: Profile, processes: list[StoredProcess]) -> list[ProcessLine]:
    """The table of processes: ranked by peak, then allocated bytes."""
    out = []
    peaks = profile.peak_sums()
    ends = profile.end_sums()  # every process's end in one query, not its values per callsite
    for p in processes:
        upid = p.info.upid
        space, allocated, samples = ends.get(upid, (0, 0, 0))
        held = peaks.get(upid, space)
        life = None if p.info.end_ts is None or not p.info.start_ts else p.info.end_ts - p.info.start_ts
        out.append(ProcessLine(p, held, allocated, samples, life))
    out.sort(key=lambda r: (-r.peak, -r.allocated, r.process.info.upid))
    return out


def minor_line(processes: Sequence[StoredProcess]) -> str:
    """The line that names the processes minor_processes() left out: `... and 38 more processes,
    each under 1% ... (bash ×16, env ×16, ...)` (report's table, leaks)."""
    n = len(processes)
    names = count_names([p.info.name or os.path.basename(p.info.exe or "") or "?" for p in processes])
    return (f"... and {n:,} more process{'es' if n != 1 else ''}, each under {100 / MINOR_SHARE:g}% of the"
            f" largest's peak and allocations ({names}), not shown: --pid PID shows one, --all-processes every one")


def minor_processes(ranked: Sequence[ProcessLine]) -> set[int]:
    """The upids of the processes too small next to the largest to be shown in full (view.summary.is_minor)."""
    if not ranked:
        return set()
    top_peak = max(r.peak for r in ranked)
    top_allocated = max(r.allocated for r in ranked)
    return {int(r.process.info.upid) for r in ranked if is_minor(r.peak, r.allocated, top_peak, top_allocated)}


def filter_callsites(
    profile: Profile, values: dict[CallsiteId, ViewValues],
    focus: re.Pattern[str] | None, ignore: re.Pattern[str] | None,
) -> dict[CallsiteId, ViewValues]:
    """The callsites whose path passes `focus` (a function matches) and `ignore` (none matches)."""
    from heapscope.view.tree import build_tree, path_filter

    tree = build_tree(profile, sorted(values))
    ok = path_filter(tree, focus, ignore)

    def passes(cs: CallsiteId) -> bool:
        node = tree.node_of.get(cs)
        if node is None:  # no row for this callsite (a damaged profile): no function on its path
            return focus is None
        return ok[node]

    return {cs: v for cs, v in values.items() if passes(cs)}


def holds_python(profile: Profile, values: dict[CallsiteId, int], python: set[FrameId]) -> bool:
    """Whether the path of some callsite of `values` (a zero value too: the answer is the same
    for every view of one state) has a frame of `python` on it."""
    if not python:
        return False
    callsites = profile.callsites()
    without: set[CallsiteId] = set()  # callsites whose path has none, walked already
    for leaf in values:
        chain: list[CallsiteId] = []
        node: CallsiteId | None = leaf
        while node is not None and node not in without:
            entry = callsites.get(node)
            if entry is None:
                break
            if entry[1] in python:
                return True
            chain.append(node)
            node = entry[0]
        without.update(chain)
    return False


# Long on purpose: one walk of every stack that totals self, total and source lines at once; it is the
# hot loop of `report`, and its interned tables stay local.
def function_rows(profile: Profile, leaf_values: dict[CallsiteId, int], sort: str = "total",
                  keep_common: bool = False, python_only: bool = False,
                  python_frames: set[FrameId] | None = None) -> tuple[list[FunctionRow], list[str]]:
    """Self and total per function from per-callsite values, ranked by `sort` (self or total), and
    the root functions that are on every stack (left out of the rows when more than one function
    remains). Inlined functions are functions of their own, named `name [inlined]`.

    With python_only (the Python view), native frames are skipped: a Python
    frame's self is what it allocated through native code it called, a row is
    a Python (function, file, line) and its source that line, and what stacks
    without any Python frame hold is one row, NO_PYTHON. `python_frames`: the
    profile's Python frames when the caller has read them already."""
    callsites = profile.callsites()
    functions = frame_functions(profile)
    python = (profile.python_frames() if python_frames is None else python_frames) if python_only else None

    # Intern functions and source lines to small ints so the walk (_paths.c) hashes ints only.
    function_ids: dict[tuple[str, str, str], int] = {}
    source_ids: dict[str, int] = {}
    frame_fns: dict[FrameId, tuple[int, ...]] = {}

    def fns_of(frame_id: FrameId) -> tuple[int, ...]:
        fns: list[int] = []
        for f in functions(frame_id):
            src = ("" if f.source_file is None else f"{f.source_file}:{f.line_number}" if f.line_number
                   else f.source_file)
            # The Python view's rows are lines: the source is part of the key.
            key = (f.name, mapping_basename(f.map_name), src if python is not None else "")
            fns += (function_ids.setdefault(key, len(function_ids)),
                    source_ids.setdefault(src, len(source_ids)) if src else -1)
        got = frame_fns[frame_id] = tuple(fns)
        return got

    # A stack without any Python frame is one row, NO_PYTHON (interned first: ids are not shown).
    no_python = function_ids.setdefault((NO_PYTHON, "", ""), 0) if python is not None else 0
    # One walk of every stack, leaf to root (the reader has refused parent cycles): a function's
    # self from the leaves whose innermost function it is, its total once per path.
    with profile.reading():  # absurd counts give estimates past 126 bits: OverflowError, a damaged profile
        self_values, totals, where_rows, prefix = function_totals(callsites, leaf_values, frame_fns, fns_of,
                                                                  python, no_python)
    total_values = dict(totals)
    sources = list(source_ids)
    where: dict[int, dict[str, int]] = {}  # function -> source line -> value held there
    for fn, src_id, held in where_rows:
        where.setdefault(fn, {})[sources[src_id]] = held

    names = {fn: key for key, fn in function_ids.items()}
    # A root function on every stack says nothing about where memory goes;
    # the leaf of a single stack stays (it is where the memory is).
    common = [fn for fn in (prefix or []) if self_values.get(fn, 0) == 0]
    dropped = set() if keep_common else set(common)
    rows = [  # fields by position: a Record's keyword call takes its slow path (14k rows of a build)
        FunctionRow(names[fn][0], names[fn][1], self_values.get(fn, 0), total,
                    max(where[fn].items(), key=lambda kv: (abs(kv[1]), kv[0]))[0] if fn in where else "")
        for fn, total in total_values.items()
        if (total != 0 or self_values.get(fn, 0) != 0) and fn not in dropped
    ]
    if sort == "self":
        rows.sort(key=lambda r: (-r.self_value, -r.total_value, r.function, r.library))
    else:
        rows.sort(key=lambda r: (-r.total_value, -r.self_value, r.function, r.library))
    return rows, [names[fn][0] for fn in common]


def coverage_line(stats: list[Stat]) -> str:
    """"seen N of RSS M" from the peak_heap_bytes and peak_rss_bytes stats, with heapscope's own
    part of M when known (client_own_rss_bytes); "" without an RSS."""
    by_name = {s.name: s.value for s in stats}
    rss = by_name.get("peak_rss_bytes", 0)
    if not rss:
        return ""
    own = by_name.get("client_own_rss_bytes", 0)
    part = f"heapscope's own {format_bytes(own)} of it; " if own else ""
    return f"seen {format_bytes(by_name.get('peak_heap_bytes', 0))} of RSS {format_bytes(rss)} ({part}peaks)"


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
        elif s.name == "direct_map_calls" and s.value:
            out.append(f"{s.value:,} {s.description}")  # memory in no heap (docs/mmap-heaps.md)
        elif s.severity in ("data_loss", "error") and s.value != 0:
            out.append(f"{s.name} = {s.value:,}")
    return out


def bytes_error(interval: int, total: int, rows: Sequence[FunctionRow]) -> str:
    """The standard error of a byte view's figures at `interval` (estimate.bytes_stderr), said for
    the total and the largest row: at one sample per 512 KiB a row of 1 MiB is within ~0.7 MiB only."""
    text = f"±{format_bytes(round(bytes_stderr(interval, total)))} on the total"
    first = max((row.self_value for row in rows), default=0)
    if 0 < first < total:
        text += f", ±{format_bytes(round(bytes_stderr(interval, first)))} on a row of {format_bytes(first)}"
    return text + " (standard errors: heapscope help estimates)"  # fits 120 columns with the label
