"""Compile heapscope's test target programs, once, into a cache directory.

Programs are built with ``-O0 -g -fno-omit-frame-pointer -fno-inline`` so that every
function named in a program's ground truth keeps its own frame, whatever unwinder
the client uses. A binary's directory is named after a hash of its source, the shared header,
the compiler and the flags, so an edit rebuilds it and an unchanged program is
reused across tests and sessions. Binaries land in ``tests/programs/bin/``
(gitignored) unless another directory is given.

Usage from the command line (prints one ``name path`` line per program)::

    python tests/programs/build.py [NAME ...] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAMS_DIR = Path(__file__).resolve().parent
DEFAULT_OUT_DIR = PROGRAMS_DIR / "bin"
COMMON_FLAGS = ("-O0", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-Wall", "-pthread")
SHARED_HEADERS = ("truth.h",)


class BuildError(RuntimeError):
    """A program did not compile; the message carries the compiler's output."""


def available() -> list[str]:
    """Names of the programs in this directory (file stem of each .c/.cpp)."""
    return sorted(p.stem for p in PROGRAMS_DIR.iterdir() if p.suffix in (".c", ".cpp"))


def source_of(name: str) -> Path:
    for suffix in (".c", ".cpp"):
        path = PROGRAMS_DIR / f"{name}{suffix}"
        if path.exists():
            return path
    raise BuildError(f"no test program named {name!r} in {PROGRAMS_DIR} (have: {', '.join(available())})")


def _compiler_for(source: Path) -> str:
    env_var, default = ("CXX", "c++") if source.suffix == ".cpp" else ("CC", "cc")
    compiler = os.environ.get(env_var, default)
    if shutil.which(compiler) is None:
        raise BuildError(f"compiler {compiler!r} not found (set {env_var})")
    return compiler


def _digest(source: Path, compiler: str) -> str:
    h = hashlib.sha256()
    for part in (compiler, *COMMON_FLAGS):
        h.update(part.encode() + b"\0")
    for path in (source, *(PROGRAMS_DIR / name for name in SHARED_HEADERS)):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build(name: str, out_dir: Path | None = None) -> Path:
    """Return the path of program ``name``, compiling it if no up-to-date binary exists."""
    source = source_of(name)
    compiler = _compiler_for(source)
    out_dir = Path(out_dir) if out_dir is not None else DEFAULT_OUT_DIR
    # bin/<hash>/<name>: the executable keeps the program's own name (process names
    # in the profile are executable basenames).
    target_dir = out_dir / _digest(source, compiler)
    target = target_dir / name
    if target.exists():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    # Compile to a private name and rename, so concurrent builders never see half a file.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}-", dir=target_dir)
    os.close(fd)
    cmd = [compiler, *COMMON_FLAGS, "-o", tmp_name, str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp_name)
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    os.replace(tmp_name, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="programs to build (default: all)")
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        for name in args.names or available():
            print(name, build(name, args.out_dir))
    except BuildError as e:
        print(f"build.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
