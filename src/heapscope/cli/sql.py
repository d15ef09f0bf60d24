"""`heapscope sql`: query a profile with SQL, once or in an interactive shell.

Python's sqlite3 cannot register a table-valued function, so Perfetto's
`experimental_flamegraph(...)` is offered as a temp table of the same name and
columns (docs/profile.md), materialized on demand: `--flamegraph --ts T
--upid U [--focus STR]` on the command line, `.flamegraph T U [STR]` in the shell.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
from collections.abc import Sequence

from heapscope.errors import HeapscopeError, UsageError
from heapscope.store.reader import Profile
from heapscope.store.sql import Result, SqlConsole

NAME = "sql"
HELP = "run SQL on a profile (Perfetto's table names), or open an SQL shell"

TABLE = "experimental_flamegraph"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    # argparse binds all positionals when it meets the first one, so a QUERY
    # after `--flamegraph` would be refused; the rest is parsed again in main().
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="QUERY",
                   help="run this and exit (default: interactive shell)")
    _options(p)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flamegraph", action="store_true",
                   help=f"materialize the temp table {TABLE} first (all of it is printed without QUERY)")
    p.add_argument("--ts", type=int, metavar="T", help="flamegraph at this dump timestamp (default: the last)")
    p.add_argument("--upid", type=int, metavar="U", help="flamegraph of this process (default: the first with dumps)")
    p.add_argument("--focus", metavar="REGEX", help="keep nodes whose name matches REGEX (searched, case-insensitively,"
                   " as report --focus), their ancestors and descendants")


def main(args: argparse.Namespace) -> int:
    from heapscope.store.reader import open_profile

    again = argparse.ArgumentParser(prog="heapscope sql", add_help=False)
    again.add_argument("query", nargs="?")
    _options(again)
    later = again.parse_intermixed_args(args.rest)
    args.query = later.query
    for name in ("flamegraph", "ts", "upid", "focus"):
        if getattr(later, name) not in (None, False):
            setattr(args, name, getattr(later, name))
    if not args.flamegraph and (args.ts is not None or args.upid is not None or args.focus is not None):
        raise UsageError("--ts, --upid and --focus go with --flamegraph")
    with open_profile(args.file) as profile:
        console = SqlConsole(profile)
        if args.flamegraph:
            materialize(console, args.ts, args.upid, args.focus)
            if args.query is None:
                args.query = f"SELECT * FROM {TABLE} ORDER BY id"
        if args.query is not None:
            sys.stdout.write(format_table(console.execute(args.query)))
            return 0
        return Shell(console).loop()


def materialize(console: SqlConsole, ts: int | None, upid: int | None, focus: str | None) -> int:
    """(Re)create the temp table experimental_flamegraph; returns its row count."""
    from heapscope.errors import UnknownProcessError
    from heapscope.store.select import process_with_dump
    from heapscope.view.tree import COLUMNS, experimental_flamegraph

    profile: Profile = console.profile
    if upid is None:
        upid = process_with_dump(profile, None).info.upid
    if ts is None:
        ts = profile.last_dump_ts(upid)
        if ts is None:
            raise UnknownProcessError(f"{profile.path}: process upid {upid} has no dump")
    rows = experimental_flamegraph(profile, ts, upid, focus)
    console.load_table(TABLE, COLUMNS, ([getattr(r, c) for c in COLUMNS] for r in rows))
    return len(rows)


def format_table(result: Result) -> str:
    """Aligned columns with a header, like sqlite3's `.mode column`; numbers right-aligned."""
    if not result.columns:
        return ""
    header, rows = result.columns, result.rows
    cells = [["NULL" if v is None else str(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(header)]
    numeric = [all(isinstance(r[i], int | float) or r[i] is None for r in rows) and rows != []
               for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out.extend(line(c) for c in cells)
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out) + "\n"


class Shell:
    """A small sqlite3-like shell: statements end with `;`, dot commands on their own line."""

    HELP = (
        ".tables                 list tables and views\n"
        ".schema [TABLE]         show CREATE statements\n"
        f".flamegraph [T [U [STR]]] materialize {TABLE} (ts T, upid U, focus STR)\n"
        ".quit                   leave (also .exit or Ctrl-D)\n"
    )

    def __init__(self, console: SqlConsole) -> None:
        self.console = console

    def loop(self) -> int:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        interactive = sys.stdin.isatty()
        if interactive:
            print(f"heapscope sql on {self.console.profile.path}; .help for commands")
        buf = ""
        while True:
            try:
                line = input("...> " if buf else "sql> ") if interactive else sys.stdin.readline()
            except EOFError:
                break
            except KeyboardInterrupt:
                if not interactive:
                    raise
                print()  # Ctrl-C at the prompt drops the statement being typed, as sqlite3 does
                buf = ""
                continue
            if not interactive and line == "":
                break
            line = line.rstrip("\n")
            if not buf and line.strip().startswith("."):
                if not self.dot(line.strip()):
                    break
                continue
            buf += line + "\n"
            if sqlite3.complete_statement(buf):
                try:
                    self.run(buf)
                except KeyboardInterrupt:
                    if not interactive:
                        raise
                    print("error: interrupted", file=sys.stderr)  # the statement stopped; the shell goes on
                buf = ""
        if buf.strip():
            self.run(buf)
        return 0

    def run(self, sql: str) -> None:
        try:
            sys.stdout.write(format_table(self.console.execute(sql)))
        except HeapscopeError as e:
            print(f"error: {e}", file=sys.stderr)

    def dot(self, line: str) -> bool:
        """Run a dot command; False means quit."""
        cmd, *rest = line.split(maxsplit=3)
        if cmd in (".quit", ".exit", ".q"):
            return False
        if cmd == ".help":
            sys.stdout.write(self.HELP)
        elif cmd == ".tables":
            print("\n".join(self.console.tables()))
        elif cmd == ".schema":
            rows = self.console.schema()
            if rest:
                rows = [s for s in rows if rest[0].lower() in s.split("(", 1)[0].lower()]
            print(";\n".join(rows) + (";" if rows else ""))
        elif cmd == ".flamegraph":
            try:
                ts = int(rest[0]) if len(rest) > 0 else None
                upid = int(rest[1]) if len(rest) > 1 else None
                n = materialize(self.console, ts, upid, rest[2] if len(rest) > 2 else None)
                print(f"{TABLE}: {n} rows")
            except (ValueError, HeapscopeError) as e:
                print(f"error: {e}", file=sys.stderr)
        else:
            print(f"error: unknown command {cmd} (.help lists them)", file=sys.stderr)
        return True
