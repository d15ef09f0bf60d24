"""Command line: one module per subcommand, a table of them, `main(argv) -> int`; the start
module (start.py, the console entry point), record's summary (summary.py) and the folding
options report and diff share (folding.py) beside them.

Each subcommand module has `NAME`, `HELP`, `add_arguments(parser)` and
`main(args) -> int`. Errors are raised as heapscope.errors types and turned
into one line on stderr here; a traceback only with -v.

Start-up is part of every command's cost: when the command line names a
subcommand, only that subcommand's module is imported (the others are listed
by name only); `heapscope --help`, or no subcommand, imports them all. The
console entry point is cli/start.py, the start module: it parses a `record`
command line with record's parser alone (command_parser) and spawns its
target before anything else of the command line or the recording is
imported; every other command line comes here, to main().

May import: heapscope.session, heapscope.hosts, heapscope.launch, heapscope.producer
(record's options and limits), heapscope.wire.handshake, heapscope.view, heapscope.export,
heapscope.fleet, heapscope.importer, heapscope.symbolize, heapscope.store, heapscope.model,
heapscope.records, heapscope.errors, heapscope.sigmask, heapscope.jobs, heapscope.which,
heapscope.units.
"""

from __future__ import annotations

import os
import sys

from heapscope import __version__, sigmask
from heapscope.errors import HeapscopeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from types import ModuleType
    from typing import Any

# In the order `heapscope --help` lists them.
COMMAND_NAMES = ("record", "live", "report", "flamegraph", "diff", "leaks", "sql", "symbolize", "export", "import_",
                 "push", "help")
# An example per command, shown at the end of its --help (here, not in each module: parsing
# one command line imports no other command's module).
EXAMPLES = {
    "record": "heapscope record -o prof.db -- ./my_program --its --args\n"
              "heapscope record -o prof.db -p 1234 -d 30s     # attach to a running process (needs gdb)",
    "live": "heapscope live -- ./server --port 8080",
    "report": "heapscope report prof.db --top 10 --tree",
    "flamegraph": "heapscope flamegraph prof.db -o prof.html",
    "diff": "heapscope diff before.db after.db -o diff.html",
    "leaks": "heapscope leaks prof.db",
    "sql": 'heapscope sql prof.db "SELECT name, value FROM stats WHERE value > 0"',
    "symbolize": "heapscope symbolize prof.db --binary-path ./build",
    "export": "heapscope export prof.db --format pprof -o prof.pb.gz && go tool pprof -top prof.pb.gz",
    "import": "heapscope import trace.pftrace -o prof.db && heapscope report prof.db",
    "push": "heapscope push prof.db pyroscope+http://host:4040 --label service=api",
    "help": "heapscope help peak",
}

# Options of the main parser that take no value: skipped when looking for the subcommand's name.
MAIN_FLAGS = ("-v", "--verbose")


def _load(name: str) -> ModuleType | None:
    """The subcommand module `name` of COMMAND_NAMES, None when absent from this build."""
    module = f"heapscope.cli.{name}"
    try:
        __import__(module)  # importlib.import_module, without importing importlib
        return sys.modules[module]
    except ModuleNotFoundError as e:
        if e.name != module:  # a command's own dependency missing is a real error
            raise
        return None


def commands() -> list[ModuleType]:
    """The subcommand modules present in this build."""
    return [m for m in map(_load, COMMAND_NAMES) if m is not None]


def chosen(argv: Sequence[str]) -> str | None:
    """The module name of the subcommand `argv` names, None when it names none we know."""
    for arg in argv:
        if arg in MAIN_FLAGS:
            continue
        module = "import_" if arg == "import" else arg
        return module if module in COMMAND_NAMES and arg != "import_" else None
    return None


#: What `heapscope --version` prints.
VERSION = f"heapscope {__version__}"


def _exits_early(argv: Sequence[str]) -> bool:
    """`heapscope --version` / `--include` (before any subcommand name): print and exit."""
    for arg in argv:
        if arg in ("--version", "--include"):
            return True
        if arg not in MAIN_FLAGS:
            return False
    return False


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given `argv` naming a subcommand, with only that subcommand's module imported."""
    import argparse

    plain, raw = _formatters()
    parser = argparse.ArgumentParser(
        prog="heapscope",
        description="Sampling native-heap profiler: which call stacks hold your memory.",
        formatter_class=plain,
    )
    parser.add_argument("--version", action="version", version=VERSION)
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--include", action=_print_include(),
                        help="print the directory of heapscope.h (the custom heap API) and exit")
    # prog given: argparse would otherwise format the main parser's usage to find it (the same text)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog=parser.prog)
    sub.required = True
    name = chosen(argv) if argv is not None else None
    chosen_module = _load(name) if name is not None else None
    if chosen_module is None and not (argv is not None and _exits_early(argv)):
        for cmd in commands():
            _add_command(sub, cmd)
        return parser
    # Only the named subcommand: argparse never needs the others' parsers for this command
    # line (a name it does not know went the long way above, for the "invalid choice" list).
    if chosen_module is not None:
        _add_command(sub, chosen_module)
    return parser


