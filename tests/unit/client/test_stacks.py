"""The stack ids' C unit test (stacks_test.c), run against client/stacks.c: equal stacks give
equal ids, and stacks of one depth that differ in one frame (at every position, depths 1 to
131: every tail of the four hash lanes) never share an id."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"


@pytest.mark.timeout(120)
def test_stack_ids_c_unit(build_program):
    exe = build_program("stacks_test.c", str(CLIENT_DIR / "stacks.c"), "-Wall", "-Wextra")
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
