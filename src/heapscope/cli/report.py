"""`heapscope report`: the top functions of each process of a profile, as a text table."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence

from heapscope.cli.folding import add_fold_arguments, apply_fold
from heapscope.cli.lifetimes import TEMPORARY_HELP
from heapscope.cli.lifetimes import render as render_lifetimes
from heapscope.errors import UsageError
from heapscope.model import VIEWS, unknown_code_pid
from heapscope.records import TupleRecord
from heapscope.store.alloc_labels import LABEL_HELP, select_label
from heapscope.store.labels import process_label
from heapscope.store.reader import Profile, mapping_basename, open_profile
from heapscope.store.select import (
    DUMP_HELP,
    HEAP_HELP,
    VIEW_HELP,
    heap_label,
    heap_members,
    heap_names,
    heap_peaks,
    parse_dump,
    select_heap,
    select_processes,
)
from heapscope.units import format_bytes
from heapscope.view.labels import render_by_label
from heapscope.view.names import cut_middle, elide
from heapscope.view.report import (
    SORTS,
    FunctionRow,
    ProcessLine,
    ProcessReport,
    build_reports,
    bytes_error,
    minor_line,
    minor_processes,
    process_lines,
)
from heapscope.view.summary import count_names
from heapscope.view.tree import focus_pattern
from heapscope.view.units import format_count, format_percent, format_value
from heapscope.view.wrappers import fold_line

NAME = "report"
HELP = ("print the functions that hold the most memory, per process (a Python program's: its Python lines;"
        " --native shows native frames)")

_W = len("alloc_objects:")  # width of the header labels
TEMPORARY_VIEW = "temporary"  # report's view of its own: cli/lifetimes.py



def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    p.add_argument(
        "--view", choices=(*VIEWS, TEMPORARY_VIEW), default="space",
        help="what to rank by: " + "; ".join(f"{v}: {h}" for v, h in VIEW_HELP.items())
             + f"; {TEMPORARY_VIEW}: stacks by bytes freed within --temporary (default: space)",
    )
    p.add_argument("--temporary", metavar="DURATION", help=TEMPORARY_HELP)
    p.add_argument("--lifetimes", action="store_true",
                   help="per function: allocated, %% temporary, median and p90 lifetime, %% still held at the end")
    p.add_argument("--sizes", action="store_true",
                   help="the histogram of the sizes asked for (power-of-two buckets); per stack with --focus")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows per process (default: 20)")
    p.add_argument("-p", "--pid", type=int, metavar="PID", help="only this process")
    p.add_argument("--all-processes", action="store_true",
                   help="every process in full, also those under 1%% of the largest one's peak and allocations"
                        " (by default they are named in one line)")
    p.add_argument("--tree", action="store_true",
                   help="print the call tree (functions merged per path) with totals instead of the table")
    p.add_argument("--min-percent", type=float, default=1.0, metavar="P",
                   help="--tree hides subtrees under P%% of the view's total (default: 1)")
    p.add_argument("--dump", metavar="peak|end|N", help=DUMP_HELP)
    p.add_argument("--sort", choices=SORTS, default="self",
                   help="rank functions by the memory they hold themselves (self, the default) or with"
                        " their callees (total)")
    p.add_argument("--stacks", action="store_true",
                   help="list the call stacks that hold the most (heaptrack's peak consumers), each in full,"
                        " instead of the table of functions")
    p.add_argument("--merge", choices=("exe",),
                   help="exe: one report per executable, its processes summed (each at its own state)")
    p.add_argument("--focus", metavar="REGEX",
                   help="count only call stacks with a function matching REGEX (searched, case-insensitively)")
    p.add_argument("--ignore", metavar="REGEX",
                   help="leave out call stacks with a function matching REGEX (searched, case-insensitively)")
    p.add_argument("--heap", metavar="NAME", help=HEAP_HELP)
    p.add_argument("--label", metavar="K=V", help=LABEL_HELP)
    p.add_argument("--by-label", metavar="K",
                   help="allocated and unreleased bytes per value of allocation label K, the top stacks of each")
    add_fold_arguments(p)
    p.add_argument("--wide", action="store_true",
                   help="full function names; by default the table fits the terminal (120 columns when piped),"
                        " C++ template arguments, return types and namespaces elided in the middle")
    frames = p.add_mutually_exclusive_group()
    frames.add_argument("--python-only", action="store_true",
                        help="the Python view for every process, the default for one whose stacks hold Python "
                             "frames: native frames hidden, each row a Python function at one line (file:line), "
                             "its self what the native code it called allocated")
    frames.add_argument("--native", action="store_true",
                        help="show every frame, native ones too, also for a Python program (the table and --tree"
                             " of a process with Python frames show the Python view without it)")


def main(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    focus, ignore = _regex(args.focus, "--focus"), _regex(args.ignore, "--ignore")
    dump = None if args.dump is None else parse_dump(args.dump)
    lifetimes = args.view == TEMPORARY_VIEW or args.lifetimes or args.sizes
    if args.temporary is not None and not (args.view == TEMPORARY_VIEW or args.lifetimes):
        raise UsageError("--temporary applies to --view temporary and --lifetimes")
    if sum((args.view == TEMPORARY_VIEW, args.lifetimes, args.sizes)) > 1:
        raise UsageError("--view temporary, --lifetimes and --sizes are views of their own: one at a time")
    with open_profile(args.file) as profile:
        select_label(profile, args.label)
        shown = select_heap(profile, args.heap)
        if args.by_label is not None:
            print(render_by_label(profile, args.by_label, heap_members(shown), args.top))
            return 0
        folded = apply_fold(profile, args)
        if lifetimes:  # views of their own tables (cli/lifetimes.py)
            text = fold_line(folded) + "\n\n" if folded else ""
            return _write(text + render_lifetimes(profile, select_processes(profile, args.pid), args, focus, ignore))
        # The Python view by default where stacks hold Python frames (the first answer names the user's
        # code); --stacks shows each stack in full unless --python-only asks.
        python_only = True if args.python_only else False if args.native or args.stacks else None
        processes = select_processes(profile, args.pid)
        ranked = process_lines(profile, processes)
        minor = set() if args.pid is not None or args.all_processes else minor_processes(ranked)
        # The processes named in one line get no report of their own: none is built.
        reports = build_reports(profile, args.view, args.pid, focus=focus, ignore=ignore, dump=dump,
                                sort=args.sort, merge=args.merge, python_only=python_only, skip=minor)
        heaps = render_heaps(profile, shown, minor)
        width = None if args.wide else table_width()
        head = render_processes(ranked, minor, width) + "\n" if len(processes) > 1 else ""
        if folded:  # after the table of processes: the report opens with what it is about
            head += fold_line(folded) + "\n\n"
        # Sections in the order of the table: by peak.
        rank = {line.process.info.upid: k for k, line in enumerate(ranked)}
        reports.sort(key=lambda r: min(rank.get(p.info.upid, 0) for p in r.processes or [r.process]))
        fixes = unnamed_fixes(profile, [row for r in reports for row in r.rows[:args.top]], str(args.file))
        if args.tree:
            text = head + "\n".join(render_tree(profile, r, focus, ignore, args.min_percent, width) for r in reports)
        elif args.stacks:
            text = head + "\n".join(render_stacks(profile, r, args.top, width) for r in reports)
        else:
            text = head + "\n".join(render_report(r, args.top, width=width, unnamed=fixes, path=str(args.file))
                                     for r in reports)
    if not reports:
        text = f"{args.file}: no processes in this profile\n"
    return _write(heaps + text)


def _write(text: str) -> int:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `heapscope report x.db | head`: the reader left; that is not an
        # error. Point stdout at /dev/null so the interpreter's final flush
        # does not complain about the closed pipe either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def render_heaps(profile: Profile, shown: str | None, minor: set[int] | frozenset[int] = frozenset()) -> str:
    """The heaps of the profile, each at its peak per process (libc.malloc, python.pymalloc, mmap
    and brk at the one they share, docs/profile.md), and which one the report shows, when it has more than
    one heap (custom heaps); '' otherwise."""
    if len(heap_names(profile)) < 2:
        return ""
    names: dict[int, str] = {p.info.upid: f"pid {p.info.pid} {process_label(p.info)}" for p in profile.processes()}
    lines = ["heaps (unreleased at the peak; a custom heap's own; a pool's memory is in its malloc block too):"]
    members = heap_members(shown)
    for upid, name, size, count in heap_peaks(profile):
        if upid in minor:
            continue  # named in the table of processes' last line
        who = names.get(upid, str(upid))
        mark = "*" if members is None or name in members else " "
        lines.append(f" {mark}{name:<31} {format_value('space', size):>10} {count:>10} samples   {who}")
    if shown is None:
        lines.append("  showing: all heaps merged (memory a pool hands out is counted twice)")
    elif members is not None and len(members) > 1:
        lines.append(f"  showing: {heap_label(shown)} (disjoint: their sum; --heap NAME for one,"
                     " --heap all merges every heap)")
    else:
        lines.append(f"  showing: {heap_label(shown)} (--heap NAME for another, --heap all merges them)")
    return "\n".join(lines) + "\n\n"


def _regex(pattern: str | None, flag: str) -> re.Pattern[str] | None:
    return None if pattern is None else focus_pattern(pattern, flag)  # one meaning: sql --focus's too


def render_processes(lines: Sequence[ProcessLine], minor: set[int] | frozenset[int] = frozenset(),
                     width: int | None = None) -> str:
    """The table of processes, ranked by peak; the `minor` ones (upids) in one line at its end;
    within `width` columns (None: as long as they are), executables cut in the middle."""
    major = [r for r in lines if r.process.info.upid not in minor]
    # A build's dozens of compilers would fill the first screen: the largest ones make the
    # table, the others are counted in a line (their sections follow, in the same order).
    below = major[TABLE_ROWS:] if len(major) > TABLE_ROWS + 1 else []
    major = major[:len(major) - len(below)]
    header = ("pid", "peak", "allocated", "samples", "lifetime", "executable")
    cells = [header] + [
        (str(r.process.info.pid), format_bytes(r.peak), format_bytes(r.allocated), format_count(r.samples),
         "?" if r.lifetime_ns is None else f"{r.lifetime_ns / 1e9:.2f} s",
         process_label(r.process.info, exe=True))
        for r in major
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    room = None if width is None else max(width - 2 - sum(widths[:5]) - 2 * 5, MIN_NAME)
    out = [f"{len(lines)} processes, by peak (sampled bytes unreleased at each one's peak):"]
    for c in cells:
        exe = c[5] if room is None else cut_middle(c[5], room)
        out.append("  " + "  ".join([*(c[i].rjust(widths[i]) for i in range(5)), exe]).rstrip())
    texts = []
    if below:
        names = count_names([r.process.info.name or os.path.basename(r.process.info.exe or "") or "?"
                             for r in below])
        texts.append(f"... and {len(below):,} more processes, each in its section below ({names})")
    rest = [r.process for r in lines if r.process.info.upid in minor]
    if rest:
        texts.append(minor_line(rest))
    for text in texts:
        out.extend("  " + line for line in ([text] if width is None else textwrap.wrap(
            text, width - 2, break_long_words=False, break_on_hyphens=False, subsequent_indent="    ")))
    return "\n".join(out) + "\n"


def view_line(r: ProcessReport, stacks: bool = False) -> str:
    """Which frames the report shows and how to get the others, for a process with Python
    frames (or one asked for the Python view); '' for a native process."""
    if r.python_only and not r.has_python:
        return "Python frames, but this process has none (--native shows its native frames)"
    if r.python_only:
        return "Python frames (native frames folded into the Python line that called them; --native shows them)"
    if not r.has_python:
        return ""
    if stacks:
        return "each stack in full, Python frames among the native ones (--python-only hides native frames)"
    return "every frame, native and Python (without --native: Python frames only, each at its line)"


def table_width() -> int:
    """The columns `report` fits: the terminal's ($COLUMNS first, as shutil reads it), or 120
    when stdout is not a terminal (piped: a file or a pager has no width to fit)."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((PIPED_WIDTH, 24)).columns
    return PIPED_WIDTH


