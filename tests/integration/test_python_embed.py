"""An embedded interpreter loaded after the start (embedded interpreters work too).

A compiled C program (tests/programs/python/embed.c) dlopen()s a shared
libpython with RTLD_GLOBAL after it started, runs Py_InitializeEx and then a
script with known allocations (tests/programs/python/heaps.py). The client
found no CPython at the start; it must notice the library, install the
allocator-domain wrappers and the frame walker once the interpreter runs,
and the profile then has Python frames with the right file:line and the
python.pymalloc heap, exact at interval 1 for what was allocated after that.
Every shared libpython 3.8-3.13 on this machine is tried (pyenv's and
Debian's libpython3.11); without any the test skips and says why.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Profile, run_process
from test_python_heaps import PY_HEAP, _by_site, _markers, _site, _truth

SOURCE = Path(__file__).parents[1] / "programs" / "python" / "embed.c"
SCRIPT = Path(__file__).parents[1] / "programs" / "python" / "heaps.py"


def _libpythons() -> list[tuple[str, str]]:
    """(shared libpython, a python of the same version for --print-truth)."""
    found: list[tuple[str, str]] = []
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            for minor in range(8, 14):
                for d in sorted((Path(out.stdout.strip()) / "versions").glob(f"3.{minor}.*")):
                    lib, exe = d / "lib" / f"libpython3.{minor}.so.1.0", d / "bin" / "python3"
                    if lib.exists() and exe.exists():
                        found.append((str(lib), str(exe)))
    for minor in range(8, 14):
        lib = Path(f"/usr/lib/x86_64-linux-gnu/libpython3.{minor}.so.1.0")
        exe = Path(f"/usr/bin/python3.{minor}")
        if lib.exists() and exe.exists():
            found.append((str(lib), str(exe)))
    return found


LIBPYTHONS = _libpythons()
NO_LIBPYTHON = ("no shared libpython 3.8-3.13 on this machine (pyenv versions built with --enable-shared,"
                " or Debian's libpython3.X package)")


@pytest.fixture(scope="module")
def embed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("embed") / "embed"
    subprocess.run([cc, "-O0", "-g", "-Wall", "-o", str(out), str(SOURCE), "-ldl"], check=True, timeout=120)
    return out


@pytest.mark.skipif(not LIBPYTHONS, reason=NO_LIBPYTHON)
@pytest.mark.timeout(200)
@pytest.mark.parametrize(("libpython", "python"), LIBPYTHONS, ids=[lib for lib, _ in LIBPYTHONS])
def test_libpython_loaded_late_is_profiled(tmp_path: Path, embed: Path, libpython: str, python: str) -> None:
    plain = subprocess.run([str(embed), libpython, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr  # the program itself works
    db = tmp_path / "embed.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--seed", "7", "--",
                       str(embed), libpython, str(SCRIPT)], timeout=150)
    assert run.returncode == 0, run.describe()
    profile = Profile(db)
    stats = profile.stats()
    assert stats.get("python_frames") == 1, stats  # detected, layout known
    assert stats.get("python_allocators") == 1, stats  # the domains are wrapped
    got = _by_site(profile)
    markers = _markers()
    problems = []
    for fn, (n, size, kept, heap) in _truth(python).items():
        have = _site(got, heap, fn, markers[fn], True if fn in ("big", "gone") else None)
        want = [n * size, n, n * size if kept else 0, n if kept else 0]
        if fn == "small":
            have, want = have[2:], want[2:]
        if have != want:
            problems.append(f"{fn} at line {markers[fn]} in {heap}: want {want}, got {have}")
    assert not problems, "\n".join([*problems, f"sites: {dict(got)}"])
    heaps = {r["heap_name"] for r in profile.query("SELECT DISTINCT heap_name FROM heap_profile")}
    assert PY_HEAP in heaps, heaps
