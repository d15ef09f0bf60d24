"""`heapscope push FILE URL`: send a finished profile's dumps to Pyroscope, Parca or an OpenTelemetry collector."""

from __future__ import annotations

import argparse
import sys

from heapscope.errors import HeapscopeError, UsageError
from heapscope.store.files import EXPORT, atomic_output

NAME = "push"
_REQUEST_TIMEOUT = 10.0  # seconds one request may wait, at most
HELP = ("send a profile's dumps to Pyroscope (pyroscope+http://), Parca (parca+grpc://) or an OpenTelemetry"
        " collector (otlp+http://, otlp+grpc://)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    p.add_argument("url", metavar="URL",
                   help="pyroscope+http[s]://HOST:PORT[/PREFIX], parca+grpc[s]://HOST:PORT,"
                        " otlp+http[s]://HOST:PORT[/PREFIX] or otlp+grpc[s]://HOST:PORT")
    p.add_argument("--label", action="append", default=[], metavar="K=V",
                   help="a label of every pushed profile (repeatable), e.g. service=api, host=web1")
    p.add_argument("-p", "--pid", type=int, metavar="PID", help="only this process")
    p.add_argument("--dump", type=int, metavar="N",
                   help="only dump N of each process (1 = first, -1 = last; default: every dump)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds the whole push may take, retries included (default 60); a request waits"
                        " at most 10 s, and never past this deadline")
    p.add_argument("--attempts", type=int, default=4, metavar="N",
                   help="tries per profile when the server is unreachable or answers 429/5xx (default 4)")


def main(args: argparse.Namespace) -> int:
    import time

    from heapscope.export._common import pick_dumps, process_label, select_processes
    from heapscope.fleet import pprof_source
    from heapscope.fleet.push import Pusher, PushItem, parse_labels, parse_target
    from heapscope.store.reader import open_profile
    from heapscope.store.select import select_heap

    deadline = time.monotonic() + args.timeout if args.timeout > 0 else 0.0
    target = parse_target(args.url)
    labels = parse_labels(args.label)
    if args.timeout <= 0 or args.attempts < 1:
        raise UsageError("--timeout must be > 0 and --attempts at least 1")
    # One deadline for everything, building included: a dead server (refusing, or accepting
    # and never answering) costs --timeout in all, however many profiles there are. Sending
    # starts with the first profile built, so building the others and waiting on the server overlap.
    pusher: Pusher | None = None
    unbuilt = 0  # dumps not made into profiles before the deadline
    try:
        with open_profile(args.file) as profile:
            select_heap(profile, None)  # custom heaps: the default heap only (store/select.py), nothing twice
            for p in select_processes(profile, args.pid):
                dumps = profile.dumps(p.info.upid)
                for d in pick_dumps(dumps, args.dump, process_label(p)):
                    if time.monotonic() >= deadline:
                        unbuilt += 1
                        continue
                    n = next(i for i, x in enumerate(dumps, 1) if x.id == d.id)
                    if target.kind.startswith("otlp"):
                        from heapscope.fleet.otlp import push_item

                        item = push_item(profile, p, n)
                    else:
                        built = pprof_source.build(profile, pid=p.info.pid, dump=n)
                        item_labels: tuple[tuple[str, str], ...] = (("pid", str(p.info.pid)),)
                        if p.info.exe:
                            item_labels += (("executable", p.info.exe.rsplit("/", 1)[-1]),)
                        item = PushItem(built.data, built.start_unix_ns, built.end_unix_ns, item_labels,
                                        f"dump {n} of pid {p.info.pid}")
                    if pusher is None:
                        pusher = Pusher(target, labels, queue_size=1 << 30, attempts=args.attempts,
                                        timeout=min(_REQUEST_TIMEOUT, args.timeout), deadline=deadline)
                    pusher.submit(item)
    except BaseException:
        if pusher is not None:
            pusher.close(drain_timeout=0)
        raise
    if pusher is None:
        if not unbuilt:
            raise HeapscopeError(f"{args.file}: no dumps to push")
        raise HeapscopeError(f"push to {target.url}: 0 of {unbuilt} profiles sent; none built within"
                             f" --timeout {args.timeout:g} s")
    stats = pusher.close(drain_timeout=max(0.0, deadline - time.monotonic()))
    stats.submitted += unbuilt
    stats.dropped += unbuilt
    line = pusher.summary()
    if unbuilt:
        line += f"; {unbuilt} dumps not built within --timeout {args.timeout:g} s"
    if stats.failed or stats.dropped:
        raise HeapscopeError(line)
    print(line, file=sys.stderr)
    return 0


# --- `heapscope export --format clickhouse` (cli/export.py hands over here) ----------------


def add_clickhouse_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", metavar="URL",
                   help="clickhouse: http[s]://HOST:8123/DATABASE[/TABLE] (a server, through clickhouse-connect)"
                        " or chdb:DIR (a local chDB directory); without it, -o gets a SQL script")
    p.add_argument("--label", action="append", default=[], metavar="K=V",
                   help="clickhouse: a label of every row (repeatable), e.g. service=api")
    p.add_argument("--host", metavar="NAME", help="clickhouse: the host column (default: this machine's name)")


def export_clickhouse(args: argparse.Namespace) -> int:
    from pathlib import Path

    from heapscope.fleet import clickhouse
    from heapscope.fleet.push import parse_labels
    from heapscope.store.reader import open_profile

    labels = parse_labels(args.label)
    if args.view != "space":
        raise UsageError("--view does not apply to --format clickhouse (rows hold all four views)")
    if args.to and args.output:
        raise UsageError("--format clickhouse takes --to URL or -o FILE, not both")
    dest = clickhouse.parse_destination(args.to) if args.to else None
    with open_profile(args.file) as profile:
        if dest is not None:
            n = clickhouse.write(profile, dest, host=args.host, labels=labels, pid=args.pid, dump=args.dump)
            print(f"wrote {n} rows to {dest.database}.{dest.table} at {args.to}", file=sys.stderr)
            return 0
        if args.output == "-":
            clickhouse.write_script(profile, sys.stdout.buffer, host=args.host, labels=labels, pid=args.pid,
                                    dump=args.dump)
            sys.stdout.buffer.flush()
            return 0
        p = Path(args.file)
        out = Path(args.output) if args.output else p.with_name(
            (p.name[:-3] if p.name.endswith(".db") else p.name) + ".clickhouse.sql")
        with atomic_output(out, getattr(args, "force", False), EXPORT) as f:
            n = clickhouse.write_script(profile, f, host=args.host, labels=labels, pid=args.pid, dump=args.dump)
    print(f"wrote {out} ({n} rows; clickhouse-client --multiquery < {out.name})", file=sys.stderr)
    return 0
