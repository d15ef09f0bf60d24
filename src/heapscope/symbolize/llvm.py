"""llvm-symbolizer in batch mode: addresses of one ELF file in, inline chains out.

Owns finding the tool and talking to it. One run for a whole profile: every
address of every file is written to stdin at once (`CODE "FILE" 0xADDR` a
line; starting the tool costs tens of milliseconds, a profile has dozens of
libraries) and the tool answers one JSON object per line, in order, with the
inline chain innermost first (`--inlines`). `--functions=linkage --demangle` gives the demangled
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


def symbolize_files(tool: str, requests: Sequence[tuple[str, Sequence[int]]],
                     timeout: float = 600) -> list[list[list[SourceFrame]]]:
    """For each (path, addresses): the inline chain (innermost first) of each address, [] where unknown."""
    lines_in = [f'CODE "{path}" 0x{a:x}\n' for path, addresses in requests for a in addresses]
    if not lines_in:
        return [[] for _ in requests]
    if any('"' in path or "\n" in path for path, _ in requests):
        raise SymbolizerError(f"{tool}: a file name with a quote or newline cannot be passed")
    try:
        done = subprocess.run(
            [tool, *_FLAGS], input="".join(lines_in), capture_output=True, text=True,
            timeout=timeout, check=False, errors="replace",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SymbolizerError(f"{tool}: {e}") from e
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(lines_in):
        err = done.stderr.strip().splitlines()
        raise SymbolizerError(
            f"{tool}: exit status {done.returncode}, {len(lines)} answers for"
            f" {len(lines_in)} addresses{': ' + err[-1] if err else ''}")
    chains = iter([_parse(line, tool) for line in lines])
    return [[next(chains) for _ in addresses] for _, addresses in requests]


def symbolize_file(tool: str, path: str, addresses: Sequence[int], timeout: float = 600) -> list[list[SourceFrame]]:
    """The inline chain (innermost first) of each address of `path`, [] where nothing is known."""
    return symbolize_files(tool, [(path, addresses)], timeout)[0]


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
