"""The entry point (the `heapscope` command, cli/launcher.c, and `python -m heapscope`): the start module.

`heapscope record -- CMD` adds what it runs before its target's spawn to
every command it wraps, and the target waits in its client for the answer to
its handshake meanwhile (docs/README.md, "The start path"). So a command line
that names `record` is parsed here by record's parser alone (its options as
cli/record.py defines them, the parser `heapscope record` has always had:
heapscope.cli.command_parser), and cli/record.py spawns the target; the
recording, its summary and the rest of the command line are imported while
the target runs. Every other command line (and a record command line this
parser does not take whole: the whole command line's parser says why, as
always) goes to heapscope.cli.main, which builds the command line's parser
then.
"""

from __future__ import annotations

import io
import os
import sys

from heapscope import cli, sigmask

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import TextIO

# Subcommands that close everything they open themselves (record: the Recording's close writes,
# closes and removes all of it): run() ends them with os._exit once their output is flushed,
# skipping the interpreter's teardown of every module (measured ~10-20 ms of CPU on this
# 2-core machine, paid by every profiled command).
FAST_EXIT = ("record",)


def run() -> None:
    """The entry point of the `heapscope` command and of `python -m heapscope`."""
    # First: record's dump and forwarded signals wait for its handlers (heapscope.sigmask). Here,
    # not at import: a program (a test) that imports this module keeps its signals.
    try:
        sigmask.hold()
    except KeyboardInterrupt:  # a Ctrl-C the launcher held while the interpreter started
        sys.exit(130)
    if sigmask.launched:
        _name_process()
    _guard_stderr()
    argv = sys.argv[1:]
    code = main(argv)
    if cli.chosen(argv) in FAST_EXIT:
        import contextlib  # the recording imported it

        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)  # what sys.exit(code) would give the parent
    sys.exit(code)


def _name_process() -> None:
    """`heapscope` in ps, top and pgrep, as under a console script: the launcher's exec of the
    interpreter named the process python3."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write("heapscope")
    except OSError:
        pass


def main(argv: Sequence[str]) -> int:
    """`heapscope ARGV...`: its exit status."""
    # Before the command's modules are imported: at the default threshold their objects alone
    # set off ~14 collections of a young generation that only grows (~0.7 ms of record's start).
    cli.tune_collector(argv)
    try:
        args = record_args(argv)
        if args is None:
            return cli.main(argv)
    except KeyboardInterrupt:
        return 130  # Ctrl-C while the command line's modules are imported: as cli.call says it
    return cli.call(args)


def record_args(argv: Sequence[str]) -> argparse.Namespace | None:
    """A `[-v] record ...` command line parsed by record's parser alone; None for any other, or
    for one with options record's parser does not know (the whole parser names them)."""
    if cli.chosen(argv) != "record":
        return None
    i = 0
    while argv[i] in cli.MAIN_FLAGS:
        i += 1
    from heapscope.cli import record

    args, unknown = cli.command_parser(record).parse_known_args(argv[i + 1:])
    if unknown:
        return None
    args.verbose = i > 0
    return args


class _Forgiving(io.TextIOBase):
    """stderr whose failures are dropped (a full device, a closed pipe): a message that cannot
    be written is lost, never the target's exit status (record exits with it, whatever happens)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:  # noqa: SIM105 (contextlib: imports on the target's path)
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()


def _guard_stderr() -> None:
    """A closed stderr (`2>&-`) leaves sys.stderr None: messages go nowhere. One on a failing
    device (`2>/dev/full`) drops what it cannot write."""
    if sys.stderr is None:
        # Opened close-on-exec, it takes descriptor 2 if that is free: the target still starts
        # with its stderr closed, and no file of ours can land there for it to inherit.
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process's life)
    elif not isinstance(sys.stderr, _Forgiving):
        sys.stderr = _Forgiving(sys.stderr)
