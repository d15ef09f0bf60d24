"""Shared pytest setup for the whole tests/ tree."""

from __future__ import annotations

import sys
from pathlib import Path

# Run against the source tree when heapscope is not installed (a fresh clone,
# before `pip install -e .`); an installed heapscope always wins.
try:
    import heapscope  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def pytest_configure(config: object) -> None:
    """The tests' `record` runs keep their symbol cache (symbolize/cache.py)
    in a directory of this run, never in the user's ~/.cache; tests of the
    cache itself set their own XDG_CACHE_HOME."""
    import os
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="heapscope-tests-cache-")


def pytest_unconfigure(config: object) -> None:
    import os
    import shutil

    cache = os.environ.get("XDG_CACHE_HOME", "")
    if Path(cache).name.startswith("heapscope-tests-cache-"):
        shutil.rmtree(cache, ignore_errors=True)
