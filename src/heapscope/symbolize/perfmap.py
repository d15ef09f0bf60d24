"""Names for JIT code from the perf map the program wrote: /tmp/perf-PID.map (or a jitdump).

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

A runtime may write perf's binary jitdump instead (node --perf-prof, the JVM with
perf's libperf-jvmti.so): `jit-PID.dump` in a directory of its choosing, which it
maps executable for profilers to find. The client sends that mapping as a MODULE
(client/modules.c); read_jitdump takes the names and addresses of its
JIT_CODE_LOAD and JIT_CODE_MOVE records, with the same checks.
"""

from __future__ import annotations

import bisect
import os
import stat

from heapscope.records import Record, field

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from typing import BinaryIO

MAX_BYTES = 64 << 20  # node's map for a large program is a few MB; more is not read
JITDUMP_MAX_RECORDS = 1 << 21  # records of a jitdump file looked at; its code bytes are skipped, never read
_BACK = 16  # earlier entries looked at for an address: a function inside another's range is rare
_CHUNK = 1 << 20


class PerfMap(Record):
    """The functions of one perf map, searchable by address; `status` says why it is empty."""

    path: str
    status: str = 'read'  # "read", "absent", or why it was refused or unreadable (one phrase)
    starts: list[int] = field(default_factory=list)  # sorted
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    truncated: bool = False  # larger than MAX_BYTES: the rest was not read
    bad_lines: int = 0  # lines not of the form `START SIZE name`
    bytes_read: int = 0

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, addr: int) -> str | None:
        """The function whose [START, START + SIZE) holds `addr`; the innermost (latest start) one."""
        i = bisect.bisect_right(self.starts, addr) - 1
        for j in range(i, max(i - _BACK, -1), -1):
            if addr < self.ends[j]:
                return self.names[j]
        return None


def _open_owned(path: str, uid: int) -> tuple[int | None, str]:
    """A descriptor of `path` if it is a regular file of `uid` reached without a symlink at its
    end (O_NOFOLLOW; O_NONBLOCK: a FIFO cannot block the open), else None and why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None, "absent"
    except OSError as e:  # ELOOP: a symbolic link
        return None, f"not opened ({os.strerror(e.errno) if e.errno else e})"
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        return None, f"not read ({os.strerror(e.errno) if e.errno else e})"
    why = "refused: not a regular file" if not stat.S_ISREG(st.st_mode) else (
        f"refused: owned by uid {st.st_uid}, the process ran as uid {uid}" if st.st_uid != uid else "")
    if why:
        os.close(fd)
        return None, why
    return fd, ""


def perf_map_path(pid: int, directory: str = "/tmp") -> str:
    return os.path.join(directory, f"perf-{pid}.map")


def read_perf_map(pid: int, uid: int, directory: str = "/tmp", limit: int = MAX_BYTES) -> PerfMap:
    """The perf map of process `pid` (running as `uid`), or an empty one whose status says why not."""
    path = perf_map_path(pid, directory)
    fd, why = _open_owned(path, uid)
    if fd is None:
        return PerfMap(path, why)
    try:
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


# perf's tools/perf/Documentation/jitdump-specification.txt: a file header, then records
# of a header (id, total size, timestamp) and a body; JIT_CODE_LOAD names code, JIT_CODE_MOVE moves it.
_JITDUMP_MAGIC = 0x4A695444  # "JiTD", written in the writer's byte order
_JIT_CODE_LOAD, _JIT_CODE_MOVE = 0, 1
_NAME_MAX = 4096


def read_jitdump(path: str, uid: int, limit: int = MAX_BYTES) -> PerfMap:
    """The functions a jitdump file names (its code bytes skipped), or an empty map saying why not."""
    fd, why = _open_owned(path, uid)
    if fd is None:
        return PerfMap(path, why)
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            return _parse_jitdump(path, f, limit)
    except OSError as e:
        return PerfMap(path, f"not read ({os.strerror(e.errno) if e.errno else e})")


def _parse_jitdump(path: str, f: BinaryIO, limit: int) -> PerfMap:
    import struct

    head = f.read(40)
    if len(head) < 40:
        return PerfMap(path, "not read: shorter than a jitdump header")
    order = "<" if struct.unpack("<I", head[:4])[0] == _JITDUMP_MAGIC else ">"
    magic, _version, header_size = struct.unpack(order + "III", head[:12])
    if magic != _JITDUMP_MAGIC or header_size < 40:
        return PerfMap(path, "not read: not a jitdump file")
    by_start: dict[int, tuple[int, str]] = {}
    pos, bad, truncated, read = header_size, 0, False, 40
    for _ in range(JITDUMP_MAX_RECORDS):
        f.seek(pos)
        rec = f.read(16)
        if len(rec) < 16:
            break
        kind, size = struct.unpack(order + "II", rec[:8])
        if size < 16:
            bad += 1
            break
        if read > limit:  # bytes read, not the file's size: its code bytes are skipped
            truncated = True
            break
        if kind == _JIT_CODE_LOAD and size >= 16 + 40:
            body = f.read(min(size - 16, 40 + _NAME_MAX))
            read += 16 + len(body)
            if len(body) < 40:
                break  # the record being written when the file was read
            _pid, _tid, _vma, addr, code_size, _index = struct.unpack(order + "IIQQQQ", body[:40])
            name = body[40:].split(b"\0", 1)[0].decode("utf-8", "replace")
            if code_size > 0 and name:
                by_start[addr] = (addr + code_size, name)
            else:
                bad += 1
        elif kind == _JIT_CODE_MOVE and size >= 16 + 48:
            body = f.read(48)
            read += 16 + len(body)
            if len(body) < 48:
                break
            _pid, _tid, _vma, old, new, code_size, _index = struct.unpack(order + "IIQQQQQ", body)
            moved = by_start.pop(old, None)
            if moved is not None:
                by_start[new] = (new + code_size, moved[1])
        pos += size
    else:
        truncated = True
    starts = sorted(by_start)
    return PerfMap(path, "read", starts, [by_start[s][0] for s in starts], [by_start[s][1] for s in starts],
                   truncated, bad, read)


def merged(first: PerfMap, second: PerfMap) -> PerfMap:
    """One map of the functions of both (`second`'s at an address both name), read from the files
    of both: a file read again (a pid's perf map, at the end of each of its images) is named once."""
    by_start = {s: (e, n) for s, e, n in zip(first.starts, first.ends, first.names, strict=True)}
    by_start.update({s: (e, n) for s, e, n in zip(second.starts, second.ends, second.names, strict=True)})
    starts = sorted(by_start)
    path = first.path if second.path in first.path.split(" and ") else f"{first.path} and {second.path}"
    return PerfMap(path, "read", starts, [by_start[s][0] for s in starts],
                   [by_start[s][1] for s in starts], first.truncated or second.truncated,
                   first.bad_lines + second.bad_lines, first.bytes_read + second.bytes_read)


def describe(m: PerfMap) -> str:
    """One phrase about the map, for the summary: where it is and what was had of it."""
    if m.status == "absent":
        return f"no {m.path}"
    if m.status != "read":
        return f"{m.path}: {m.status}"
    more = f", the rest past {m.bytes_read:,} bytes not read" if m.truncated else ""
    return f"{m.path}: {len(m):,} functions{more}"
