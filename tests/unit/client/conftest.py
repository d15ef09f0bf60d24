"""Fixtures for the client tests: build libheapscope.so and small C programs
from source with `cc`, so that these tests never depend on an install."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CLIENT_DIR = ROOT / "src" / "heapscope" / "client"
WIRE_DIR = ROOT / "src" / "heapscope" / "wire"

# The flags of client/meson.build, repeated for a by-hand build.
CLIENT_CFLAGS = [
    "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
    "-fno-omit-frame-pointer", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
]


def _cc() -> str:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("client-build")


@pytest.fixture(scope="session")
def client_lib(build_dir: Path) -> Path:
    """libheapscope.so built from the sources in the tree."""
    out = build_dir / "libheapscope.so"
    sources = sorted(str(p) for p in CLIENT_DIR.glob("*.c"))
    subprocess.run(
        [_cc(), *CLIENT_CFLAGS, f"-I{WIRE_DIR}",
         f"-Wl,--version-script={CLIENT_DIR / 'preload.map'}", "-o", str(out), *sources,
         "-ldl", "-lpthread", "-lm"],
        check=True, timeout=120,
    )
    return out


@pytest.fixture(scope="session")
def build_program(build_dir: Path) -> Callable[..., Path]:
    """Compiles one C file of this folder into an executable (cached by name)."""
    built: dict[tuple[str, tuple[str, ...]], Path] = {}

    def build(source: str, *extra: str) -> Path:
        key = (source, extra)
        if key not in built:
            out = build_dir / (Path(source).stem + str(len(built)))
            subprocess.run(
                [_cc(), "-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id",
                 f"-I{CLIENT_DIR}", f"-I{WIRE_DIR}", *extra, "-o", str(out), str(HERE / source),
                 "-lpthread", "-lm"],
                check=True, timeout=120,
            )
            built[key] = out
        return built[key]

    return build


@pytest.fixture(scope="session")
def c_unit(build_program: Callable[..., Path]) -> Callable[[str, str], str]:
    """Builds a C unit test of this folder against one client source and runs it: it must exit
    0 and print no FAIL line. Returns its output."""

    def run(test_source: str, client_source: str) -> str:
        exe = build_program(test_source, str(CLIENT_DIR / client_source), "-D_GNU_SOURCE", "-Wall", "-Wextra")
        res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "FAIL" not in res.stdout
        return res.stdout

    return run