PIPED_WIDTH = 120
TABLE_ROWS = 10  # processes in the table of processes; the others in one line under it
MIN_NAME = 24  # a function column is never narrower than this, whatever the terminal


def render_report(r: ProcessReport, top: int, stacks: bool = False, width: int | None = None,
                  unnamed: dict[str, Unnamed] | None = None, path: str = "PROFILE") -> str:
    """A header and the table of one process (or merged processes), ending with a newline;
    `width`: the columns its table fits (None: full names); `unnamed`: unnamed_fixes()."""
    info, flags = r.process.info, r.process.flags
    if len(r.processes) > 1:
        pids = ", ".join(str(p.info.pid) for p in r.processes)
        lines = [f"{info.exe or info.name or '?'}: {len(r.processes)} processes merged (pids {pids})"]
    else:
        lines = [f"pid {info.pid}  {process_label(info)}  (upid {info.upid})"]
        if info.cmdline:
            cmdline = info.cmdline if width is None else cut_middle(info.cmdline, max(width - _W - 3, MIN_NAME))
            lines.append(f"  {'cmdline:':<{_W}} {cmdline}")
    if r.ts is not None:
        lines.append(f"  {'showing:':<{_W}} {r.state} (--dump peak|end|N)")
        total = format_value(r.view, r.view_total)
        if r.estimate is not None:
            total = (f"~{format_count(round(r.estimate.value))} allocations (estimate, standard error"
                     f" {format_count(round(r.estimate.stderr))}) from {format_count(r.samples)} samples")
        elif r.view in ("objects", "alloc_objects"):
            total += " allocations (exact)"
    else:
        total = "no dumps"
    lines.append(f"  {r.view + ':':<{_W}} {total}")
    if flags is not None:
        sampling = _sampling(flags.sampling_interval_bytes, flags.orig_sampling_interval_bytes)
        lines.append(f"  {'sampling:':<{_W}} {sampling}")
        if r.ts is not None and r.view in ("space", "alloc_space") and flags.sampling_interval_bytes > 1:
            lines.append(f"  {'error:':<{_W}} {bytes_error(flags.sampling_interval_bytes, r.view_total, r.rows)}")
        lines.append(f"  {'unwinder:':<{_W}} {flags.unwinder or 'unknown'}")
        if not flags.from_startup:
            lines.append(f"  {'attached:':<{_W}} while running (-p): allocations before the attach are not seen")
    view = view_line(r, stacks)
    if view:
        lines.append(f"  {'view:':<{_W}} {view}")
    if r.coverage:
        lines.append(f"  {'memory:':<{_W}} {r.coverage}")
    if r.warnings:
        lines.append(f"  {'warnings:':<{_W}} {'; '.join(r.warnings)}")
    if r.common and r.rows:
        common = f"{' > '.join(r.common)} (left out)"
        if width is not None:
            common = cut_middle(common[:-len(" (left out)")], max(width - _W - 4 - len(" (left out)"), MIN_NAME)) \
                + " (left out)"
        lines.append(f"  {'on every stack:':<{_W}} {common}")
    lines.extend(unnamed_lines(r.rows[:top], unnamed or {}, path, width))
    lines.append("")
    if r.rows:
        lines.extend("  " + line for line in _table(r.rows[:top], r.view, r.view_total, r.sort, width))
        if len(r.rows) > top:
            what = "lines" if r.python_only else "functions"
            lines.append(f"  ({len(r.rows) - top} more {what}; --top N shows more)")
    else:
        lines.append("  (no allocations in this view)")
    return "\n".join(lines) + "\n"


