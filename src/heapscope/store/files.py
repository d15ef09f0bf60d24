"""Creating output files safely, and the one overwrite policy every command follows.

The rules (no command may write where the user did not ask):
- nothing is written through a symbolic link, dangling or not: `-o link` is
  refused, and every file is created with O_EXCL | O_NOFOLLOW, so a name
  planted by another user in a shared directory makes the command fail with
  one line instead of writing where the link points;
- temporary files get unpredictable names (mkstemp, mode 0600) in the
  destination's own directory and are renamed over the destination, so
  readers never see half a file and no fixed name exists to plant;
- files are created 0600: a profile holds every process's command line;
- an existing file is replaced only as check_replaceable() says, the one
  place of that policy: a profile only by `record --force`, a file that is
  not a profile never by `record`, other files by exports and pages only
  with `--force` (a page heapscope wrote itself is just rewritten).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from heapscope.errors import OutputError
from heapscope.records import Record
from heapscope.store.names import CREATE_FLAGS, PRIVATE_MODE

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import BinaryIO

    StrPath = str | os.PathLike[str]

PROFILE_FORMAT = "heapscope-profile"

# Bytes a path keeps as they are in an SQLite URI; every other byte is written %HH (SQLite's
# URI rules: `?` and `#` end the path, `%HH` is decoded), as pathlib's as_uri() would.
_URI_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/-._~")


def read_only_uri(path: StrPath) -> str:
    """The SQLite URI that opens `path` read-only (its absolute, resolved form). Not pathlib's
    as_uri(): its urllib.parse and ipaddress are ~4 ms of every recording's end."""
    raw = os.fsencode(os.path.realpath(path))
    return "file:" + "".join(chr(b) if b in _URI_KEPT else f"%{b:02X}" for b in raw) + "?mode=ro"


def is_profile(path: StrPath) -> bool:
    """Whether `path` is a heapscope profile (SQLite with our format in heapscope_metadata).

    Never follows a link and never blocks (a FIFO is not a profile)."""
    try:
        with open(path, "rb", opener=_nofollow_nonblock) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode) or not f.read(16).startswith(b"SQLite format 3"):
                return False
        db = sqlite3.connect(read_only_uri(path), uri=True)
        try:
            row = db.execute("SELECT value FROM heapscope_metadata WHERE key = 'format'").fetchone()
        finally:
            db.close()
    except (OSError, sqlite3.Error):
        return False
    return row is not None and row[0] == PROFILE_FORMAT


def _nofollow_nonblock(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def _never(_path: StrPath) -> bool:
    return False


class OutputKind(Record, frozen=True):
    """What a command writes, for the overwrite policy."""

    what: str  # for messages: "heapscope profile", "export", ...
    is_ours: Callable[[StrPath], bool] = _never  # an existing file of this kind
    rewrite_ours: bool = False  # replace our own earlier output without --force (pages)
    others_with_force: bool = False  # replace any other regular file (never a profile) with --force


PROFILE = OutputKind("heapscope profile", is_profile)
EXPORT = OutputKind("export", others_with_force=True)


def check_replaceable(path: StrPath, force: bool, kind: OutputKind) -> bool:
    """The overwrite policy: whether `path` exists and may be replaced; OutputError (one line) if not.

    Never a link (dangling or not), a directory or anything but a regular file.
    A file of the command's own kind with --force (or always, for a kind that
    rewrites its own output). A heapscope profile only by `record --force`.
    Any other file only by a kind that allows it, with --force.
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
    if kind.is_ours(path):
        if force or kind.rewrite_ours:
            return True
        raise OutputError(f"{path}: a {kind.what} is already there (use --force to replace it)")
    if is_profile(path):
        raise OutputError(f"{path}: is a heapscope profile; only `heapscope record --force` replaces one")
    if kind.others_with_force:
        if force:
            return True
        raise OutputError(f"{path}: exists (use --force to replace it)")
    raise OutputError(f"{path}: exists and is not a {kind.what}; refusing to replace it")


def create_private(path: StrPath) -> int:
    """Create `path` anew (O_EXCL, never through a link), mode 0600; returns the open fd."""
    try:
        return os.open(path, CREATE_FLAGS, PRIVATE_MODE)
    except FileExistsError as e:
        raise OutputError(f"{path}: appeared while heapscope was creating it; refusing to use it") from e
    except OSError as e:
        raise OutputError(f"{path}: cannot create: {e.strerror or e}") from e


def remove_file(path: StrPath) -> None:
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
def atomic_output(path: Path, force: bool, kind: OutputKind) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an error.

    The data goes to an unpredictably named 0600 file beside `path`, which is
    renamed over it at the end (rename replaces a link itself, never its target).
    """
    check_replaceable(path, force, kind)
    import tempfile  # here: `record` writes no file through this (start-up cost)
    from pathlib import Path

    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        # The destination may have changed since the check: look again.
        check_replaceable(path, force, kind)
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
