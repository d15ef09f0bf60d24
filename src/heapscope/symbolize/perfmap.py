"""Names for JIT code from the perf map the program wrote: /tmp/perf-PID.map.

A program that generates code at run time (node with --perf-basic-prof, CPython
3.12+ with -X perf, the JVM with perf-map-agent, LuaJIT, PyPy) can append one
line per generated function to /tmp/perf-PID.map, for Linux perf to name it:
`START SIZE name`, START and SIZE in hexadecimal (the format of perf's
tools/perf/Documentation/jit-interface.txt; a leading 0x is accepted, as perf
accepts it). Frames whose pc is in no loaded object land in the process's own
pseudo-mapping (model.unknown_code_name); `record` reads the process's map as
the process ends (producer.on_process_end) and symbolize_profile names those
frames with it.

/tmp is shared by every user: the file is opened without following a symlink,
must be a regular file owned by the process's uid, and is read up to
MAX_BYTES. A later `heapscope symbolize` never reads it (the pid may be
another process's by then): the names are written by `record`.
"""

from __future__ import annotations

import bisect
import os
import stat

from heapscope.slots import Slots

MAX_BYTES = 64 << 20  # node's map for a large program is a few MB; more is not read
_BACK = 16  # earlier entries looked at for an address: a function inside another's range is rare
_CHUNK = 1 << 20


class PerfMap(Slots):
    """The functions of one perf map, searchable by address; `status` says why it is empty."""

    __slots__ = ("path", "status", "starts", "ends", "names", "truncated", "bad_lines", "bytes_read")
    path: str
    status: str  # "read", "absent", or why it was refused or unreadable (one phrase)
    starts: list[int]  # sorted
    ends: list[int]
    names: list[str]
    truncated: bool  # larger than MAX_BYTES: the rest was not read
    bad_lines: int  # lines not of the form `START SIZE name`
    bytes_read: int

    def __init__(self, path: str, status: str = "read", starts: list[int] | None = None,
                 ends: list[int] | None = None, names: list[str] | None = None, truncated: bool = False,
                 bad_lines: int = 0, bytes_read: int = 0) -> None:
        self.path = path
        self.status = status
        self.starts = [] if starts is None else starts
        self.ends = [] if ends is None else ends
        self.names = [] if names is None else names
        self.truncated = truncated
        self.bad_lines = bad_lines
        self.bytes_read = bytes_read

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, addr: int) -> str | None:
        """The function whose [START, START + SIZE) holds `addr`; the innermost (latest start) one."""
        i = bisect.bisect_right(self.starts, addr) - 1
        for j in range(i, max(i - _BACK, -1), -1):
            if addr < self.ends[j]:
                return self.names[j]
        return None


def perf_map_path(pid: int, directory: str = "/tmp") -> str:
    return os.path.join(directory, f"perf-{pid}.map")


def read_perf_map(pid: int, uid: int, directory: str = "/tmp", limit: int = MAX_BYTES) -> PerfMap:
    """The perf map of process `pid` (running as `uid`), or an empty one whose status says why not."""
    path = perf_map_path(pid, directory)
    try:
        # O_NONBLOCK: a FIFO planted under the name cannot block the open (nor the read).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return PerfMap(path, "absent")
    except OSError as e:  # ELOOP: a symbolic link
        return PerfMap(path, f"not opened ({os.strerror(e.errno) if e.errno else e})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return PerfMap(path, "refused: not a regular file")
        if st.st_uid != uid:
            return PerfMap(path, f"refused: owned by uid {st.st_uid}, the process ran as uid {uid}")
        data = _read_at_most(fd, limit + 1)
    except OSError as e:
        return PerfMap(path, f"not read ({os.strerror(e.errno) if e.errno else e})")
    finally:
        os.close(fd)
    truncated = len(data) > limit
    if truncated:
        data = data[:limit]
    return parse_perf_map(path, data, truncated)


def _read_at_most(fd: int, n: int) -> bytes:
    parts: list[bytes] = []
    left = n
    while left > 0:
        b = os.read(fd, min(_CHUNK, left))
        if not b:
            break
        parts.append(b)
        left -= len(b)
    return b"".join(parts)


def parse_perf_map(path: str, data: bytes, truncated: bool = False) -> PerfMap:
    """A PerfMap from the bytes of a perf map. A last line without its newline (being
    written, or cut at MAX_BYTES) is left out; of two entries at one address, the later wins
    (the code was freed and the address reused)."""
    lines = data.split(b"\n")
    lines.pop()  # what follows the last newline: empty, or a line not complete
    by_start: dict[int, tuple[int, str]] = {}
    bad = 0
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) < 3:
            bad += len(parts) > 0
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            bad += 1
            continue
        if size <= 0 or start < 0:
            bad += 1
            continue
        by_start[start] = (start + size, parts[2].strip().decode("utf-8", "replace"))
    starts = sorted(by_start)
    return PerfMap(path, "read", starts, [by_start[s][0] for s in starts], [by_start[s][1] for s in starts],
                   truncated, bad, len(data))


def describe(m: PerfMap) -> str:
    """One phrase about the map, for the summary: where it is and what was had of it."""
    if m.status == "absent":
        return f"no {m.path}"
    if m.status != "read":
        return f"{m.path}: {m.status}"
    more = f", the rest past {m.bytes_read:,} bytes not read" if m.truncated else ""
    return f"{m.path}: {len(m):,} functions{more}"
