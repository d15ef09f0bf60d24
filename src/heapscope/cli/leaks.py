"""`heapscope leaks`: memory each process never freed before it exited."""

from __future__ import annotations

import argparse
import sys

from heapscope.errors import UsageError

NAME = "leaks"
HELP = "list the call stacks whose memory was never freed, per process"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    p.add_argument("-p", "--pid", type=int, metavar="PID", help="only this process")
    p.add_argument("--all-processes", action="store_true",
                   help="every process in full, also those under 1%% of the largest one's peak and allocations"
                        " (by default they are named in one line)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="stacks per process (default: 20)")
    p.add_argument("--depth", type=int, default=0, metavar="N",
                   help="frames shown per stack, leaf first (default: all)")
    p.add_argument("--dump", metavar="peak|end|N",
                   help="which state: end (the last dump, the default: what was never freed), peak, or dump N")
    from heapscope.store.alloc_labels import LABEL_HELP
    from heapscope.store.select import HEAP_HELP
    p.add_argument("--heap", metavar="NAME", help=HEAP_HELP)
    p.add_argument("--label", metavar="K=V", help=LABEL_HELP)
    from heapscope.cli.folding import add_fold_arguments
    add_fold_arguments(p)


def main(args: argparse.Namespace) -> int:
    from heapscope.cli.folding import apply_fold
    from heapscope.store.reader import open_profile
    from heapscope.store.select import heap_label, heap_members, heap_names, parse_dump, select_heap
    from heapscope.view.leaks import find_leaks
    from heapscope.view.report import minor_line, minor_processes, process_lines
    from heapscope.view.wrappers import fold_line

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    with open_profile(args.file) as profile:
        from heapscope.store.alloc_labels import select_label

        select_label(profile, args.label)
        shown = select_heap(profile, args.heap)
        folded = apply_fold(profile, args)
        names = heap_names(profile)
        found = find_leaks(profile, args.pid, None if args.dump is None else parse_dump(args.dump))
        # Processes under 1% of the largest's peak and allocations in one line, as in `report`
        # (view.summary.is_minor: the 38 shells of pyenv's python3 shim around a Python program).
        minor = set() if args.pid is not None or args.all_processes else minor_processes(
            process_lines(profile, [pl.process for pl in found]))
    head = ""
    if len(names) > 1:  # custom heaps: say which (a pool's memory is in its malloc block too)
        members = heap_members(shown) or []
        others = [n for n in names if n not in members]
        if shown is None:
            head = "heap: all heaps merged (memory a pool hands out is counted twice)\n\n"
        elif others:
            head = f"heap: {heap_label(shown)} (others: {', '.join(others)}; --heap NAME)\n\n"
        else:  # a Python program's two disjoint heaps, both shown (their sum)
            head = f"heap: {heap_label(shown)} (every heap of the profile, their sum; --heap NAME for one)\n\n"
    if folded:
        head += fold_line(folded) + "\n\n"
    rest = [pl for pl in found if pl.process.info.upid in minor]
    major = [pl for pl in found if pl.process.info.upid not in minor]
    major.sort(key=lambda pl: -pl.total_bytes)  # the largest leaks first
    text = "\n".join(render(p, args.top, args.depth) for p in major) or "no processes\n"
    if rest:
        text += "\n" + minor_line([pl.process for pl in rest]) + "\n"
    sys.stdout.write(head + text)
    return 0


def render(pl: object, top: int, depth: int) -> str:
    from heapscope.store.labels import process_label
    from heapscope.units import format_bytes
    from heapscope.view.leaks import ProcessLeaks
    from heapscope.view.units import format_percent

    assert isinstance(pl, ProcessLeaks)
    info = pl.process.info
    head = f"pid {info.pid}  {process_label(info)}  (upid {info.upid})"
    if pl.ts is None:
        return head + "\n  no dumps: nothing to say about leaks\n"
    if not pl.leaks:
        return head + f"\n  no leaks: everything was freed by the state shown: {pl.reason}\n"
    n = len(pl.leaks)
    approx = "~" if pl.estimate is not None else ""
    what = "never freed" if pl.reason.startswith("end") else "not freed"
    lines = [head, f"  {format_bytes(pl.total_bytes)} in {approx}{pl.total_objects:,} allocations {what}"
                   f" ({pl.reason}), {n} call stack{'' if n == 1 else 's'}"]
    if pl.estimate is not None:
        lines.append(f"  allocation counts are estimates from {pl.samples:,} samples"
                     f" (standard error of the total {round(pl.estimate.stderr):,})")
    lines.append("")
    for leak in pl.leaks[:top]:
        allocs = f"{approx}{leak.objects:,} allocation{'' if leak.objects == 1 else 's'}"
        lines.append(f"  {format_bytes(leak.bytes)} in {allocs} ({format_percent(leak.bytes, pl.total_bytes)})")
        stack = leak.stack if depth <= 0 else leak.stack[:depth]
        width = max(len(f.function) for f in stack)
        lib_width = max(len(f.library) for f in stack)
        for f in stack:
            lines.append(f"      {f.function.ljust(width)}  {f.library.ljust(lib_width)}  {f.source}".rstrip())
        if len(stack) < len(leak.stack):
            lines.append(f"      ... {len(leak.stack) - len(stack)} more frames")
        lines.append("")
    if n > top:
        lines.append(f"  ({n - top} more stacks; --top N shows more)")
    return "\n".join(lines) + "\n"
