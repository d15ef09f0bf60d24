"""`heapscope export`: write a profile in a format other tools read (pprof, Perfetto, ...)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from heapscope.cli.folding import add_fold_arguments, apply_fold
from heapscope.errors import UsageError
from heapscope.export import FORMATS
from heapscope.model import VIEWS
from heapscope.store.files import EXPORT, atomic_output
from heapscope.store.reader import Profile, open_profile
from heapscope.store.select import ALL_HEAPS, HEAP_HELP, HEAP_JOIN, heap_names, select_heap
from heapscope.view.wrappers import fold_line

NAME = "export"
HELP = "write a profile as pprof, Perfetto trace, Chrome JSON, speedscope, OTLP profiles or collapsed stacks"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    p.add_argument("--format", "-f", required=True, choices=[*FORMATS, "clickhouse"], metavar="F",
                   help="; ".join(f"{f.name}: {f.help}" for f in FORMATS.values())
                   + "; clickhouse: rows into a ClickHouse table (--to URL), or a SQL script (-o)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file (default: PROFILE's name with the format's suffix; '-' for stdout)")
    p.add_argument("--view", choices=VIEWS, default="space",
                   help="the view single-view formats show, and pprof's default sample type (default: space)")
    p.add_argument("-p", "--pid", type=int, metavar="PID", help="only this process")
    p.add_argument("--only-label", metavar="K=V", help="only the allocations made under allocation label K=V"
                   " (heapscope.label, heapscope_label_push; --label is ClickHouse's series labels)")
    p.add_argument("--heap", metavar="NAME",
                   help=HEAP_HELP + "; perfetto keeps heaps apart (each under its heap_name) and exports every"
                   " heap by default; pprof and otlp with all label each sample with its heap")
    p.add_argument("--dump", metavar="peak|end|N|all",
                   help="the state of each process: peak (the default for space and objects, as report's),"
                        " end, or dump N (1 = first, -1 = last); perfetto, chrome-json and otlp also take all (every"
                        " dump, the trace's timeline)")
    p.add_argument("--chrome-thresholds", action="store_true",
                   help="chrome-json: drop entries under Chromium's thresholds (16 KiB and 1024 objects), as"
                        " Chrome does; default: keep every entry")
    p.add_argument("--force", action="store_true",
                   help="replace an existing output file (never a heapscope profile, nor through a link)")
    add_fold_arguments(p)
    from heapscope.cli.push import add_clickhouse_arguments
    add_clickhouse_arguments(p)


def default_output(profile_path: str, fmt: str) -> Path:
    p = Path(profile_path)
    stem = p.name[:-3] if p.name.endswith(".db") else p.name
    return p.with_name(stem + FORMATS[fmt].suffix)


def main(args: argparse.Namespace) -> int:
    if args.format == "clickhouse":
        from heapscope.cli.push import export_clickhouse
        return export_clickhouse(args)
    if args.to or args.label or args.host:
        raise UsageError("--to, --label and --host go with --format clickhouse")
    fmt = FORMATS[args.format]
    exporter = fmt.exporter()
    if args.dump is not None:
        from heapscope.store.select import parse_dump
        if args.dump.strip().lower() == "all" and args.format in ("perfetto", "chrome-json", "otlp"):
            args.dump = "all"
        else:
            args.dump = parse_dump(args.dump)
    extra: dict[str, object] = {}
    if args.format == "chrome-json":
        extra = {"thresholds": args.chrome_thresholds, "warn": _warn}
    elif args.chrome_thresholds:
        raise UsageError("--chrome-thresholds goes with --format chrome-json")
    with open_profile(args.file) as profile:
        heap = args.heap
        if heap is None and args.format == "perfetto":
            heap = ALL_HEAPS  # the trace names each heap, as heapprofd's do: nothing is counted twice
        from heapscope.store.alloc_labels import select_label

        select_label(profile, args.only_label)
        shown = select_heap(profile, heap)
        folded = apply_fold(profile, args)
        said = _state_line(profile, args)
        if args.format == "otlp":
            from heapscope.export.otlp import messages
            messages()  # a missing or mismatched opentelemetry-proto, said before any file is opened
        if args.format in ("pprof", "otlp") and (shown is None or HEAP_JOIN in shown):
            # one sample per heap and callsite, labelled with its heap
            extra = {"heaps": heap_names(profile) if shown is None else shown.split(HEAP_JOIN)}
        if args.output == "-":
            exporter(profile, sys.stdout.buffer, view=args.view, pid=args.pid, dump=args.dump, **extra)
            sys.stdout.buffer.flush()
            if folded:
                _warn(fold_line(folded))
            _warn(said)
            return 0
        out = Path(args.output) if args.output else default_output(args.file, args.format)
        with atomic_output(out, args.force, EXPORT) as f:
            exporter(profile, f, view=args.view, pid=args.pid, dump=args.dump, **extra)
    print(f"wrote {out}", file=sys.stderr)
    if folded:
        _warn(fold_line(folded))
    _warn(said)
    return 0


def _state_line(profile: Profile, args: argparse.Namespace) -> str:
    """Which state of each process the export holds: `showing: peak at 5.02 s (pid 12)`."""
    from heapscope.store.select import select_processes, state_labels

    if args.dump == "all":
        return "showing: every dump of each process (--dump peak|end|N for one state)"
    shown = [f"{label} (pid {p.info.pid})"
             for p, label in state_labels(profile, select_processes(profile, args.pid), args.dump, args.view)]
    more = f" and {len(shown) - 3} more processes" if len(shown) > 3 else ""
    return "showing: " + ("; ".join(shown[:3]) + more if shown else "no dumps") + " (--dump peak|end|N)"


def _warn(msg: str) -> None:
    print(f"heapscope: {msg}", file=sys.stderr)
