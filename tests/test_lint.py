"""The tree stays `ruff` clean, and `mypy --strict` clean: the package with the dev install's packages
and with the runtime dependencies alone (`pip install .`: the optional ones typed at their boundary),
and tests/ (all three come with the `dev` extra)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


@pytest.mark.timeout(120)
def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def mypy(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """mypy with pyproject.toml's settings (strict), in a child: runs share no state."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=580, env=env)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    """The package type-checks under mypy --strict (settings in pyproject.toml)."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")  # never a silent pass: dev has it
    status, out = mypy(str(ROOT / "src" / "heapscope"))
    assert status == 0, out


def runtime_distributions() -> set[str]:
    """heapscope's dependencies without any extra, and theirs, as installed here."""
    found: set[str] = set()
    todo = ["heapscope"]
    while todo:
        for line in metadata.requires(todo.pop()) or []:
            req = Requirement(line)
            if (req.marker is None or req.marker.evaluate({"extra": ""})) and req.name.lower() not in found:
                found.add(req.name.lower())
                todo.append(req.name)
    return found


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean_with_the_runtime_dependencies_only(tmp_path: Path) -> None:
    """`pip install .` brings none of the extras (textual, grpcio, clickhouse-connect, chdb, pytest):
    the package type-checks without them too. mypy reads the packages a Python of its own sees: a
    venv whose site-packages holds only the runtime distributions' files (links to this install's)."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    env_dir = tmp_path / "runtime"
    venv.create(env_dir, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    linked = 0
    for name in sorted(runtime_distributions()):
        for file in metadata.distribution(name).files or []:
            if file.parts[0] == ".." or ".dist-info" in file.parts[0] or file.suffix not in (".py", ".pyi", ".typed"):
                continue
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(Path(str(file.locate())).resolve())
                linked += 1
    assert linked > 0, "no runtime distribution found installed"
    status, out = mypy("--python-executable", str(python), "--cache-dir", str(tmp_path / "cache"),
                       str(ROOT / "src" / "heapscope"))
    assert status == 0, out


# tests/ files that mypy --strict does not pass yet, each typed when next worked on: a file
# made clean must leave this list (the test below says so), and no other file may join it.
NOT_YET_STRICT: frozenset[str] = frozenset()


def python_folders() -> list[Path]:
    """tests/'s folders of Python files: mypy checks each on its own (their conftest.py share a name)."""
    return sorted({path.parent for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts})


@pytest.mark.timeout(600)
@pytest.mark.parametrize("folder", python_folders(), ids=lambda p: str(p.relative_to(ROOT)))
def test_mypy_strict_is_clean_on_tests(folder: Path) -> None:
    """A test imports helpers from its folder and the folders above it, up to tests/ (pytest puts
    each on sys.path, with their conftest.py; fault/conftest.py adds integration/): mypy is given
    the same path. Errors count in the folder's own files (those of a helper imported from
    elsewhere count in the helper's folder)."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    above = [folder, *[p for p in folder.parents if p.is_relative_to(TESTS)]]
    extra = [TESTS / "integration"] if folder == TESTS / "fault" else []
    # src/ first: the tests are checked against this tree's heapscope, not an installed one.
    path = os.pathsep.join(map(str, [ROOT / "src", *above, *extra]))
    files = sorted(folder.glob("*.py"))
    status, out = mypy(*map(str, files), env={**os.environ, "MYPYPATH": path})
    mine = {str(file.relative_to(ROOT)) for file in files}
    failing = {line.split(":")[0] for line in out.splitlines() if ": error: " in line} & mine
    assert status == 0 or failing or " error: " in out, out  # a failure of mypy's own, not a file's
    new = sorted(failing - NOT_YET_STRICT)
    assert not new, "\n".join(line for line in out.splitlines() if line.split(":")[0] in new)
    typed = sorted((NOT_YET_STRICT & mine) - failing)
    assert not typed, f"mypy --strict passes these now: take them out of NOT_YET_STRICT: {typed}"
