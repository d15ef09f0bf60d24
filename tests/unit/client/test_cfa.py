"""Our CFA-rule unwinder's C unit test (cfa_test.c), run against client/cfa.c built with
frame pointers and without, at -O0, -O2 and -O3: from a deep recursion (also cut short), under
alloca, below a 200 KiB frame, inside qsort's comparator, in 4 threads and in a signal handler,
its pcs equal libunwind's unw_backtrace from the same frame, or (only in the signal handler)
it gives up. And after a dlclose, an object loaded at the same address (the same return
addresses, other CFA offsets) is walked with its own rules, and then one of another layout at
the same base (one FDE more: the segment and table cfa.c kept for the object before must not
be used); in code outside every object (a JIT's) it gives up, the second time without looking
again. The walk after the reload goes through the memo of decoded FDEs (which the unload must
have emptied), and every pc of every FDE of the test program, libc, libpython (this Python's,
when it is a shared library) and the reloaded objects gets the same rule from the memo as from
its FDE program run up to it."""

from __future__ import annotations

import os
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CLIENT_DIR = HERE.parents[2] / "src" / "heapscope" / "client"


def libpython() -> str:
    """This Python's shared libpython, or "" (a static build)."""
    lib = Path(str(sysconfig.get_config_var("LIBDIR") or "")) / str(sysconfig.get_config_var("LDLIBRARY") or "")
    return str(lib) if (lib.suffix == ".so" or ".so." in lib.name) and lib.is_file() else ""


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "flags",
    [("-O0",), ("-O2",), ("-O2", "-fomit-frame-pointer"), ("-O3", "-fomit-frame-pointer")],
    ids=["O0", "O2-fp", "O2-nofp", "O3-nofp"],
)
def test_cfa_walk_equals_libunwind(build_program: Callable[..., Path], build_dir: Path,
                                   flags: tuple[str, ...]) -> None:
    exe = build_program("cfa_test.c", *flags, *(str(CLIENT_DIR / f) for f in ("cfa.c", "cfa_eh.c", "state.c")),
                        "-D_GNU_SOURCE", "-DHS_CFA_SELFTEST",
                        "-Wall", "-Wextra", "-ldl")
    libs = []
    for frame, pad in ((32, ("-DPAD=12288",)), (64, ("-DPAD=12288",)), (64, ("-DPAD=6000", "-DPAD2=6000"))):
        lib = build_dir / f"cfa_lib{frame}{'p' if len(pad) > 1 else ''}-{'_'.join(flags)}.so"
        subprocess.run(["cc", *flags, "-fPIC", "-shared", "-fno-toplevel-reorder", f"-DFRAME={frame}", *pad,
                        "-o", str(lib), str(HERE / "cfa_lib.c")], check=True, timeout=120)
        libs.append(str(lib))
    py = libpython()
    res = subprocess.run([str(exe), *libs], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CFA_TEST_LIBPYTHON": py})
    if res.stdout.startswith("SKIP"):
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout
    # Both passes and the reload ran, and all but the signal handler's walks agreed.
    assert "compared 440 agreed 43" in res.stdout, res.stdout
    # The memo's exhaustive checks ran (a difference is a FAIL line of the program).
    for what in ("reloaded object", "object of another layout", "this program", "libc",
                 *(("libpython",) if py else ())):
        assert f"memo check, {what}: " in res.stdout, res.stdout
