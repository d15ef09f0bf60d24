"""Programs compiled for the symbolization tests, and the ELF facts the tests check against.

INLINED_SOURCE has two always_inline helpers, inner_alloc inlined into
middle_alloc inlined into app::outer_fn: the call of malloc in outer_fn is one
address whose inline chain is inner_alloc -> middle_alloc -> app::outer_fn.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

INLINED_SOURCE = (Path(__file__).parent / "inlined.cpp").read_text()

# Another build of the same program: same path and names, different build id.
OTHER_SOURCE = INLINED_SOURCE.replace("n + 1", "n + 7")

LINE_INNER = 4  # the malloc call in inner_alloc
LINE_MIDDLE = 5  # the inner_alloc call in middle_alloc
LINE_OUTER = 7  # the middle_alloc call in outer_fn

TOOLS = ("c++", "objcopy", "objdump", "readelf")
needs_toolchain = pytest.mark.skipif(
    not all(shutil.which(t) for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")


def compile_cxx(source: str, out: Path, *flags: str) -> Path:
    src = out.with_suffix(".cc")
    src.write_text(source)
    subprocess.run(["c++", "-O2", "-g", *(flags or ("-Wl,--build-id=sha1",)), "-o", str(out), str(src)], check=True,
                   timeout=120)
    return out


def build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else ""


def malloc_call_pc(binary: Path) -> int:
    """The address inside outer_fn's call of malloc (return address - 1, as the producer stores it)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)], check=True,
                         capture_output=True, text=True).stdout
    in_outer = False
    lines = out.splitlines()
    for k, line in enumerate(lines):
        if line.endswith(">:"):
            in_outer = "outer_fn" in line
        elif in_outer and re.search(r"\bcall.*<malloc@plt>", line):
            next_addr = int(lines[k + 1].split(":")[0], 16)
            return next_addr - 1
    raise AssertionError(f"no call of malloc in outer_fn of {binary}")


@dataclass(frozen=True)
class SplitBuild:
    full: Path  # the program with DWARF
    stripped: Path  # no DWARF, no symbols; same build id
    debug: Path  # objcopy --only-keep-debug
    build_id: str


def split_debug(full: Path, out_dir: Path, debuglink: bool = False) -> SplitBuild:
    """Strip `full` into out_dir/<name> and its debug file out_dir/<name>.debug (with a debuglink if asked)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stripped = out_dir / full.name
    debug = out_dir / f"{full.name}.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    args = ["objcopy", "--strip-all"]
    if debuglink:
        args.append(f"--add-gnu-debuglink={debug}")
    subprocess.run([*args, str(full), str(stripped)], check=True)
    return SplitBuild(full, stripped, debug, build_id(full))


def build_id_path(root: Path, bid: str) -> Path:
    """ROOT/.build-id/ab/cdef....debug"""
    p = root / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    p.parent.mkdir(parents=True, exist_ok=True)
    return p
