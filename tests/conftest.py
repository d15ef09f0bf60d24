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
