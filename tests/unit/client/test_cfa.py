"""Our CFA-rule unwinder's C unit test (cfa_test.c), run against client/cfa.c built with
frame pointers and without, at -O0, -O2 and -O3: from a deep recursion (also cut short), under
alloca, below a 200 KiB frame, inside qsort's comparator, in 4 threads and in a signal handler,
its pcs equal libunwind's unw_backtrace from the same frame, or (only in the signal handler)
it gives up. And after a dlclose, an object loaded at the same address (the same return
addresses, other CFA offsets) is walked with its own rules; in code outside every object (a
JIT's) it gives up, the second time without looking again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CLIENT_DIR = HERE.parents[2] / "src" / "heapscope" / "client"


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "flags",
    [("-O0",), ("-O2",), ("-O2", "-fomit-frame-pointer"), ("-O3", "-fomit-frame-pointer")],
    ids=["O0", "O2-fp", "O2-nofp", "O3-nofp"],
)
def test_cfa_walk_equals_libunwind(build_program, build_dir, flags):
    exe = build_program("cfa_test.c", *flags, str(CLIENT_DIR / "cfa.c"), "-D_GNU_SOURCE", "-Wall",
                        "-Wextra", "-ldl")
    libs = []
    for frame in (32, 64):
        lib = build_dir / f"cfa_lib{frame}-{'_'.join(flags)}.so"
        subprocess.run(["cc", *flags, "-fPIC", "-shared", f"-DFRAME={frame}", "-o", str(lib), str(HERE / "cfa_lib.c")],
                       check=True, timeout=120)
        libs.append(str(lib))
    res = subprocess.run([str(exe), *libs], capture_output=True, text=True, timeout=120)
    if res.stdout.startswith("SKIP"):
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
    # Both passes and the reload ran, and all but the signal handler's walks agreed.
    assert "compared 439 agreed 43" in res.stdout, res.stdout
