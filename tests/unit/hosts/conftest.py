"""Fixtures of the hosts' unit tests: the known profile with wall-clock times, a loopback Pyroscope."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import PyroscopeServer


@pytest.fixture
def pyroscope() -> Iterator[PyroscopeServer]:
    s = PyroscopeServer()
    yield s
    s.close()


@pytest.fixture
def timed_profile(known_profile: Path) -> Path:
    """The known profile with the start time `record` stores, so dumps have wall-clock times."""
    db = sqlite3.connect(known_profile)
    db.executemany("INSERT OR REPLACE INTO heapscope_metadata VALUES (?, ?)",
                   [("started_unix_ns", str(1_700_000_000_000_000_000)), ("started_monotonic_ns", "0")])
    db.commit()
    db.close()
    return known_profile
