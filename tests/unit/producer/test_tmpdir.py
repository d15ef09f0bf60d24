"""producer/tmpdir.py: the same directory as tempfile.gettempdir(), in an interpreter that has not
imported tempfile (as `heapscope record`), whatever TMPDIR says; the session directory's mode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from heapscope.producer.tmpdir import make_private_dir, remove_dir

pytestmark = pytest.mark.timeout(60)

_PROBE = """
import sys
from heapscope.producer.tmpdir import temp_dir
ours = temp_dir()
assert "tempfile" not in sys.modules
import tempfile
print(ours)
print(tempfile.gettempdir())
"""


@pytest.mark.parametrize("tmpdir_env", ["unset", "usable", "missing", "a file", "relative", "empty"])
def test_the_directory_tempfile_would_choose(tmp_path: Path, tmpdir_env: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    (tmp_path / "file").write_text("x")
    (tmp_path / "rel").mkdir()
    value = {"usable": str(tmp_path), "missing": str(tmp_path / "nope"), "a file": str(tmp_path / "file"),
             "relative": "rel", "empty": ""}.get(tmpdir_env)
    if value is not None:
        env["TMPDIR"] = value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert out[0] == out[1]


def test_a_private_directory_and_its_removal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a host program's own choice is kept
    path = make_private_dir("heapscope-")
    assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith("heapscope-")
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700
    (Path(path) / "a").write_text("x")
    os.symlink(tmp_path / "keep", Path(path) / "link")
    (tmp_path / "keep").write_text("kept")
    (Path(path) / "sub").mkdir()  # not what a session holds: shutil.rmtree's part
    (Path(path) / "sub" / "b").write_text("x")
    remove_dir(path)
    assert not os.path.exists(path) and (tmp_path / "keep").read_text() == "kept"
    remove_dir(path)  # gone already: nothing to do
