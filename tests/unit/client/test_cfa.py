"""Our CFA-rule unwinder's C unit test (cfa_test.c), run against client/cfa.c built with
frame pointers and without, at -O0, -O2 and -O3: from a deep recursion (also cut short), under
alloca, below a 200 KiB frame, inside qsort's comparator, in 4 threads and in a signal handler,
its pcs equal libunwind's unw_backtrace from the same frame, or (only in the signal handler)
it gives up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "flags",
    [("-O0",), ("-O2",), ("-O2", "-fomit-frame-pointer"), ("-O3", "-fomit-frame-pointer")],
    ids=["O0", "O2-fp", "O2-nofp", "O3-nofp"],
)
def test_cfa_walk_equals_libunwind(build_program, flags):
    exe = build_program("cfa_test.c", *flags, str(CLIENT_DIR / "cfa.c"), "-D_GNU_SOURCE", "-Wall",
                        "-Wextra", "-ldl")
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    if res.stdout.startswith("SKIP"):
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
    # Both passes ran and all but the signal handler's walks agreed.
    assert "compared 432 agreed 43" in res.stdout, res.stdout
