"""The C extension heapscope.producer._ingest, as the tests load it.

An installed heapscope is used as it is. When heapscope runs from src/ (a
fresh clone), the extension is compiled with `cc` into a temporary directory
and loaded under its real name, so the tests run against the C sources of
this tree and never against a stale hand-built .so left in src/. The flags
are those of the package build, read from the file meson.build reads
(src/heapscope/producer/_ingest.flags), plus -Werror.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import ExtensionFileLoader
from pathlib import Path
from types import ModuleType

import pytest

MODULE_NAME = "heapscope.producer._ingest"
SRC = Path(__file__).resolve().parents[1] / "src" / "heapscope"
FLAGS_FILE = SRC / "producer" / "_ingest.flags"


def build_flags() -> list[str]:
    """The package build's compiler flags for the extension (one definition)."""
    return FLAGS_FILE.read_text().split()


def compile_ingest(out_dir: Path) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"heapscope is not installed and there is no C compiler ({cc}) to build _ingest")
    out = out_dir / f"_ingest{sysconfig.get_config_var('EXT_SUFFIX')}"
    sources = sorted(str(p) for d in ("producer", "bookkeeping") for p in (SRC / d).glob("*.c"))
    cmd = [cc, *build_flags(), "-Werror", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
           f"-I{SRC / 'wire'}", f"-I{SRC / 'bookkeeping'}", *sources, "-o", str(out)]
    subprocess.run(cmd, check=True, timeout=120)
    return out


def load_ingest(out_dir: Path) -> ModuleType:
    try:
        module = importlib.import_module(MODULE_NAME)
        if not Path(module.__file__ or "").resolve().is_relative_to(SRC):
            return module
    except ImportError:
        pass
    path = compile_ingest(out_dir)
    loader = ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE_NAME] = module
    return module
