"""The pytest plugin's window over both heaps of a Python program.

A test that holds 8 MiB through malloc, frees it, then holds 8 MiB of small
Python objects never held more than about 8.6 MB at once: its peak must be
that (the moment the sum of libc.malloc and python.pymalloc was highest),
not the two heaps' own window peaks added up (about 17 MB). The suite and
its helpers are test_pytest_plugin.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_pytest_plugin import HEADER, run_pytest, suite_dir  # noqa: F401 (suite_dir: the fixture)

pytestmark = pytest.mark.timeout(300)

JOINT = HEADER + '''
@pytest.mark.limit_memory("12 MB")
def test_native_then_python():
    release(hold(8 * 1024 * 1024))
    keep = [bytes(200) for _ in range(36000)]  # PyObject_Malloc(233) each: 8.4 MB in python.pymalloc
    del keep
'''


def test_a_tests_peak_is_one_moment_over_both_heaps(suite_dir: Path) -> None:  # noqa: F811
    # WHEN run at interval 1 (exact)
    run = run_pytest(suite_dir, "test_joint.py", JOINT, "--heapscope", "--heapscope-interval", "1",
                     "--heapscope-top", "10")
    # THEN it passes its 12 MB limit: its peak is the objects' phase, not both phases added up
    assert run.outcomes["test_native_then_python"][0] == "passed", (run.outcomes, run.stdout, run.stderr)
    report = run.stdout.split("heapscope: largest sampled heap peaks", 1)[1]
    line = next(x for x in report.splitlines() if "::test_native_then_python" in x)
    m = re.match(r"\s*([0-9.]+) MiB", line)  # (8.3-10 MB)
    assert m is not None and 7.9 <= float(m.group(1)) < 9.6, line
