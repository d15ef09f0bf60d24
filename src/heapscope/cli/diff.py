"""`heapscope diff`: which call paths grew between two profiles or two dumps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from heapscope.errors import UsageError
from heapscope.model import VIEWS
from heapscope.view.diff import Change

NAME = "diff"
HELP = "compare two profiles (or two dumps of one): growth per call path, text and HTML"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("before", metavar="BEFORE", help="profile database (the baseline)")
    p.add_argument("after", metavar="AFTER", nargs="?", help="profile database (default: BEFORE, with --dump-a/-b)")
    p.add_argument("--dump-a", metavar="peak|end|N",
                   help="state of BEFORE: its peak, its end (last dump) or dump N, 1-based, negative from the end"
                        " (default: the peak for space and objects, as report; else the end)")
    p.add_argument("--dump-b", metavar="peak|end|M", help="state of AFTER (default: as --dump-a's)")
    p.add_argument("-p", "--pid", type=int, metavar="PID",
                   help="compare this process (default: the one with a dump that held the most; in both files)")
    frames = p.add_mutually_exclusive_group()
    frames.add_argument("--python-only", action="store_true",
                        help="the Python view, the default when both processes have Python frames: native frames"
                             " folded into the Python function that called them")
    frames.add_argument("--native", action="store_true", help="every frame, native ones too, also for Python")
    p.add_argument("--view", choices=VIEWS, default="space", help="what to compare (default: space)")
    p.add_argument("--top", type=int, default=15, metavar="N", help="growths and shrinks listed (default: 15)")
    p.add_argument("-o", "--output", metavar="HTML", help="also write a flamegraph coloured by growth")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    from heapscope.store.select import HEAP_HELP
    p.add_argument("--heap", metavar="NAME", help=HEAP_HELP + " (in both profiles)")


def main(args: argparse.Namespace) -> int:
    from heapscope.errors import UnknownProcessError
    from heapscope.store.reader import Process, open_profile
    from heapscope.store.select import default_dump, parse_dump, process_state, select_heap
    from heapscope.view.diff import changes, diff_graph, dump_ts, pick_process, read_side

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    after_file = args.after or args.before
    if args.after is None and args.dump_a is None:
        raise UsageError("one profile: give --dump-a N (and optionally --dump-b M) to compare two of its dumps")
    # (file, --dump-x, flag, process, has Python frames, has peak rows)
    chosen: list[tuple[str, str | None, str, Process, bool, bool]] = []
    # One profile: its dump --dump-a against its end by default (two moments of one run).
    dump_b = args.dump_b if args.dump_b is not None or args.after is not None else "end"
    for file, index, flag in ((args.before, args.dump_a, "--dump-a"), (after_file, dump_b, "--dump-b")):
        with open_profile(file) as profile:
            proc = pick_process(profile, args.pid, chosen[0][3] if chosen else None)
            chosen.append((file, index, flag, proc, proc.info.upid in profile.python_upids(),
                           profile.peak_values(proc.info.upid) is not None))
    # The Python view when both sides are Python programs (report's default, issue 12)
    python = args.python_only or (not args.native and all(c[4] for c in chosen))
    # By default both peaks (report's state: a program that frees all at its exit ends with
    # little), or both ends when a side has no peak rows (an imported profile)
    default = default_dump(args.view) if all(c[5] for c in chosen) else "end"
    sides = []
    for file, index, flag, proc, _py, _peak in chosen:
        choice = default if index is None else parse_dump(index)
        with open_profile(file) as profile:
            select_heap(profile, args.heap)  # default: the default heap, nothing counted twice
            if isinstance(choice, int):
                ts, which = dump_ts(profile, proc, choice, flag)
                values = None
            else:  # the peak (or the end): a program that frees all at its exit ends with little
                st = process_state(profile, proc, choice, args.view)
                if st is None:
                    raise UnknownProcessError(f"{file}: pid {proc.info.pid} has no dump")
                ts, which, values = st.ts, st.label, st.values
            label = f"{Path(file).name} {which}" if args.after else which
            sides.append(read_side(profile, proc, ts, label, python, values))
    a, b = sides
    rows = changes(a, b, args.view)
    sys.stdout.write(render(a, b, rows, args.view, args.top))
    if args.output:
        from heapscope.cli.flamegraph import write_page
        from heapscope.view.flamegraph import payload, render_html

        graph = diff_graph(a, b)
        html = render_html(payload([graph], title=f"diff {a.label} → {b.label}", mode="diff",
                                   subtitle="red grew, blue shrank (totals per frame)"))
        write_page(Path(args.output), html, args.force)
        print(f"wrote {args.output}")
    return 0


def render(a: object, b: object, rows: list[Change], view: str, top: int) -> str:
    from heapscope.view.units import format_value

    def total(side: object) -> int:
        return sum(v[view] for v in side.self_values.values())  # type: ignore[attr-defined]

    ta, tb = total(a), total(b)
    sign = "+" if tb >= ta else ""
    lines = [f"{view}: {format_value(view, ta)} ({a.label}) -> {format_value(view, tb)} ({b.label}),"  # type: ignore[attr-defined]
             f" {sign}{format_value(view, tb - ta)}", ""]
    grew = [r for r in rows if r.delta > 0][:top]
    shrank = sorted((r for r in rows if r.delta < 0), key=lambda r: r.delta)[:top]
    for title, part in (("largest growths", grew), ("largest shrinks", shrank)):
        lines.append(f"{title}:")
        if not part:
            lines.append("  (none)")
        cells = [(("+" if r.delta > 0 else "") + format_value(view, r.delta), format_value(view, r.before),
                  format_value(view, r.after), f"{r.path[-1][0]}  {r.path[-1][1]}", _callers(r.path))
                 for r in part]
        if cells:
            head = ("change", "before", "after", "function  file or library", "called from")
            widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]
            for c in [head, *cells]:
                lines.append("  " + "  ".join([c[0].rjust(widths[0]), c[1].rjust(widths[1]), c[2].rjust(widths[2]),
                                               c[3].ljust(widths[3]), c[4]]).rstrip())
        lines.append("")
    return "\n".join(lines)


CALLERS_SHOWN = 8  # "called from": the nearest callers (a Python import's native chain is ~100 deep)


def _callers(path: tuple[tuple[str, str], ...]) -> str:
    callers = [f for f, _ in reversed(path[:-1])]
    return " < ".join(callers[:CALLERS_SHOWN]) + (" < …" if len(callers) > CALLERS_SHOWN else "")
