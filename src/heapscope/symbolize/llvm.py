"""llvm-symbolizer in batch mode: addresses of one ELF file in, inline chains out.

Owns finding the tool and talking to it. One run per file: every address is
written to stdin at once (`--obj=FILE`, one hex address a line) and the tool
answers one JSON object per line, in order, with the inline chain innermost
first (`--inlines`). `--functions=linkage --demangle` gives the demangled
linkage name with parameters, `ns::Klass::method(int)`, the spelling the
symbol table path uses too.

HEAPSCOPE_LLVM_SYMBOLIZER=PATH picks the tool; `none` disables it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

ENV_VAR = "HEAPSCOPE_LLVM_SYMBOLIZER"
_FLAGS = ("--inlines", "--functions=linkage", "--demangle", "--output-style=JSON")
_VERSIONED = re.compile(r"^llvm-symbolizer-(\d+)$")
_UNKNOWN = ("", "??", "<invalid>")
# A name taken from a versioned symbol (`memcpy@@GLIBC_2.14`): the version is not part of the name.
_SYMBOL_VERSION = re.compile(r"@@?[A-Za-z_][A-Za-z0-9_.]*$")


class SymbolizerError(Exception):
    """llvm-symbolizer failed or answered something unexpected."""


@dataclass(frozen=True, slots=True)
class SourceFrame:
    """One function of an address's inline chain."""

    function: str  # demangled; "" when unknown
    file: str  # "" when unknown
    line: int  # 0 when unknown


def find_llvm_symbolizer() -> str | None:
    """`llvm-symbolizer` on PATH, else the newest `llvm-symbolizer-NN` on PATH or in /usr/bin."""
    chosen = os.environ.get(ENV_VAR)
    if chosen is not None:
        if chosen.lower() in ("", "none"):
            return None
        return shutil.which(chosen)
    plain = shutil.which("llvm-symbolizer")
    if plain:
        return plain
    best: tuple[int, str] | None = None
    dirs = os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin"]
    for d in dict.fromkeys(dirs):
        try:
            names = os.listdir(d or ".")
        except OSError:
            continue
        for name in names:
            m = _VERSIONED.match(name)
            path = os.path.join(d, name)
            if m and os.access(path, os.X_OK) and (best is None or int(m.group(1)) > best[0]):
                best = (int(m.group(1)), path)
    return best[1] if best else None


def symbolize_file(tool: str, path: str, addresses: Sequence[int], timeout: float = 600) -> list[list[SourceFrame]]:
    """The inline chain (innermost first) of each address of `path`, [] where nothing is known."""
    if not addresses:
        return []
    stdin = "".join(f"0x{a:x}\n" for a in addresses)
    try:
        done = subprocess.run(
            [tool, *_FLAGS, f"--obj={path}"], input=stdin, capture_output=True, text=True,
            timeout=timeout, check=False, errors="replace",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SymbolizerError(f"{tool}: {e}") from e
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(addresses):
        err = done.stderr.strip().splitlines()
        raise SymbolizerError(
            f"{tool} on {path}: exit status {done.returncode}, {len(lines)} answers for"
            f" {len(addresses)} addresses{': ' + err[-1] if err else ''}")
    return [_parse(line, tool) for line in lines]


def _parse(line: str, tool: str) -> list[SourceFrame]:
    try:
        answer = json.loads(line)
    except json.JSONDecodeError as e:
        raise SymbolizerError(f"{tool}: not JSON output ({line[:80]!r}); --output-style=JSON unsupported?") from e
    chain = []
    for s in answer.get("Symbol") or ():
        function = _SYMBOL_VERSION.sub("", str(s.get("FunctionName") or ""))
        file = str(s.get("FileName") or "")
        chain.append(SourceFrame(
            "" if function in _UNKNOWN else function,
            "" if file in _UNKNOWN else file,
            int(s.get("Line") or 0),
        ))
    if all(not f.function and not f.file for f in chain):
        return []
    return chain
