"""One dump of a profile as gzip pprof bytes, the way Go's net/http/pprof serves a heap profile.

The profile itself comes from heapscope.export.pprof (sample types
alloc_objects/count, alloc_space/bytes, inuse_objects/count,
inuse_space/bytes as Go names them; `view` picks the default one: `space`
for /debug/pprof/heap, `alloc_space` for /debug/pprof/allocs). This module
adds what a profile that leaves its host needs and a file export does not:

- labels on every sample: `pid` (numeric) and `executable` (string), so that
  profiles of many processes and hosts stay apart once merged;
- `time_nanos` and `duration_nanos` (profile.proto fields 9 and 10) in wall
  clock time (the dump's time, and its window since the previous dump):
  Parca files a raw profile under its time_nanos.

It works on the encoded message: a Profile is a sequence of top-level fields,
and protobuf appends repeated fields met later, so extra string_table entries
and sample labels can be added without re-encoding the rest
(https://protobuf.dev/programming-guides/encoding/#optional).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from heapscope.export import _proto as pb
from heapscope.export import pprof
from heapscope.export._common import pick_dump, process_label, select_processes
from heapscope.store.reader import Profile

# google/pprof proto/profile.proto
_SAMPLE, _STRING, _TIME_NANOS, _DURATION_NANOS = 2, 6, 9, 10
_SAMPLE_LABEL = 3
_LABEL_KEY, _LABEL_STR, _LABEL_NUM = 1, 2, 3


@dataclass(frozen=True, slots=True)
class PprofDump:
    """One gzip pprof profile and what a sender needs to know about it."""

    data: bytes  # gzip-compressed perftools.profiles.Profile
    pids: tuple[int, ...]  # processes with a dump in it
    executables: tuple[str, ...]  # their executables ('' when unknown), same order
    start_unix_ns: int  # wall-clock start of the dump window (0 when unknown)
    end_unix_ns: int  # wall-clock time of the dump (0 when unknown)
    samples: int  # number of samples (callsites with a non-zero value)


def wall_clock(profile: Profile) -> Callable[[int], int]:
    """Map the profile's timestamps (CLOCK_MONOTONIC ns) to Unix ns.

    `record` stores `started_unix_ns` (time.time_ns() at start) and, when it
    has it, `started_monotonic_ns` taken at the same moment. Without the
    latter, the first process's start stands in for the monotonic start: it
    is a few milliseconds later, which is well inside one dump interval.
    Without a start time (profiles not written by `record`) timestamps stay
    as they are: ordered, but not dates.
    """
    meta = profile.metadata()
    try:
        unix0 = int(meta.get("started_unix_ns", "0"))
    except ValueError:
        unix0 = 0
    try:
        mono0 = int(meta["started_monotonic_ns"])
    except (KeyError, ValueError):
        starts = [p.info.start_ts for p in profile.processes() if p.info.start_ts > 0]
        mono0 = min(starts) if starts else 0
    if unix0 <= 0:
        return lambda ts: ts
    return lambda ts: max(0, unix0 + (ts - mono0))


def build(profile: Profile, *, view: str = "space", pid: int | None = None, dump: int | None = None) -> PprofDump:
    """Dump `dump` (1 = first, -1/None = last) of every process, or of `pid`, as gzip pprof."""
    processes = select_processes(profile, pid)
    chosen = []
    for p in processes:
        d = pick_dump(profile.dumps(p.info.upid), dump, process_label(p))
        if d is not None:
            chosen.append((p, d))
    buf = io.BytesIO()
    pprof.export(profile, buf, view=view, pid=pid, dump=dump)
    raw = gzip.decompress(buf.getvalue())
    to_unix = wall_clock(profile)
    start = min((d.ts for _, d in chosen), default=0)
    end = max((d.ts_end for _, d in chosen), default=0)
    exe_of = {p.info.pid: p.info.exe or p.info.name for p, _ in chosen}
    only_pid = chosen[0][0].info.pid if len(processes) == 1 and chosen else None
    body, samples = _add_labels(raw, exe_of, only_pid)
    if chosen and profile.metadata().get("started_unix_ns"):
        body += pb.uint(_TIME_NANOS, to_unix(end))  # when the snapshot was taken, as Go sets it
        body += pb.uint(_DURATION_NANOS, max(0, end - start))
    return PprofDump(
        data=gzip.compress(body, compresslevel=6, mtime=0),
        pids=tuple(p.info.pid for p, _ in chosen),
        executables=tuple(p.info.exe for p, _ in chosen),
        start_unix_ns=to_unix(start) if chosen else 0,
        end_unix_ns=to_unix(end) if chosen else 0,
        samples=samples,
    )


def _add_labels(raw: bytes, exe_of: dict[int, str], only_pid: int | None) -> tuple[bytes, int]:
    """`raw` with pid and executable labels on every sample; (new message, sample count)."""
    strings: list[bytes] = []
    for field, _start, _end, value in _fields(raw):
        if field == _STRING and isinstance(value, bytes):
            strings.append(value)
    index = {s: i for i, s in reversed(list(enumerate(strings)))}
    extra: list[bytes] = []

    def sid(text: str) -> int:
        b = text.encode("utf-8", "surrogateescape")
        i = index.get(b)
        if i is None:
            i = len(strings) + len(extra)
            index[b] = i
            extra.append(b)
        return i

    pid_key, exe_key = sid("pid"), sid("executable")
    out = bytearray()
    samples = 0
    for field, start, end, value in _fields(raw):
        if field != _SAMPLE or not isinstance(value, bytes):
            out += raw[start:end]
            continue
        samples += 1
        pid = only_pid
        has_pid = False
        for f, _s, _e, v in _fields(value):
            if f == _SAMPLE_LABEL and isinstance(v, bytes):
                label = {lf: lv for lf, _ls, _le, lv in _fields(v)}
                if label.get(_LABEL_KEY) == pid_key and isinstance(label.get(_LABEL_NUM), int):
                    pid = int(label[_LABEL_NUM])
                    has_pid = True
        labels = b""
        if pid is not None:
            if not has_pid:
                labels += pb.blob(_SAMPLE_LABEL, pb.uint(_LABEL_KEY, pid_key) + pb.uint(_LABEL_NUM, pid))
            exe = exe_of.get(pid, "")
            if exe:
                labels += pb.blob(_SAMPLE_LABEL, pb.uint(_LABEL_KEY, exe_key) + pb.uint(_LABEL_STR, sid(exe)))
        out += pb.blob(_SAMPLE, value + labels)
    for s in extra:
        out += pb.blob(_STRING, s)
    return bytes(out), samples


def _fields(buf: bytes) -> Iterator[tuple[int, int, int, int | bytes]]:
    """(field number, start, end, value) of each field of one message: ints for varints, bytes for blobs."""
    i, n = 0, len(buf)
    while i < n:
        start = i
        key, i = _varint(buf, i)
        wire = key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value = buf[i:i + size]
            i += size
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield key >> 3, start, i, value


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7
