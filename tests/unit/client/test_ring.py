"""The ring writer's C unit test (ring_test.c), run against client/ring.c: records come back
whole and in order across wraps, the sequence has no gap (dropped records and two writers
included), a full or nonsensical ring drops and counts, oversized records and a shutting-down
ring are refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"


@pytest.mark.timeout(180)
def test_ring_c_unit(build_program):
    exe = build_program("ring_test.c", str(CLIENT_DIR / "ring.c"), "-D_GNU_SOURCE", "-Wall", "-Wextra")
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
