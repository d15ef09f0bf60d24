"""Fixtures for the fault-injection suite: real recordings of programs that do
what daemons, crashing programs and hostile users do (tests/fault/programs/).

The helpers of the integration tests (hs_integration.py) serve here too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from hs_integration import Programs, Recorder  # noqa: E402


@pytest.fixture(scope="session")
def programs() -> Programs:
    return Programs()


@pytest.fixture
def record(tmp_path: Path) -> Recorder:
    return Recorder(tmp_path)
