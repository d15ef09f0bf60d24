"""Fixtures of the fleet unit tests: the known profile (tests/unit/conftest.py), loopback servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fleet_support import ParcaServer, PyroscopeServer, parca_messages


@pytest.fixture(scope="session")
def pb2(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    pytest.importorskip("grpc_tools", reason="needs grpcio-tools: pip install '.[dev]'")
    return parca_messages(tmp_path_factory.mktemp("proto"))


@pytest.fixture
def pyroscope() -> Iterator[PyroscopeServer]:
    s = PyroscopeServer()
    yield s
    s.close()


@pytest.fixture
def parca(pb2: ModuleType) -> Iterator[ParcaServer]:
    s = ParcaServer(pb2)
    yield s
    s.close()


@pytest.fixture
def timed_profile(known_profile: Path) -> Path:
    """The known profile with the start time `record` stores, so dumps have wall-clock times."""
    import sqlite3

    db = sqlite3.connect(known_profile)
    db.executemany("INSERT OR REPLACE INTO heapscope_metadata VALUES (?, ?)",
                   [("started_unix_ns", str(1_700_000_000_000_000_000)), ("started_monotonic_ns", "0")])
    db.commit()
    db.close()
    return known_profile
