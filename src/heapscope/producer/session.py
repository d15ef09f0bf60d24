"""What a recording watches besides its clients: the producer's own guardrails,
and the session directories that crashed runs left behind.

The recording itself (start or attach, the loop, dumps, signals, teardown)
is heapscope.session.Recording. `record` checks the guardrails' limits before
its target starts, with light imports only (start-up cost): no pathlib, no contextlib.
"""

from __future__ import annotations

import fcntl
import os
import stat

from heapscope.producer.config import check_positive
from heapscope.producer.listener import OWNED_PREFIX, OWNER_FILE
from heapscope.producer.tmpdir import temp_dir

MAX_MEMORY_MB = float(1 << 30)  # 1 PiB
MAX_CPU_S = 10.0 * 365 * 24 * 3600  # ten years


class Guardrails:
    """heapprofd's max_heapprofd_memory_kb / max_heapprofd_cpu_secs, for heapscope itself."""

    def __init__(self, memory_mb: float | None, cpu_s: float | None) -> None:
        memory_mb = check_positive(memory_mb, "--max-producer-memory", MAX_MEMORY_MB)
        cpu_s = check_positive(cpu_s, "--max-producer-cpu", MAX_CPU_S)
        self.memory_kb = memory_mb * 1024 if memory_mb is not None else None
        self.cpu_s = cpu_s
        self.enabled = memory_mb is not None or cpu_s is not None
        t = os.times()
        self.cpu_start = t.user + t.system

    def check(self) -> str:
        """'' while within the limits, else which one was passed."""
        if self.memory_kb is not None:
            from heapscope.producer import procfs  # here: `record` checks the limits before its target starts

            kb = procfs.status_field("self", "RssAnon") + procfs.status_field("self", "VmSwap")
            if kb > self.memory_kb:
                return f"producer memory {kb / 1024:.1f} MB > --max-producer-memory {self.memory_kb / 1024:g} MB"
        if self.cpu_s is not None:
            t = os.times()
            used = t.user + t.system - self.cpu_start
            if used > self.cpu_s:
                return f"producer CPU {used:.2f} s > --max-producer-cpu {self.cpu_s:g} s"
        return ""


def remove_stale_dirs(tmp: str | None = None) -> int:
    """Remove the session directories of our own runs that died without cleaning up.

    Only directories named heapscope-* that are real directories (not
    symlinks) owned by our uid, holding an owner lock that nobody holds any
    more: the run that made it is dead (the kernel drops an flock with its
    last holder). Returns how many were removed.
    """
    base = tmp or temp_dir()
    removed = 0
    me = os.geteuid()
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(OWNED_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
            continue
        path = entry.path  # a str: a Path per entry cost ~30 us, and temp dirs hold many
        try:
            fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # not ours (no owner lock), or being created right now
        try:
            if os.fstat(fd).st_uid != me:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its run is alive
            # rmtree works through directory fds here and never follows a symlink.
            import shutil  # here: only a run that finds a stale directory pays for it

            try:
                shutil.rmtree(path)
                removed += 1
            except OSError:
                pass
        finally:
            os.close(fd)
    return removed
