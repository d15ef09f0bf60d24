"""The address set's C unit test (addrset_test.c), run against client/addrset.c:
the filter in front of the set has no false negatives, alone and under threads
sharing one filter word; it is exact inside its span; keys of one bucket
(aliases, heap keys, sub-granule objects, crowds) keep its bit until the last
goes; a pinned range stays set; a fork child's reset empties it, the shards' first tables
(static storage) included."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"


@pytest.mark.timeout(180)
def test_addrset_c_unit(build_program):
    exe = build_program("addrset_test.c", str(CLIENT_DIR / "addrset.c"), "-D_GNU_SOURCE", "-Wall", "-Wextra")
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
