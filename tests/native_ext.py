"""The C extensions heapscope.bookkeeping._native and heapscope.producer._ingest, as the tests load them.

An installed heapscope is used as it is. When heapscope runs from src/ (a
fresh clone), each extension is compiled with `cc` into a temporary
directory and loaded under its real name, so the tests run against the C
sources of this tree and never against a stale hand-built .so left in src/.
The sources are those meson.build lists; the flags those of the package
build, read from the file meson.build reads
(src/heapscope/bookkeeping/native.flags), plus -Werror.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import ExtensionFileLoader
from pathlib import Path
from types import ModuleType

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "heapscope"
FLAGS_FILE = SRC / "bookkeeping" / "native.flags"


def _bookkeeping_core() -> list[Path]:
    """bookkeeping/meson.build's bookkeeping_core, read from it: compiled into both extensions
    and into the ingest fuzz harness (tests/fuzz/fuzz_build.py), listed once there."""
    text = (SRC / "bookkeeping" / "meson.build").read_text()
    m = re.search(r"bookkeeping_core\s*=\s*files\(([^)]*)\)", text)
    assert m is not None, "bookkeeping/meson.build has no bookkeeping_core = files(...)"
    return [SRC / "bookkeeping" / name for name in re.findall(r"'([^']+\.c)'", m.group(1))]


BOOKKEEPING_CORE = _bookkeeping_core()
EXTENSIONS = {  # module name -> its own sources, with the core
    "heapscope.bookkeeping._native": [SRC / "bookkeeping" / "_native.c", SRC / "bookkeeping" / "native_rows.c",
                                      SRC / "bookkeeping" / "pylines.c"],
    "heapscope.producer._ingest": [SRC / "producer" / "_ingest.c", SRC / "producer" / "ingest_core.c"],
}


def build_flags() -> list[str]:
    """The package build's compiler flags for the extensions (one definition)."""
    return FLAGS_FILE.read_text().split()


def compile_extension(name: str, out_dir: Path) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"heapscope is not installed and there is no C compiler ({cc}) to build {name}")
    out = out_dir / f"{name.rsplit('.', 1)[1]}{sysconfig.get_config_var('EXT_SUFFIX')}"
    sources = [str(p) for p in EXTENSIONS[name] + BOOKKEEPING_CORE]
    cmd = [cc, *build_flags(), "-Werror", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
           f"-I{SRC / 'wire'}", f"-I{SRC / 'bookkeeping'}", *sources, "-o", str(out)]
    subprocess.run(cmd, check=True, timeout=120)
    return out


def _load(name: str, out_dir: Path) -> ModuleType:
    try:
        module = importlib.import_module(name)
        if not Path(module.__file__ or "").resolve().is_relative_to(SRC):
            return module
    except ImportError:
        pass
    path = compile_extension(name, out_dir)
    loader = ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def load_native(out_dir: Path) -> ModuleType:
    """heapscope.bookkeeping._native: Tracker, Trie, Resolver, addr2line."""
    return _load("heapscope.bookkeeping._native", out_dir)


def load_ingest(out_dir: Path) -> ModuleType:
    """heapscope.producer._ingest (Ingest), which imports heapscope.bookkeeping._native: loaded first."""
    load_native(out_dir)
    return _load("heapscope.producer._ingest", out_dir)