def _add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], cmd: ModuleType) -> None:
    p = sub.add_parser(cmd.NAME, help=cmd.HELP, **_command_settings(cmd))
    cmd.add_arguments(p)
    p.set_defaults(_main=cmd.main)


def command_parser(cmd: ModuleType) -> argparse.ArgumentParser:
    """Subcommand `cmd`'s parser alone, the same as `heapscope NAME` has for what follows NAME
    (its usage, help and errors say `heapscope NAME`); the namespace it gives lacks `verbose`."""
    import argparse

    p = argparse.ArgumentParser(prog=f"heapscope {cmd.NAME}", **_command_settings(cmd))
    cmd.add_arguments(p)
    p.set_defaults(_main=cmd.main)
    return p


def _command_settings(cmd: ModuleType) -> dict[str, Any]:
    """A subcommand parser's description, example and formatter."""
    example = EXAMPLES.get(cmd.NAME)
    return {"description": cmd.HELP, "formatter_class": _formatters()[1],
            "epilog": f"example:\n  {example.replace(chr(10), chr(10) + '  ')}" if example else None}


_FORMATTERS: list[type[argparse.HelpFormatter]] = []


def _formatters() -> list[type[argparse.HelpFormatter]]:
    """argparse's HelpFormatter and RawDescriptionHelpFormatter, given the terminal's width.

    argparse makes a formatter at every add_argument (to check its metavar), and one left to
    find its width imports shutil, which brings bz2, lzma and fnmatch: ~2 ms of every command's
    start, the target's included. The width is found as shutil.get_terminal_size finds it, with
    os alone: $COLUMNS, else stdout's terminal, else 80 (less 2, as argparse does)."""
    if _FORMATTERS:
        return _FORMATTERS
    import argparse

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        stdout = sys.__stdout__
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns if stdout is not None else 0
        except (AttributeError, ValueError, OSError):  # not a terminal, or a stream without a descriptor
            columns = 0
    width = (columns or 80) - 2

    class Plain(argparse.HelpFormatter):
        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=width)

    class Raw(argparse.RawDescriptionHelpFormatter):
        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=width)

    _FORMATTERS.extend((Plain, Raw))
    return _FORMATTERS


def _print_include() -> type[argparse.Action]:
    """The action of `heapscope --include` (defined here: argparse is imported with the parser)."""
    import argparse

    class _PrintInclude(argparse.Action):
        """`heapscope --include`: like --version, it prints and exits (no command needed)."""

        def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=str(kwargs.get("help")))

        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: object, option_string: str | None = None) -> None:
            import heapscope

            # The package's directory, not importlib.resources.files(): an editable
            # (meson-python) install gives a Traversable whose str() is no path.
            print(os.path.join(os.path.dirname(os.path.realpath(heapscope.__file__)), "include"))
            parser.exit()

    return _PrintInclude


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if chosen(argv) != "record":
        sigmask.release()  # only record installs handlers for them
    if "--version" in argv and all(a == "--version" or a in MAIN_FLAGS for a in argv):
        # What the parser would print, without importing argparse for it (~6 ms of ~20).
        print(VERSION)
        return 0
    tune_collector(argv)  # before the parser imports the command's modules
    args = build_parser(argv).parse_args(argv)
    return call(args)


def tune_collector(argv: Sequence[str]) -> None:
    """Set the cyclic collector for the subcommand `argv` names, before its modules are imported:
    the start module calls it first, and main too (an entry point of its own); a second call
    changes nothing."""
    import gc

    if chosen(argv) in _READS:
        gc.disable()
    elif chosen(argv) in _RECORDS:
        gc.set_threshold(_RECORD_GC_THRESHOLD)


def call(args: argparse.Namespace) -> int:
    """Run the subcommand a parsed command line names: its exit status, an error as one line."""
    try:
        return int(args._main(args))
    except HeapscopeError as e:
        if args.verbose:
            raise
        print(f"heapscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


# Subcommands that read a profile into large acyclic structures (a tree per process, the
# callsite table) and end: the cyclic collector only traversed them, again and again (19 full
# collections, 1.3 s of a 148-process build's 6.3 s flamegraph); reference counting frees them.
_READS = ("report", "flamegraph", "leaks", "diff", "export")
# Subcommands whose producer runs as long as its target (days, with -c): the collector stays on
# for the cycles such a run may leave, but starts after 20,000 new containers rather than 700.
# The rows a dump writes are made of short-lived tuples: a pandas job's recording ran ~150
# collections for 24-32 ms of its producer's CPU, 11 for 9 ms at this threshold.
_RECORDS = ("record", "live")
_RECORD_GC_THRESHOLD = 20_000
