"""`heapscope flamegraph`: write a self-contained interactive HTML flamegraph."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from heapscope.store.alloc_labels import LABEL_HELP
from heapscope.store.files import OutputKind, atomic_output
from heapscope.store.select import HEAP_HELP
from heapscope.units import format_in

NAME = "flamegraph"
HELP = "write an interactive HTML flamegraph (one file, works offline)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    p.add_argument("-o", "--output", metavar="HTML",
                   help="where to write the page (default: FILE with .html instead of .db)")
    p.add_argument("-p", "--pid", type=int, metavar="PID", help="only this process")
    p.add_argument("--dump", metavar="peak|end|N",
                   help="the state the page opens at: peak (the default), end, or dump N; every dump and"
                        " the peak stay on its timeline")
    p.add_argument("--max-dumps", type=int, default=None, metavar="N",
                   help="at most N dumps of each process on the timeline, evenly spread, with the peak and the"
                        " end (default 100: a long -c recording still fits in a page; 0: every dump)")
    p.add_argument("--merge", choices=("exe",),
                   help="exe: the 'all processes' graph has one node per executable, its processes merged")
    p.add_argument("--label", metavar="K=V", help=LABEL_HELP)
    p.add_argument("--heap", metavar="NAME",
                   help="the heap the page opens at (every heap is in the page, with a picker): "
                   + HEAP_HELP.split(": ", 1)[1])
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--python-only", action="store_true",
                   help="leave native frames out: Python functions only (stacks without any go under "
                        "one '[no Python frames]' node)")
    from heapscope.cli.folding import add_fold_arguments
    add_fold_arguments(p)


def default_output(profile: str) -> Path:
    path = Path(profile)
    return path.with_suffix(".html") if path.suffix == ".db" else Path(f"{path}.html")


def write_page(out: Path, html: str, force: bool) -> None:
    """Write `html` to `out` (0600, never through a link); refuses to replace a file unless
    `force` or it is our own output, and never replaces a heapscope profile."""
    with atomic_output(out, force, PAGE) as f:
        f.write(html.encode("utf-8"))


def _ours(path: str | os.PathLike[str]) -> bool:
    try:
        with open(path, "rb", opener=_nofollow) as f:
            head = f.read(512)
    except OSError:
        return False
    return b'<meta name="generator" content="heapscope">' in head


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


PAGE = OutputKind("flamegraph page", _ours, rewrite_ours=True, others_with_force=True)


def main(args: argparse.Namespace) -> int:
    from heapscope.cli.folding import apply_fold
    from heapscope.errors import UnknownProcessError, UsageError
    from heapscope.store.reader import open_profile
    from heapscope.store.select import parse_dump
    from heapscope.view.flamegraph import MAX_DUMPS, left_out_line, payload, render_html
    from heapscope.view.flamegraph_heaps import heap_graphs
    from heapscope.view.wrappers import fold_line

    max_dumps = MAX_DUMPS if args.max_dumps is None else args.max_dumps
    if max_dumps < 0:
        raise UsageError(f"--max-dumps {max_dumps}: use 0 (every dump) or more")
    out = Path(args.output) if args.output else default_output(args.file)
    with open_profile(args.file) as profile:
        from heapscope.store.alloc_labels import select_label

        select_label(profile, args.label)  # before the page's select_heap calls, which build on it
        folded = apply_fold(profile, args)
        dump = None if args.dump is None else parse_dump(args.dump)
        heaps, at = heap_graphs(profile, args.heap, args.pid, dump, args.merge, args.python_only, max_dumps)
        graphs = heaps[at].graphs
        if args.pid is not None and not any(h.graphs for h in heaps):
            raise UnknownProcessError(f"{args.file}: process pid {args.pid} has no dump")
        meta = profile.metadata()
    subtitle = meta.get("command", "")
    if folded:
        subtitle = "; ".join(filter(None, (subtitle, fold_line(folded))))
    html = render_html(payload(graphs, title=Path(args.file).name, subtitle=subtitle, heaps=heaps, heap=at))
    write_page(out, html, args.force)
    n = len([g for g in graphs if g.upid >= 0])
    print(f"wrote {out} ({format_in(len(html.encode()), 'KiB', digits=0)}, {n} process{'' if n == 1 else 'es'})")
    note = left_out_line([g for h in heaps for g in h.graphs])
    if note:
        print(note)
    return 0
