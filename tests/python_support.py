"""The CPython interpreters tests run code under: every 3.8-3.13 of pyenv
($PYENV_ROOT, default ~/.pyenv; free-threaded builds left out) plus Debian's
/usr/bin/python3.11. Used by tests/unit/bookkeeping/test_pylines.py and
tests/unit/client/test_pyframes.py.
"""

from __future__ import annotations

import os
from pathlib import Path


def installed_pythons() -> list[Path]:
    """Every CPython 3.8-3.13 interpreter of pyenv, plus Debian's 3.11."""
    found: list[Path] = []
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for minor in range(8, 14):
        for d in sorted(root.glob(f"3.{minor}.*")):
            exe = d / "bin" / "python3"
            if exe.exists() and not d.name.endswith("t"):
                found.append(exe)
    if Path("/usr/bin/python3.11").exists():
        found.append(Path("/usr/bin/python3.11"))
    return found
