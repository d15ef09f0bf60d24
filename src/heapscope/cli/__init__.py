"""Command line: one module per subcommand, a table of them, `main(argv) -> int`.

Each subcommand module has `NAME`, `HELP`, `add_arguments(parser)` and
`main(args) -> int`. Errors are raised as heapscope.errors types and turned
into one line on stderr here; a traceback only with -v.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from heapscope import __version__
from heapscope.errors import HeapscopeError

# In the order `heapscope --help` lists them.
COMMAND_NAMES = ("record", "live", "report", "flamegraph", "diff", "leaks", "sql", "symbolize", "export", "import_",
                 "push")


def commands() -> list[ModuleType]:
    """The subcommand modules present in this build."""
    found = []
    for name in COMMAND_NAMES:
        module = f"heapscope.cli.{name}"
        try:
            found.append(importlib.import_module(module))
        except ModuleNotFoundError as e:
            if e.name != module:  # a command's own dependency missing is a real error
                raise
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heapscope",
        description="Sampling native-heap profiler: which call stacks hold your memory.",
    )
    parser.add_argument("--version", action="version", version=f"heapscope {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--include", action=_PrintInclude,
                        help="print the directory of heapscope.h (the custom heap API) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for cmd in commands():
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP)
        cmd.add_arguments(p)
        p.set_defaults(_main=cmd.main)
    return parser



class _PrintInclude(argparse.Action):
    """`heapscope --include`: like --version, it prints and exits (no command needed)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=str(kwargs.get("help")))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        import heapscope

        # The package's directory, not importlib.resources.files(): an editable
        # (meson-python) install gives a Traversable whose str() is no path.
        print(Path(heapscope.__file__).resolve().parent / "include")
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