class Unnamed(TupleRecord):
    """Why a library's rows are shown as `lib+0x...`, and what names them."""

    why: str  # "no symbols in the file", ...; '' for code in no file (JIT)
    package: str  # its Debian package, '' when none
    fix: str  # the fix when no package has its debug symbols


def unnamed_fixes(profile: Profile, rows: Sequence[FunctionRow], path: str) -> dict[str, Unnamed]:
    """library -> why its rows shown as `lib+0x...` have no name and how to name them, for the
    libraries of `rows` with such a row: their packages as `record` found them, dpkg asked once
    for the others. The end of `record` said the same, but a report is read later too, or of a
    profile from elsewhere."""
    unnamed = {r.library for r in rows if _is_unnamed(r)}
    if not unnamed:
        return {}
    # only a report with an unnamed row needs dpkg and the debug-archive helpers
    from heapscope.symbolize.missing import jit_fix, owning_packages
    named = {r.library for r in rows if not _is_unnamed(r)}
    files: dict[str, str] = {}  # library -> the path of its file
    for m in profile.mappings():
        base = mapping_basename(m.name)
        if base in unnamed:
            files.setdefault(base, m.name)
    packages = profile.packages()  # as `record` found them; dpkg asked for the others only (none: not run)
    packages.update(owning_packages([file for file in files.values() if file not in packages]))
    out = {}
    for lib in sorted(unnamed):
        file = files.get(lib, lib)
        if unknown_code_pid(file) is not None:
            out[lib] = Unnamed("", "", jit_fix(""))
            continue
        # Named rows of the same file beside: its exported functions have symbols, its static ones not.
        why = "static functions, no symbol in the file" if lib in named else "stripped: no symbols"
        out[lib] = Unnamed(why, packages.get(file, ""),
                           f"build it with -g, or give its debug file: heapscope symbolize {path} --binary-path DIR")
    return out


