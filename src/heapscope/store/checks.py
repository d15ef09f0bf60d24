"""The checks made before SQLite sees a profile, and the one line every failed read becomes.

SQLite would check a file vaguely, slowly or not at all (a FIFO blocks its open, a
truncated file fails halfway through a report): these say what is wrong with the file
in one line that names it. reader.py runs them; every query it makes goes through
profile_errors().
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from heapscope.errors import ProfileError
from heapscope.store.values import BadValue

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_HEADER_SIZE = 100

_KINDS = ((stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "is a FIFO"), (stat.S_ISSOCK, "is a socket"),
          (stat.S_ISCHR, "is a character device"), (stat.S_ISBLK, "is a block device"))


def check_file(p: str) -> None:
    """The checks SQLite would do vaguely, slowly or not at all, with a clear line each.

    The file is opened O_NONBLOCK (a FIFO without a writer would otherwise
    block the open) and checked with fstat before a byte is read.
    """
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise ProfileError(f"{p}: no such file") from e
    except OSError as e:
        raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        for is_kind, kind in _KINDS:
            if is_kind(st.st_mode):
                raise ProfileError(f"{p}: {kind}, not a heapscope profile")
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{p}: not a regular file, not a heapscope profile")
        header = os.pread(fd, _SQLITE_HEADER_SIZE, 0)
    except OSError as e:
        raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e
    finally:
        os.close(fd)
    size = st.st_size
    check_sidecars(p)
    if not header:
        raise ProfileError(f"{p}: empty file, not a heapscope profile")
    if not header.startswith(_SQLITE_MAGIC):
        raise ProfileError(f"{p}: not a heapscope profile (not an SQLite database)")
    if len(header) < _SQLITE_HEADER_SIZE:
        raise ProfileError(f"{p}: truncated ({size} bytes, shorter than the SQLite header)")
    # The header's page count is valid when its "version-valid-for" number
    # equals the change counter (SQLite file format, section 1.3.8). A profile
    # still being recorded in WAL mode may legitimately be ahead of its main
    # file, so the size check only applies without a -wal file beside it.
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    page_count = int.from_bytes(header[28:32], "big")
    valid_for = header[92:96]
    wal_exists = os.path.lexists(f"{p}-wal")
    if change_counter == valid_for and not wal_exists and size < page_size * page_count:
        raise ProfileError(f"{p}: truncated ({size} of {page_size * page_count} bytes)")


def check_sidecars(p: str) -> None:
    """SQLite opens `p-journal` (a rollback journal it must replay) and `p-wal`/`p-shm` by name,
    following links: one planted there by someone else would be read as part of the profile, or
    block the open (a FIFO) or fail it as 'attempt to write a readonly database'. heapscope
    never makes them links or anything but regular files, so such a file is refused by name."""
    for suffix in ("-journal", "-wal", "-shm"):
        side = f"{p}{suffix}"
        try:
            st = os.lstat(side)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise ProfileError(f"{p}: cannot check {side}: {e.strerror or e}") from e
        if stat.S_ISLNK(st.st_mode):
            raise ProfileError(f"{p}: {side} is a symbolic link, which SQLite would follow and read as part of"
                               " the profile; remove it (heapscope never makes one)")
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{p}: {side} is not a regular file, which SQLite would read as part of"
                               " the profile; remove it")



@contextmanager
def profile_errors(path: str) -> Iterator[None]:
    """Map failures met mid-read (corrupt pages, values of the wrong type) to one ProfileError line."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise ProfileError(f"{path}: {describe(e)}") from e
    except BadValue as e:
        raise ProfileError(f"{path}: corrupt profile ({e})") from e
    except UnicodeDecodeError as e:  # an error message of SQLite's quoting bytes that are not UTF-8
        raise ProfileError(f"{path}: corrupt profile (text that is not valid UTF-8)") from e
    except (OverflowError, MemoryError, RecursionError) as e:
        raise ProfileError(f"{path}: corrupt profile ({type(e).__name__}: {e})") from e


def describe(e: sqlite3.DatabaseError) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "not a database" in msg:
        return "not a heapscope profile (not an SQLite database)"
    if "malformed" in msg or "corrupt" in msg:
        return f"corrupt profile ({msg})"
    return f"cannot read profile ({msg})"
