"""`heapscope report`: the top functions of each process of a profile, as a text table."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from heapscope.errors import UsageError
from heapscope.model import VIEWS
from heapscope.store.reader import open_profile
from heapscope.store.select import VIEW_HELP
from heapscope.view.report import FunctionRow, ProcessReport, build_reports
from heapscope.view.units import format_percent, format_value

NAME = "report"
HELP = "print the functions that hold the most memory, per process"

_W = len("alloc_objects:")  # width of the header labels



def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="profile database written by `heapscope record`")
    p.add_argument(
        "--view", choices=VIEWS, default="space",
        help="what to rank by: " + "; ".join(f"{v}: {h}" for v, h in VIEW_HELP.items()) + " (default: space)",
    )
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows per process (default: 20)")
    p.add_argument("-p", "--pid", type=int, metavar="PID", help="only this process")
    p.add_argument("--tree", action="store_true",
                   help="print the call tree (functions merged per path) with totals instead of the table")
    p.add_argument("--min-percent", type=float, default=1.0, metavar="P",
                   help="--tree hides subtrees under P%% of the view's total (default: 1)")
    p.add_argument("--focus", metavar="REGEX", help="count only call stacks with a function matching REGEX")
    p.add_argument("--ignore", metavar="REGEX", help="leave out call stacks with a function matching REGEX")
    p.add_argument("--python-only", action="store_true",
                   help="hide native frames: rank Python functions only (a Python function's self is what "
                        "the native code it called allocated)")


def main(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    focus, ignore = _regex(args.focus, "--focus"), _regex(args.ignore, "--ignore")
    with open_profile(args.file) as profile:
        reports = build_reports(profile, args.view, args.pid, focus=focus, ignore=ignore,
                                python_only=args.python_only)
        if args.tree:
            text = "\n".join(render_tree(profile, r, focus, ignore, args.min_percent, args.python_only)
                              for r in reports)
        else:
            text = "\n".join(render_report(r, args.top) for r in reports)
    if not reports:
        text = f"{args.file}: no processes in this profile\n"
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


def _regex(pattern: str | None, flag: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise UsageError(f"{flag} {pattern!r}: not a regular expression ({e})") from e


def render_report(r: ProcessReport, top: int) -> str:
    """A header and the table of one process, ending with a newline."""
    info, flags = r.process.info, r.process.flags
    lines = [f"pid {info.pid}  {info.name or '?'}  (upid {info.upid})"]
    if info.cmdline:
        lines.append(f"  {'cmdline:':<{_W}} {info.cmdline}")
    if r.dump_count:
        dumps = f"{r.dump_count} dump" + ("" if r.dump_count == 1 else "s")
        total = f"{format_value(r.view, r.view_total)} at the last of {dumps}"
    else:
        total = "no dumps"
    lines.append(f"  {r.view + ':':<{_W}} {total}")
    if flags is not None:
        sampling = _sampling(flags.sampling_interval_bytes, flags.orig_sampling_interval_bytes)
        lines.append(f"  {'sampling:':<{_W}} {sampling}")
        lines.append(f"  {'unwinder:':<{_W}} {flags.unwinder or 'unknown'}")
        if not flags.from_startup:
            lines.append(f"  {'attached:':<{_W}} while running (-p): allocations before the attach are not seen")
    if r.coverage:
        lines.append(f"  {'memory:':<{_W}} {r.coverage}")
    if r.warnings:
        lines.append(f"  {'warnings:':<{_W}} {'; '.join(r.warnings)}")
    lines.append("")
    if r.rows:
        lines.extend("  " + line for line in _table(r.rows[:top], r.view, r.view_total))
        if len(r.rows) > top:
            lines.append(f"  ({len(r.rows) - top} more functions; --top N shows more)")
    else:
        lines.append("  (no allocations in this view)")
    return "\n".join(lines) + "\n"


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


def _table(rows: Sequence[FunctionRow], view: str, whole: int) -> list[str]:
    header = ("total", "total %", "self", "self %", "function", "library")
    cells = [header] + [
        (format_value(view, r.total_value), format_percent(r.total_value, whole),
         format_value(view, r.self_value), format_percent(r.self_value, whole), r.function, r.library)
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    out = []
    for c in cells:
        # Numbers right-aligned; the last column is not padded (no trailing blanks).
        numbers = [c[i].rjust(widths[i]) for i in range(4)]
        out.append("  ".join([*numbers, c[4].ljust(widths[4]), c[5]]).rstrip())
    return out


def render_tree(profile: object, r: ProcessReport, focus: re.Pattern[str] | None,
                ignore: re.Pattern[str] | None, min_percent: float, python_only: bool = False) -> str:
    """The process header, then its merged call tree: total, share and self per node, indented."""
    from heapscope.store.reader import Profile, mapping_basename
    from heapscope.view.report import filter_callsites
    from heapscope.view.tree import build_tree

    assert isinstance(profile, Profile)
    head = render_report(r, 1).split("\n\n", 1)[0]
    if r.ts is None:
        return head + "\n\n  (no dumps)\n"
    values = profile.callsite_values(r.process.info.upid, r.ts)
    if focus is not None or ignore is not None:
        values = filter_callsites(profile, values, focus, ignore)
    tree = build_tree(profile, sorted(values), python_only)
    own = tree.self_values(values, r.view)
    total = tree.cumulative(own)
    whole = r.view_total
    floor = abs(whole) * min_percent / 100.0
    cells = []
    hidden = 0
    shown = [False] * len(tree)
    for i in range(len(tree)):
        p = tree.parent[i]
        if total[i] == 0:
            continue
        if abs(total[i]) < floor or (p >= 0 and not shown[p]):
            hidden += p < 0 or shown[p]
            continue
        shown[i] = True
        label = "  " * tree.depth[i] + tree.name[i]
        cells.append((format_value(r.view, total[i]), format_percent(total[i], whole),
                      format_value(r.view, own[i]) if own[i] else "", label, mapping_basename(tree.map_name[i])))
    if not cells:
        return head + "\n\n  (no allocations in this view)\n"
    widths = [max(len(c[k]) for c in cells) for k in range(4)]
    lines = [head, "", "  " + "  ".join(["total".rjust(widths[0]), "%".rjust(widths[1]), "self".rjust(widths[2]),
                                         "call tree"])]
    for c in cells:
        lines.append("  " + "  ".join([c[0].rjust(widths[0]), c[1].rjust(widths[1]), c[2].rjust(widths[2]),
                                       f"{c[3]}  [{c[4]}]"]))
    if hidden:
        lines.append(f"  ({hidden} subtrees under {min_percent:g}% hidden; --min-percent 0 shows all)")
    return "\n".join(lines) + "\n"