def _is_unnamed(row: FunctionRow) -> bool:
    """Whether a row is a frame no symbol named: `lib+0x1a2b` (fallback_frame_name's spelling)."""
    return row.function.startswith(row.library + "+0x")


def unnamed_lines(rows: Sequence[FunctionRow], fixes: dict[str, Unnamed], path: str, width: int | None) -> list[str]:
    """The header lines that say why the rows of `rows` shown as `lib+0x...` have no name and
    how to name them: the libraries a Debian package has debug symbols for in one fix, the
    others each with theirs; wrapped to `width` (None: one line each)."""
    libs = list(dict.fromkeys(r.library for r in rows if _is_unnamed(r) and r.library in fixes))
    if not libs:
        return []
    texts = []
    packaged = [lib for lib in libs if fixes[lib].package]
    if packaged:
        pkgs = " ".join(dict.fromkeys(f"{fixes[lib].package}-dbgsym" for lib in packaged))
        fix = f"apt install {pkgs} (Debian's debug archive), then heapscope symbolize {path}"
        from heapscope.symbolize.missing import debug_archive_advice
        advice = debug_archive_advice([fix], path)
        if advice:  # its last line: the debuginfod server that needs nothing installed
            fix += "; " + advice[-1].strip()
        texts.append(", ".join(f"{lib}+0x… ({fixes[lib].why})" for lib in packaged) + f"; fix: {fix}")
    for lib in libs:
        u = fixes[lib]
        if not u.package:
            texts.append(f"{lib}+0x… ({u.why}); fix: {u.fix}" if u.why else f"{lib}+0x…: {u.fix}")
    lines = []
    for text in texts:
        if width is None:
            lines.append(f"  {'unnamed:':<{_W}} {text}")
            continue
        wrapped = textwrap.wrap(text, max(width - _W - 3, MIN_NAME), break_long_words=False,
                                break_on_hyphens=False, subsequent_indent="  ")
        lines.extend(f"  {'unnamed:' if not lines and k == 0 else '':<{_W}} {line}" for k, line in enumerate(wrapped))
    return lines


