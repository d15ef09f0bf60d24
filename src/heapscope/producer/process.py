"""One profiled process: its ring, its ingest, its heap state and stats."""

from __future__ import annotations

import _socket  # socket.py's enums and wrappers (~3 ms of imports) add nothing the producer uses
import mmap
import os

from heapscope.bookkeeping._native import Tracker
from heapscope.bookkeeping.dump import ProcessHeap
from heapscope.model import HEAP_NAME, ProcessFlags, ProcessInfo
from heapscope.producer import procfs
from heapscope.producer._ingest import Ingest
from heapscope.producer.labels import ProcessLabels
from heapscope.records import Record, field
from heapscope.wire import codec


class ProcessStats(Record):
    """Counted by the producer in Python (the C ingest counts the rest)."""

    malformed_records: int = 0  # rare records that failed to decode
    modules: int = 0
    modules_replaced: int = 0  # modules loaded where other objects were (a dlclose, then a dlopen there)
    stacks: int = 0
    python_codes: int = 0  # HS_REC_PYCODE records


class CustomHeap(Record):
    """One custom heap of a process (wire.h, "Custom heaps"): its own tracker
    and sequence; its stacks resolve through the process's malloc heap."""

    heap_id: int
    name: str
    interval: int
    tracker: Tracker
    samples: int = 0
    frees: int = 0


class ProcessState(Record):
    info: ProcessInfo
    sock: _socket.socket  # non-blocking
    memfd: int
    shm: mmap.mmap
    ingest: Ingest
    heap: ProcessHeap
    flags: ProcessFlags = field(default_factory=ProcessFlags)
    stats: ProcessStats = field(default_factory=ProcessStats)
    heap_name: str = HEAP_NAME
    python_state: int = 0  # codec.PY_STATE_*; from the client's HS_REC_PYINFO
    python_status: str = ""  # its one line for the summary and stats
    python_pymem: bool = False  # Python's MEM and OBJ allocator domains were sampled too
    # bytes: the largest VmHWM read while the process ran, and at its end the client's last reading
    # (wire.h, exit_peak_rss) or its parent's wait4 (heapscope/launch.py, Child.peak_rss)
    peak_rss: int = 0
    own_rss: int = 0  # bytes of heapscope's own mappings resident at the end (wire.h, own_rss); 0: not known
    rss_read_ns: int = 0  # when VmHWM was last read
    last_dump_ts: int = 0
    stream: list[bytes] = field(default_factory=list)
    # A pidfd, when the program closed heapscope's socket but runs on: its ring is
    # still read, and its exit is seen here instead of as the socket's EOF.
    exit_fd: int | None = None
    custom_heaps: dict[int, CustomHeap] = field(default_factory=dict)  # by heap id
    labels: ProcessLabels = field(default_factory=ProcessLabels)  # allocation label sets (producer/labels.py)
    # Kept when the process ends, after its ring is unmapped.
    final_stats: dict[str, int] = field(default_factory=dict)
    final_meta: dict[str, int] = field(default_factory=dict)

    def meta(self, name: str) -> int:
        return codec.read_meta(self.shm, name)

    def request_shutdown(self) -> None:
        codec.write_meta(self.shm, "shutting_down", 1)

    def close(self) -> None:
        for h in self.custom_heaps.values():
            h.tracker.close()
        self.ingest.close()
        self.shm.close()
        os.close(self.memfd)
        self.sock.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)
            self.exit_fd = None


def absolute_module(pid: int, r: codec.ModuleRecord) -> codec.ModuleRecord:
    """A module the loader names by a relative path (`LD_LIBRARY_PATH=.`, dlopen("./plugin.so")),
    named by its absolute one while the process still maps it: the relative name means nothing
    to the symbolizer, which runs in another directory, maybe after the process has gone."""
    path = procfs.mapped_path(pid, r.start, r.path)
    if path is None:
        return r  # the symbolizer tries it from its own directory, else lists it as unsymbolized
    return codec.ModuleRecord(r.base, r.start, r.end, r.file_offset, r.vaddr, r.build_id, path)


def samples_so_far(p: ProcessState) -> int:
    """The one count of a process's samples: every heap, malloc's, Python's (python.pymalloc)
    and the custom ones. While it runs, Python's are counted in C (Ingest.routed); at its end
    they are added to its heap's own count (_end), so they are never counted twice."""
    custom = sum(h.samples for h in p.custom_heaps.values())
    if p.final_stats:
        return int(p.final_stats.get("mallocs", 0)) + custom
    return int(p.ingest.stats()["mallocs"]) + custom + p.ingest.routed(codec.PY_HEAP_ID)[0]


#: The heaps the client books itself beside malloc's, disjoint from it and from each other
#: (client/pymem.c, client/maps.c): with malloc's, their sum is the program's memory.
JOINT_HEAPS = frozenset({codec.PY_HEAP_ID, *codec.MAP_HEAPS})


def window_trackers(p: ProcessState) -> list[Tracker]:
    """The trackers a window covers, those that share malloc's peak: malloc's and, when the
    process has them, Python's heap and the mmap and brk heaps."""
    return [p.ingest.tracker, *(h.tracker for h in p.custom_heaps.values() if h.heap_id in JOINT_HEAPS)]
