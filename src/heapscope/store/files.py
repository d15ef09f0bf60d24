"""Creating output files safely, and the one overwrite policy every command follows.

The rules (issue 10):
- nothing is written through a symbolic link, dangling or not: `-o link` is
  refused, and every file is created with O_EXCL | O_NOFOLLOW, so a name
  planted by another user in a shared directory makes the command fail with
  one line instead of writing where the link points;
- temporary files get unpredictable names (mkstemp, mode 0600) in the
  destination's own directory and are renamed over the destination, so
  readers never see half a file and no fixed name exists to plant;
- files are created 0600: a profile holds every process's command line;
- an existing file is replaced only when it is what the command writes (a
  heapscope profile for `record`, our own HTML for `flamegraph`, ...) and
  `--force` is given; any other file is never replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from heapscope.errors import OutputError

PRIVATE_MODE = 0o600
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def check_replaceable(path: Path, force: bool, ours: Callable[[Path], bool], what: str, *,
                      ours_needs_force: bool = True) -> bool:
    """Whether `path` exists and may be replaced; OutputError (one line) when it must not be.

    `ours(path)` says whether an existing regular file is of the kind the
    command writes (`what`, e.g. "heapscope profile"); only such a file is
    replaced, and only with `force` (unless `ours_needs_force` is False: a
    page heapscope wrote itself is just rewritten).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from e
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"{path}: is a symbolic link; refusing to write through it")
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{path}: exists and is not a regular file; refusing to replace it")
    if not ours(path):
        raise OutputError(f"{path}: exists and is not a {what}; refusing to replace it")
    if not force and ours_needs_force:
        raise OutputError(f"{path}: a {what} is already there (use --force to replace it)")
    return True


def create_private(path: Path) -> int:
    """Create `path` anew (O_EXCL, never through a link), mode 0600; returns the open fd."""
    try:
        return os.open(path, _CREATE_FLAGS, PRIVATE_MODE)
    except FileExistsError as e:
        raise OutputError(f"{path}: appeared while heapscope was creating it; refusing to use it") from e
    except OSError as e:
        raise OutputError(f"{path}: cannot create: {e.strerror or e}") from e


def remove_file(path: Path) -> None:
    """Unlink `path` if it is a regular file or a link (never followed); missing is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError as e:
        raise OutputError(f"{path}: is a directory") from e
    except OSError as e:
        raise OutputError(f"{path}: cannot replace: {e.strerror or e}") from e


@contextmanager
def atomic_output(path: Path, force: bool, ours: Callable[[Path], bool], what: str, *,
                  ours_needs_force: bool = True) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an error.

    The data goes to an unpredictably named 0600 file beside `path`, which is
    renamed over it at the end (rename replaces a link itself, never its target).
    """
    check_replaceable(path, force, ours, what, ours_needs_force=ours_needs_force)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        # The destination may have changed since the check: look again.
        check_replaceable(path, force, ours, what, ours_needs_force=ours_needs_force)
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def never_ours(_path: Path) -> bool:
    """For outputs that never replace anything."""
    return False
