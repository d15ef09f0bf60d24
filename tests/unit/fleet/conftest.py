"""Fixtures of the fleet unit tests: Parca's messages and a loopback Parca (the known profile and a
loopback Pyroscope are tests/unit/conftest.py's)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from fleet_support import ParcaServer, parca_messages


@pytest.fixture(scope="session")
def pb2(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    pytest.importorskip("grpc_tools", reason="needs grpcio-tools: pip install '.[dev]'")
    return parca_messages(tmp_path_factory.mktemp("proto"))


@pytest.fixture
def parca(pb2: ModuleType) -> Iterator[ParcaServer]:
    s = ParcaServer(pb2)
    yield s
    s.close()