def _sampling(interval: int, asked: int) -> str:
    if interval == 1:
        text = "every allocation (exact)"
    elif interval > 1:
        text = f"one sample per {interval:,} bytes on average"
    else:
        text = "unknown interval"
    if asked not in (0, interval):
        text += f" (asked for {asked:,})"
    return text


def _table(rows: Sequence[FunctionRow], view: str, whole: int, sort: str = "self",
           width: int | None = None) -> list[str]:
    """The table's lines (without their two leading blanks): within `width` columns, the
    function column takes what the others leave (names elided: view/names.py)."""
    first, second = ("self", "total") if sort == "self" else ("total", "self")
    with_samples = any(r.samples is not None for r in rows)
    header = (first, first + " %", second, second + " %", *(("samples",) if with_samples else ()),
              "function", "location", "library")
    n = 5 if with_samples else 4  # right-aligned number columns

    def pair(r: FunctionRow, which: str) -> tuple[str, str]:
        v = r.self_value if which == "self" else r.total_value
        return format_value(view, v), format_percent(v, whole)

    cells = [header] + [
        (*pair(r, first), *pair(r, second), *((format_count(r.samples or 0),) if with_samples else ()),
         r.function, _short(r.source) or "-", _library(r))
        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    if width is not None:
        others = sum(widths[:n]) + widths[n + 1] + widths[n + 2] + 2 * (n + 2) + 2  # + the indent
        room = max(width - others, MIN_NAME)
        if widths[n] > room:
            cells = [cells[0]] + [(*c[:n], elide(c[n], room), *c[n + 1:]) for c in cells[1:]]
            widths[n] = max(len(c[n]) for c in cells)
    out = []
    for c in cells:
        # Numbers right-aligned; the last column is not padded (no trailing blanks).
        numbers = [c[i].rjust(widths[i]) for i in range(n)]
        out.append("  ".join([*numbers, c[n].ljust(widths[n]), c[n + 1].ljust(widths[n + 1]), c[n + 2]]).rstrip())
    return out


def _library(row: FunctionRow) -> str:
    """A row's library cell: blank when its location names that file already (a Python row's
    `pd_job.py:5` in `pd_job.py`): the width goes to the function's name."""
    where = _short(row.source)
    return "" if where == row.library or where.startswith(row.library + ":") else row.library


def render_tree(profile: object, r: ProcessReport, focus: re.Pattern[str] | None,
                ignore: re.Pattern[str] | None, min_percent: float, width: int | None = None) -> str:
    """The process header, then its merged call tree: total, share and self per node, indented."""
    from heapscope.store.reader import Profile, mapping_basename
    from heapscope.view.tree import build_tree

    assert isinstance(profile, Profile)
    head = render_report(r, 1).split("\n\n", 1)[0]
    if r.ts is None:
        return head + "\n\n  (no dumps)\n"
    values = r.values
    tree = build_tree(profile, sorted(values), python_only=r.python_only, python_lines=True)
    own = tree.self_values(values, r.view)
    total = tree.cumulative(own)
    whole = r.view_total
    floor = abs(whole) * min_percent / 100.0
    cells = []
    hidden = 0
    shown = [False] * len(tree)
    for i in tree.by_value(total):  # siblings by total, largest first
        p = tree.parent[i]
        if total[i] == 0:
            continue
        if abs(total[i]) < floor or (p >= 0 and not shown[p]):
            hidden += p < 0 or shown[p]
            continue
        shown[i] = True
        cells.append((format_value(r.view, total[i]), format_percent(total[i], whole),
                      format_value(r.view, own[i]) if own[i] else "", "  " * tree.depth[i] + tree.name[i],
                      mapping_basename(tree.map_name[i]) if tree.map_name[i] else "",  # NO_PYTHON has none
                      _where(tree.source_file[i], tree.line_number[i])))
    if not cells:
        return head + "\n\n  (no allocations in this view)\n"
    widths = [max(len(c[k]) for c in cells) for k in range(3)]
    if width is not None:  # each name elided to what its line leaves: the numbers, indent, library, location
        fixed = 2 + sum(widths) + 6
        fitted = []
        for c in cells:
            name = c[3].lstrip(" ")
            indent = len(c[3]) - len(name)
            room = width - fixed - indent - (len(c[4]) + 4 if c[4] else 0) - (len(c[5]) + 2 if c[5] else 0)
            fitted.append((*c[:3], " " * indent + elide(name, max(room, 8)), *c[4:]))
        cells = fitted
    widths.append(max(len(c[3]) for c in cells))
    lines = [head, "", "  " + "  ".join(["total".rjust(widths[0]), "%".rjust(widths[1]), "self".rjust(widths[2]),
                                         "call tree"])]
    for c in cells:
        lines.append("  " + "  ".join([c[0].rjust(widths[0]), c[1].rjust(widths[1]), c[2].rjust(widths[2]),
                                       c[3] + (f"  [{c[4]}]" if c[4] else "") + (f"  {c[5]}" if c[5] else "")]))
    if hidden:
        lines.append(f"  ({hidden} subtrees under {min_percent:g}% hidden; --min-percent 0 shows all)")
    return "\n".join(lines) + "\n"


def render_stacks(profile: object, r: ProcessReport, top: int, width: int | None = None) -> str:
    """The process header, then its `top` call stacks by self value, each leaf first with lines."""
    from heapscope.store.reader import Profile, mapping_basename
    from heapscope.view.tree import build_tree

    assert isinstance(profile, Profile)
    head = render_report(r, 1, stacks=True).split("\n\n", 1)[0]
    if r.ts is None:
        return head + "\n\n  (no dumps)\n"
    # Each stack in full, so each frame at its own line: merged by function, a frame
    # would show the line of whichever stack came first (main at its first call for all).
    tree = build_tree(profile, sorted(r.values), python_only=r.python_only, lines=True)
    own = tree.self_values(r.values, r.view)
    nodes = sorted((i for i in range(len(tree)) if own[i] != 0), key=lambda i: (-abs(own[i]), i))
    if not nodes:
        return head + "\n\n  (no allocations in this view)\n"
    lines = [head, ""]
    common = len(r.common)
    for i in nodes[:top]:
        lines.append(f"  {format_value(r.view, own[i])} ({format_percent(own[i], r.view_total)})")
        path = tree.path(i)[::-1]
        shown = path[:max(1, len(path) - common)]  # the roots on every stack are left out
        where = {k: _where(tree.source_file[k], tree.line_number[k]) or "-" for k in shown}
        names = {k: tree.name[k] for k in shown}
        if width is not None:
            room = max(width - 10 - max(len(w) for w in where.values())
                       - max(len(mapping_basename(tree.map_name[k])) for k in shown), MIN_NAME)
            names = {k: elide(v, room) for k, v in names.items()}
        name_width = max(len(v) for v in names.values())
        for k in shown:
            lines.append(f"      {names[k].ljust(name_width)}  {where[k]}  {mapping_basename(tree.map_name[k])}")
        lines.append("")
    if len(nodes) > top:
        lines.append(f"  ({len(nodes) - top} more stacks; --top N shows more)")
    return "\n".join(lines).rstrip("\n") + "\n"


def _where(file: str | None, line: int | None) -> str:
    if not file:
        return ""
    return _short(f"{file}:{line}" if line else file)


def _short(source: str) -> str:
    """`file.c:12` for `/long/path/to/file.c:12`: the table stays readable; exports keep the path."""
    return source.rsplit("/", 1)[-1]
