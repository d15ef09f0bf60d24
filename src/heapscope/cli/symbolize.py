"""`heapscope symbolize`: add functions, source lines and inlined frames to a profile, in place."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from heapscope.errors import OutputError, UsageError
from heapscope.store.reader import open_profile
from heapscope.store.writer import symbolize_in_place

NAME = "symbolize"
HELP = "symbolize a profile in place (function, file:line, inlined frames), e.g. with debug files from elsewhere"

_WHY = {
    "no_symbolizer": "no llvm-symbolizer",
    "symbolizer_failed": "llvm-symbolizer failed",
    "no_debug_info": "no debug info",
    "not_found": "not found",
    "build_id_mismatch": "build id mismatch",
    "not_a_file": "not a file",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="PROFILE", help="profile database written by `heapscope record`")
    p.add_argument(
        "--binary-path", action="append", default=[], metavar="DIR[:DIR...]",
        help="directories holding the binaries or debug files, searched before the recorded paths"
             " (DIR + recorded path, DIR/basename, DIR/.build-id/ab/cdef.debug); may be repeated",
    )
    p.add_argument(
        "--index", action="store_true",
        help="scan the --binary-path directories recursively and match files by build id, whatever their names",
    )


def main(args: argparse.Namespace) -> int:
    # Imported here so that `heapscope --help` does not load the symbolizer.
    from heapscope.symbolize.missing import debug_archive_advice, fix_for
    from heapscope.symbolize.profile import symbolize_profile

    dirs = [d for arg in args.binary_path for d in arg.split(os.pathsep) if d]
    for d in dirs:
        if not os.path.isdir(d):
            raise UsageError(f"--binary-path: {d} is not a directory")
    if args.index and not dirs:
        raise UsageError("--index needs --binary-path DIR to index")

    with open_profile(args.file) as profile:  # one clear line for every kind of bad or damaged file
        profile.check()
    if not os.access(args.file, os.W_OK) or not os.access(os.path.dirname(os.path.abspath(args.file)), os.W_OK):
        raise OutputError(f"{args.file}: cannot symbolize in place: not writable")
    with symbolize_in_place(Path(args.file)) as store:
        report = symbolize_profile(store, dirs, index=args.index)

    err = sys.stderr
    if report.index_files is not None:
        print(f"heapscope: indexed {report.index_files:,} ELF files with a build id", file=err)
    if report.symbolizer is None:
        print("heapscope: llvm-symbolizer not found (install the `llvm` package):"
              " function names from symbol tables only, no files, lines or inlined frames", file=err)
    for line in report.debuginfod_errors:
        print(f"heapscope: {line}", file=err)
    if not report.frames:
        print(f"heapscope: {args.file}: every frame is already symbolized", file=err)
        return 0
    print(f"heapscope: {args.file}: {report.frames:,} frames: {report.with_lines:,} with source lines,"
          f" {report.named:,} with a function name", file=err)
    problems = report.problems()
    if problems:
        print("heapscope: not fully symbolized:", file=err)
        width = min(60, max(len(m.name or "(no name)") for m in problems))
        fixes: list[str] = []
        for m in problems:
            why = _WHY.get(m.outcome, "no line info for some addresses")
            if m.outcome == "symbolized":
                why = f"no line info for {m.frames - m.with_lines:,} addresses"
            elif m.named:
                why += f" ({m.named:,} named from the symbol table)"
            line = f"  {m.name or '(no name)':<{width}}  {m.frames:>7,} frames  {why}"
            if m.outcome in ("not_found", "build_id_mismatch") and m.build_id:
                line += f" (build id {m.build_id})"
            if m.detail:
                line += f": {m.detail}"
            if m.outcome in ("not_found", "no_debug_info", "build_id_mismatch", "no_symbolizer"):
                fixes.append(fix_for(m, report))
                line += f"; fix: {fixes[-1]}"
            print(line, file=err)
        for line in debug_archive_advice(fixes, args.file):
            print(f"heapscope: {line}", file=err)
    return 0 if report.named or report.with_lines else 1
