"""shutil.which(program) on Linux, without shutil's imports.

shutil imports bz2, lzma and fnmatch: ~1.5 ms of CPU that `record` paid
before its target started (cli/record.py) and again at its end, finding
llvm-symbolizer (symbolize/llvm.py). This follows CPython 3.11's
Lib/shutil.py on POSIX: a name with a slash is checked as it is, any other
is looked up in $PATH (else os.confstr("CS_PATH")); a match is an existing,
executable file that is not a directory.

May import: nothing of heapscope.
"""

from __future__ import annotations

import os


def _executable(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)


def which(program: str) -> str | None:
    if os.path.dirname(program):
        return program if _executable(program) else None
    path = os.environ.get("PATH")
    if path is None:
        try:
            path = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            path = os.defpath
    if not path:
        return None
    seen: set[str] = set()
    for d in path.split(os.pathsep):
        if d in seen:
            continue
        seen.add(d)
        name = os.path.join(d, program)
        if _executable(name):
            return name
    return None
