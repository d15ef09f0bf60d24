"""The tree stays `ruff` clean and the package `mypy --strict` clean (both come with the `test` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    """The package type-checks under mypy --strict (settings in pyproject.toml)."""
    from mypy import api  # the `test` extra has it: a missing mypy fails here, loudly

    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), str(ROOT / "src" / "heapscope")])
    assert status == 0, stdout + stderr
