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
    p.add_argument("--dump-a", type=int, metavar="N",
                   help="dump of BEFORE, 1-based, negative from the end (default: last)")
    p.add_argument("--dump-b", type=int, metavar="M",
                   help="dump of AFTER, 1-based, negative from the end (default: last)")
    p.add_argument("-p", "--pid", type=int, metavar="PID",
                   help="compare this process (default: the first with a dump; in both files)")
    p.add_argument("--view", choices=VIEWS, default="space", help="what to compare (default: space)")
    p.add_argument("--top", type=int, default=15, metavar="N", help="growths and shrinks listed (default: 15)")
    p.add_argument("-o", "--output", metavar="HTML", help="also write a flamegraph coloured by growth")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    from heapscope.store.select import HEAP_HELP
    p.add_argument("--heap", metavar="NAME", help=HEAP_HELP + " (in both profiles)")


def main(args: argparse.Namespace) -> int:
    from heapscope.store.reader import open_profile
    from heapscope.store.select import select_heap
    from heapscope.view.diff import changes, diff_graph, dump_ts, pick_process, read_side

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    after_file = args.after or args.before
    if args.after is None and args.dump_a is None:
        raise UsageError("one profile: give --dump-a N (and optionally --dump-b M) to compare two of its dumps")
    sides = []
    for file, index, flag in ((args.before, args.dump_a, "--dump-a"), (after_file, args.dump_b, "--dump-b")):
        with open_profile(file) as profile:
            select_heap(profile, args.heap)  # default: the default heap, nothing counted twice
            proc = pick_process(profile, args.pid)
            ts, which = dump_ts(profile, proc, index, flag)
            label = f"{Path(file).name} {which}" if args.after else which
            sides.append(read_side(profile, proc, ts, label))
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
                  format_value(view, r.after), f"{r.path[-1][0]}  {r.path[-1][1]}",
                  " < ".join(f for f, _ in reversed(r.path[:-1]))) for r in part]
        if cells:
            head = ("change", "before", "after", "function  file or library", "called from")
            widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]
            for c in [head, *cells]:
                lines.append("  " + "  ".join([c[0].rjust(widths[0]), c[1].rjust(widths[1]), c[2].rjust(widths[2]),
                                               c[3].ljust(widths[3]), c[4]]).rstrip())
        lines.append("")
    return "\n".join(lines)
