"""Small profiles written by hand for the store's tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from heapscope.model import Frame, Mapping, MappingId, ProcessInfo, Upid
from heapscope.store.writer import ProfileWriter


def two_callsite_writer(path: Path, upids: Iterable[int] = (1, 2)) -> ProfileWriter:
    """A writer of a profile that holds one mapping and one frame, callsites 1 and 2 (2 under 1)
    and a process per upid (pid 40 + upid): a test adds its rows, commits and closes it."""
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "f"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 1)])
    for upid in upids:
        w.add_process(ProcessInfo(Upid(upid), 40 + upid, 1, "p", "p", "/p", 0, 1))
    return w
