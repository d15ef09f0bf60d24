"""The sampler's C unit test (sampler_test.c), run against client/sampler.c."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"


@pytest.mark.timeout(120)
def test_sampler_c_unit(build_program):
    exe = build_program("sampler_test.c", str(CLIENT_DIR / "sampler.c"), "-Wall", "-Wextra")
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
