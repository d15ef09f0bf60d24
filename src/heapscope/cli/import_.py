"""`heapscope import`: read the heap profiles of a Perfetto trace (heapprofd) into a profile database."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path

from heapscope.errors import OutputError, UsageError

NAME = "import"
HELP = "import the heap profiles of a Perfetto trace (heapprofd, .pftrace) into a profile database"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", metavar="TRACE", help="Perfetto trace with heapprofd ProfilePackets (.pftrace; gzip ok)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="profile database to write (default: TRACE with .db instead of its suffix)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--no-symbolize", action="store_true",
                   help="keep the frames as the trace has them (symbolize later with `heapscope symbolize`)")
    p.add_argument("--binary-path", action="append", default=[], metavar="DIR[:DIR...]",
                   help="directories holding the binaries or debug files of the traced device, matched by"
                        " build id and path (as `heapscope symbolize`); may be repeated")
    p.add_argument("--index", action="store_true",
                   help="scan the --binary-path directories recursively and match files by build id")


def main(args: argparse.Namespace) -> int:
    from heapscope.importer.heapprofd import import_trace, problem_phrases
    from heapscope.store.writer import ProfileWriter

    trace = Path(args.trace)
    out = Path(args.output) if args.output else trace.with_suffix(".db")
    dirs = [d for arg in args.binary_path for d in arg.split(os.pathsep) if d]
    for d in dirs:
        if not os.path.isdir(d):
            raise UsageError(f"--binary-path: {d} is not a directory")
    if args.index and not dirs:
        raise UsageError("--index needs --binary-path DIR to index")
    if out.is_dir():
        raise OutputError(f"{out} is a directory")
    if trace.exists() and out.exists() and os.path.samefile(trace, out):
        raise UsageError(f"{out}: the output would overwrite the trace")
    if (out.exists() or out.is_symlink()) and not args.force:
        raise OutputError(f"{out} exists (use --force to overwrite it)")

    def writer_factory() -> ProfileWriter:
        if out.is_symlink():  # --force: replace the link itself, never write through it
            out.unlink()
        return ProfileWriter(out)

    summary, writer = import_trace(trace, writer_factory)
    err = sys.stderr
    try:
        if not args.no_symbolize:
            from heapscope.symbolize.profile import symbolize_profile
            try:
                symbolize_profile(writer, dirs, index=args.index)
            except sqlite3.Error as e:
                raise OutputError(f"{out}: cannot write symbols: {e}") from e
        named = writer.db.execute(
            "SELECT COUNT(*) FROM stack_profile_frame WHERE symbol_set_id IS NOT NULL OR name NOT LIKE '%+0x%'"
            " AND name != ''").fetchone()[0]
    finally:
        writer.close()

    print(f"heapscope: {trace} -> {out}: {summary.processes:,} processes, {summary.dumps:,} dumps,"
          f" {summary.callsites:,} callsites, {summary.frames:,} frames ({int(named):,} with a function name)",
          file=err)
    problems = list(problem_phrases(summary))
    if problems:
        print(f"heapscope: data lost in the trace: {', '.join(problems)}", file=err)
    if int(named) < summary.frames:
        print(f"heapscope: unsymbolized frames: run `heapscope symbolize {out} --binary-path DIR`"
              " with the traced device's binaries (matched by build id)", file=err)
    return 0
