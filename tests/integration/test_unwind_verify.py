"""The client's own CFA walk (client/cfa.c) against libunwind, in real targets under the real
client and producer: with HEAPSCOPE_UNWIND_VERIFY=1 every sample is unwound both ways from the
same frame, libunwind's stack is recorded, and the client prints at exit how many stacks were
compared, the same, given up by our walk (libunwind took over) and different. No stack may
differ; our walk must give up only where it has to (the signal handler's frames)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, run_process

HERE = Path(__file__).resolve().parent
VERIFY = re.compile(rb"heapscope: unwind verify: compared (\d+) same (\d+) fell_back (\d+) differ (\d+)")


def record_verified(tmp_path: Path, cmd: list[str], interval: int) -> tuple[dict[str, int], bytes]:
    env = dict(os.environ, HEAPSCOPE_UNWIND_VERIFY="1")
    db = tmp_path / "profile.db"
    run = run_process([*HEAPSCOPE, "record", "-q", "-o", str(db), "-i", str(interval), "--seed", "7", "--",
                       *cmd], env=env, timeout=240)
    assert run.returncode == 0, run.describe()
    lines = VERIFY.findall(run.stderr)
    assert lines, run.describe()
    total = {"compared": 0, "same": 0, "fell_back": 0, "differ": 0}
    for line in lines:
        for key, value in zip(total, line, strict=True):
            total[key] += int(value)
    assert total["differ"] == 0, run.describe()
    assert total["same"] + total["fell_back"] == total["compared"], total
    return total, run.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "flags",
    [("-O0", "-fno-omit-frame-pointer"), ("-O2", "-fno-omit-frame-pointer"), ("-O2", "-fomit-frame-pointer"),
     ("-O3", "-fomit-frame-pointer")],
    ids=["O0-fp", "O2-fp", "O2-nofp", "O3-nofp"],
)
def test_cfa_walk_equals_libunwind_cxx_mix(tmp_path, flags):
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "unwind_mix"
    subprocess.run([cxx, *flags, "-g", "-pthread", "-o", str(exe), str(HERE / "unwind" / "unwind_mix.cpp")],
                   check=True, timeout=120)
    total, stdout = record_verified(tmp_path, [str(exe)], 256)
    assert stdout == b"ok\n"
    # Exceptions, containers, recursion, qsort in 5 threads: thousands of samples, and only the
    # 20 in the signal handler (which is raised 20 times and mallocs 4 KiB) may give up.
    assert total["compared"] > 5000, total
    assert total["fell_back"] <= 20, total


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["basic", "cxx", "threads", "sampled"])
def test_cfa_walk_equals_libunwind_test_programs(programs, tmp_path, name):
    total, _ = record_verified(tmp_path, [str(programs.path(name))], 1)
    assert total["compared"] > 50, total
    assert total["fell_back"] == 0, total
