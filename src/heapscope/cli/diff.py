"""`heapscope diff`: which call paths grew between two profiles or two dumps."""

from __future__ import annotations

import argparse
import contextlib
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
    p.add_argument("--view", choices=(*VIEWS, "temporary"), default="space",
                   help="what to compare (default: space); temporary: bytes freed within --temporary, per function"
                        " (two profiles, each whole run)")
    from heapscope.cli.lifetimes import TEMPORARY_HELP
    p.add_argument("--temporary", metavar="DURATION", help=TEMPORARY_HELP.replace("with --view temporary and"
                                                                                  " --lifetimes", "with --view"
                                                                                  " temporary"))
    p.add_argument("--top", type=int, default=15, metavar="N", help="growths and shrinks listed (default: 15)")
    p.add_argument("-o", "--output", metavar="HTML", help="also write a flamegraph coloured by growth")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    from heapscope.store.alloc_labels import LABEL_HELP
    from heapscope.store.select import HEAP_HELP
    p.add_argument("--heap", metavar="NAME", help=HEAP_HELP + " (in both profiles)")
    p.add_argument("--label", metavar="K=V", help=LABEL_HELP + ", in both profiles")
    from heapscope.cli.folding import add_fold_arguments
    add_fold_arguments(p)


def main(args: argparse.Namespace) -> int:
    from heapscope.cli.folding import apply_fold
    from heapscope.errors import UnknownProcessError
    from heapscope.model import CallsiteId
    from heapscope.store.alloc_labels import select_label
    from heapscope.store.reader import Process, ViewValues, open_profile
    from heapscope.store.select import default_dump, parse_dump, process_state, select_heap
    from heapscope.view.diff import SharedPaths, changes, diff_graph, dump_ts, pick_process, read_side
    from heapscope.view.wrappers import fold_line

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    after_file = args.after or args.before
    if args.after is None and args.dump_a is None:
        raise UsageError("one profile: give --dump-a N (and optionally --dump-b M) to compare two of its dumps")
    # One profile: its dump --dump-a against its end by default (two moments of one run).
    dump_b = args.dump_b if args.dump_b is not None or args.after is not None else "end"
    files = (args.before, after_file)
    asked = [None if d is None else parse_dump(d) for d in (args.dump_a, dump_b)]
    with contextlib.ExitStack() as stack:
        profiles = [stack.enter_context(open_profile(f)) for f in files]
        procs: list[Process] = []
        folded: set[str] = set()
        for profile in profiles:
            select_label(profile, args.label)
            select_heap(profile, args.heap)  # default: the default heap, nothing counted twice
            folded.update(apply_fold(profile, args))
            procs.append(pick_process(profile, args.pid, procs[0] if procs else None))
        if args.view == "temporary":  # the lifetime tables, whole runs (cli/lifetimes.py)
            from heapscope.cli.lifetimes import render_diff

            if args.after is None or args.dump_a is not None or args.dump_b is not None:
                raise UsageError("diff --view temporary compares two profiles, each its whole run (no --dump-a/-b)")
            sys.stdout.write(render_diff(profiles, procs, [Path(f).name for f in files], args))
            return 0
        if args.temporary is not None:
            raise UsageError("--temporary applies to --view temporary")
        # The Python view when both sides are Python programs (report's default)
        python = args.python_only or (not args.native and all(
            p.info.upid in profile.python_upids() for profile, p in zip(profiles, procs, strict=True)))

        def state(k: int, choice: str | int) -> tuple[int, str, dict[CallsiteId, ViewValues] | None, str]:
            """(ts, label, values or None for the dump at ts, kind) of side k at `choice`."""
            if isinstance(choice, int):
                ts, which = dump_ts(profiles[k], procs[k], choice, ("--dump-a", "--dump-b")[k])
                return ts, which, None, "dump"
            st = process_state(profiles[k], procs[k], choice, args.view)
            if st is None:
                raise UnknownProcessError(f"{files[k]}: pid {procs[k].info.pid} has no dump")
            return st.ts, st.label, st.values, st.kind

        # By default both peaks (report's state: a program that frees all at its exit ends with
        # little), or both ends when a side has no peak rows (an imported profile)
        default = default_dump(args.view)
        states = [state(k, default if c is None else c) for k, c in enumerate(asked)]
        if default == "peak" and any(c is None and st[3] == "end" for c, st in zip(asked, states, strict=True)):
            states = [state(k, "end") if c is None else st for k, (c, st) in enumerate(zip(asked, states, strict=True))]
        sides = []
        shared: SharedPaths = {}  # the paths met, one object for a path both sides have
        for k, (ts, which, values, _kind) in enumerate(states):
            label = f"{Path(files[k]).name} {which}" if args.after else which
            sides.append(read_side(profiles[k], procs[k], ts, label, python, values, shared))
    a, b = sides
    rows = changes(a, b, args.view)
    text = render(a, b, rows, args.view, args.top)
    if folded:  # after the totals' line, which the diff opens with
        first, rest = text.split("\n", 1)
        text = f"{first}\n{fold_line(sorted(folded))}\n{rest}"
    sys.stdout.write(text)
    if args.output:
        from heapscope.cli.flamegraph import write_page
        from heapscope.view.flamegraph import payload, render_html

        graph = diff_graph(a, b)
        html = render_html(payload([graph], title=f"diff {a.label} → {b.label}", mode="diff",
                                   subtitle="red grew, blue shrank (totals per frame)"))
        write_page(Path(args.output), html, args.force)
        print(f"wrote {args.output}")
    return 0


NAME_WIDTH = 48  # a function's name in the table at most (C++ templates elided: view/names.py)


def render(a: object, b: object, rows: list[Change], view: str, top: int) -> str:
    from heapscope.view.names import elide
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
        # The function and its file or library are columns of their own, so each header sits
        # over its column whatever the names' lengths.
        cells = [(("+" if r.delta > 0 else "") + format_value(view, r.delta), format_value(view, r.before),
                  format_value(view, r.after), elide(r.path[-1][0], NAME_WIDTH), r.path[-1][1], _callers(r.path))
                 for r in part]
        if cells:
            head = ("change", "before", "after", "function", "file or library", "called from")
            widths = [max(len(c[i]) for c in [head, *cells]) for i in range(5)]
            for c in [head, *cells]:
                lines.append("  " + "  ".join([c[0].rjust(widths[0]), c[1].rjust(widths[1]), c[2].rjust(widths[2]),
                                               c[3].ljust(widths[3]), c[4].ljust(widths[4]), c[5]]).rstrip())
        lines.append("")
    return "\n".join(lines)


CALLERS_SHOWN = 8  # "called from": the nearest callers (a Python import's native chain is ~100 deep)


def _callers(path: tuple[tuple[str, str], ...]) -> str:
    from heapscope.view.names import elide

    callers = [elide(f, 32) for f, _ in reversed(path[:-1])]
    return " < ".join(callers[:CALLERS_SHOWN]) + (" < …" if len(callers) > CALLERS_SHOWN else "")
