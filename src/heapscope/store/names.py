"""The profile's files on disk: what sits beside a profile, and how each file is created.

With `os` alone, so that `record`'s start (heapscope/launch.py) creates a
profile's files by the store's own rules before the store is imported.
"""

from __future__ import annotations

import os

# SQLite's files beside a database while it is written (https://www.sqlite.org/tempfiles.html).
SIDECARS = ("-wal", "-shm", "-journal")
# Those a profile is written with (journal_mode=WAL): created with it, empty, like it.
WRITTEN_SIDECARS = ("-wal", "-shm")
# Every file heapscope writes is new: O_EXCL, never through a link, mode 0600.
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PRIVATE_MODE = 0o600
