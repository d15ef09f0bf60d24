"""Fixtures for integration tests; the helpers live in hs_integration.py."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from hs_integration import Programs, Recorder


@pytest.fixture(scope="session")
def programs() -> Programs:
    return Programs()


@pytest.fixture
def record(tmp_path: Path) -> Recorder:
    return Recorder(tmp_path)


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Make this test process the reaper of orphaned descendants (PR_SET_CHILD_SUBREAPER),
    so a target whose parent (heapscope) was killed can still be waited for."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_child_subreaper = 36
    if libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
        pytest.fail(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    try:
        yield
    finally:
        libc.prctl(pr_set_child_subreaper, 0, 0, 0, 0)
