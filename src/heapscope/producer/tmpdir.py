"""The shared temp directory and a private directory in it, with os calls only.

tempfile (with random, shutil, bz2 and lzma, which it imports) cost every
`heapscope record` ~2-3 ms of CPU to load (benchmarks/RESULTS.md),
for one gettempdir() and one mkdtemp(). These do what those two do on Linux
(https://docs.python.org/3/library/tempfile.html#tempfile.gettempdir): the
first of $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp and the current
directory where a file can be created. A program that has imported tempfile
itself (a test runner hosting a recording) may have set tempfile.tempdir:
then tempfile is asked.
"""

from __future__ import annotations

import errno
import os
import sys

_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # tempfile's
_TRIES = 10000  # tempfile.TMP_MAX
_base: str | None = None


def _random_name(n: int = 8) -> str:
    return "".join([_NAME_CHARS[b % len(_NAME_CHARS)] for b in os.urandom(n)])


def temp_dir() -> str:
    """tempfile.gettempdir()."""
    global _base
    loaded = sys.modules.get("tempfile")
    if loaded is not None:
        return str(loaded.gettempdir())
    if _base is None:
        _base = _usable_dir()
    return _base


def _usable_dir() -> str:
    candidates = [d for d in (os.getenv(v) for v in ("TMPDIR", "TEMP", "TMP")) if d]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]
    try:
        candidates.append(os.getcwd())
    except OSError:
        candidates.append(os.curdir)
    for d in candidates:
        if d != os.curdir:
            d = os.path.abspath(d)
        for _ in range(100):  # as tempfile: a test file created, written and removed
            name = os.path.join(d, _random_name())
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, b"blat")
                finally:
                    os.close(fd)
                os.unlink(name)
                return d
            except FileExistsError:
                continue
            except OSError:
                break
    raise FileNotFoundError(errno.ENOENT, f"No usable temporary directory found in {candidates}")


def make_private_dir(prefix: str) -> str:
    """tempfile.mkdtemp(prefix=prefix): a new directory of mode 0700 in temp_dir(); its absolute path."""
    base = temp_dir()
    for _ in range(_TRIES):
        path = os.path.join(base, prefix + _random_name())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return os.path.abspath(path)
    raise FileExistsError(errno.EEXIST, "No usable temporary directory name found")


def remove_dir(path: str) -> None:
    """Remove `path` and what is in it (gone already: nothing to do). A session directory
    holds only files; anything else is left to shutil.rmtree, imported then."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    try:
        for name in names:
            try:  # noqa: SIM105 (contextlib is ~3 ms of imports on the target's path)
                os.unlink(os.path.join(path, name))
            except FileNotFoundError:
                pass
        os.rmdir(path)
    except OSError:
        import shutil

        shutil.rmtree(path)  # never follows a symlink (it works through directory fds)
