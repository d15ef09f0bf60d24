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

Both are written by the export itself (its `labels` and `trailer`), in one
pass: a scrape of a live recording builds one of these a second, so the
profile is encoded and compressed once, not decoded and re-encoded after.
The time fields are top-level fields appended after the rest, which protobuf
allows in any order (https://protobuf.dev/programming-guides/encoding/#order).
"""

from __future__ import annotations

import io

from heapscope.export import _proto as pb
from heapscope.export import pprof
from heapscope.export._common import pick_dump, process_label, select_processes, wall_clock
from heapscope.records import Record
from heapscope.store.reader import Process, Profile

# google/pprof proto/profile.proto
_TIME_NANOS, _DURATION_NANOS = 9, 10

__all__ = ["PprofDump", "build", "wall_clock"]  # wall_clock moved to export._common; still importable here


class PprofDump(Record, frozen=True):
    """One gzip pprof profile and what a sender needs to know about it."""

    data: bytes  # gzip-compressed perftools.profiles.Profile
    pids: tuple[int, ...]  # processes with a dump in it
    executables: tuple[str, ...]  # their executables ('' when unknown), same order
    start_unix_ns: int  # wall-clock start of the dump window (0 when unknown)
    end_unix_ns: int  # wall-clock time of the dump (0 when unknown)
    samples: int  # number of samples (callsites with a non-zero value)


def build(profile: Profile, *, view: str = "space", pid: int | None = None, dump: int | None = None) -> PprofDump:
    """Dump `dump` (1 = first, -1/None = last) of every process, or of `pid`, as gzip pprof.

    One pass of heapscope.export.pprof: the labels and the time fields are written with the rest."""
    processes = select_processes(profile, pid)
    chosen = []
    for p in processes:
        d = pick_dump(profile.dumps(p.info.upid), dump, process_label(p))
        if d is not None:
            chosen.append((p, d))
    to_unix = wall_clock(profile)
    start = min((d.ts for _, d in chosen), default=0)
    end = max((d.ts_end for _, d in chosen), default=0)
    trailer = b""
    if chosen and profile.metadata().get("started_unix_ns"):
        trailer = (pb.uint(_TIME_NANOS, to_unix(end))  # when the snapshot was taken, as Go sets it
                   + pb.uint(_DURATION_NANOS, max(0, end - start)))
    buf = io.BytesIO()
    samples = pprof.export(profile, buf, view=view, pid=pid, dump=dump, labels=_labels, trailer=trailer)
    return PprofDump(
        data=buf.getvalue(),
        pids=tuple(p.info.pid for p, _ in chosen),
        executables=tuple(p.info.exe for p, _ in chosen),
        start_unix_ns=to_unix(start) if chosen else 0,
        end_unix_ns=to_unix(end) if chosen else 0,
        samples=samples,
    )


def _labels(p: Process) -> list[tuple[str, int | str]]:
    """The labels of every sample of `p`: its pid, and its executable when known."""
    exe = p.info.exe or p.info.name
    return [("pid", p.info.pid), ("executable", exe)] if exe else [("pid", p.info.pid)]
