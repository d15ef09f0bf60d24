"""The profile's last step: SQLite folds its write-ahead log into the file (store/writer.py's
close), and what to tell the user when that fails.

Every dump went to `PROFILE-wal`; the final checkpoint copies it into `PROFILE`, which needs
about as much free space again. When the disk fills up there, the recording is whole but lives
in two files: `PROFILE` alone, copied elsewhere, reads as an empty or older profile. The user is
told which files make the profile and how to fold them into one once there is space.

May import: nothing of heapscope.
"""

from __future__ import annotations

import errno
import os
import sqlite3

_SQLITE_FULL = 13  # sqlite3.h's SQLITE_FULL (the module names it from Python 3.11, typeshed not yet)

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from heapscope.store.writer import ProfileWriter


def close_profile(writer: ProfileWriter, output: str) -> str | None:
    """Close `writer`; None when the profile is one file, else the problem to say (the log is
    left in place: the connection is not closed, so SQLite cannot remove it)."""
    try:
        writer.close()
    except Exception as e:  # whatever it is, the target's status comes first: said, never raised
        try:
            if os.stat(f"{output}-wal").st_size == 0:
                return None  # nothing was ever written (a disk full from the start, said then)
        except OSError:
            return None  # no log: nothing of the profile is outside it
        full = (isinstance(e, sqlite3.Error) and getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL) or (
            isinstance(e, OSError) and e.errno == errno.ENOSPC) or "disk is full" in str(e)
        why = "the disk filled up" if full else f"closing it failed ({e})"
        return (f"{why} before the log could be folded into {output}: the profile is {output} and "
                f"{output}-wal together (copy or move both; `sqlite3 {output} 'PRAGMA wal_checkpoint(TRUNCATE)'` "
                "makes it one file once there is space)")
    return None
