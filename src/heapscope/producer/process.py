"""One profiled process: its ring, its ingest, its heap state and stats."""

from __future__ import annotations

import mmap
import os
import socket

from heapscope.bookkeeping._native import Tracker
from heapscope.bookkeeping.dump import ProcessHeap
from heapscope.model import HEAP_NAME, ProcessFlags, ProcessInfo
from heapscope.producer._ingest import Ingest
from heapscope.slots import Slots
from heapscope.wire import codec


class ProcessStats(Slots):
    """Counted by the producer in Python (the C ingest counts the rest)."""

    __slots__ = ("malformed_records", "modules", "modules_replaced", "stacks", "python_codes")
    malformed_records: int  # rare records that failed to decode
    modules: int
    modules_replaced: int  # modules loaded where other objects were (a dlclose, then a dlopen there)
    stacks: int
    python_codes: int  # HS_REC_PYCODE records

    def __init__(self, malformed_records: int = 0, modules: int = 0, stacks: int = 0, python_codes: int = 0,
                 modules_replaced: int = 0) -> None:
        self.malformed_records = malformed_records
        self.modules = modules
        self.modules_replaced = modules_replaced
        self.stacks = stacks
        self.python_codes = python_codes


class CustomHeap(Slots):
    """One custom heap of a process (wire.h, "Custom heaps"): its own tracker
    and sequence; its stacks resolve through the process's malloc heap."""

    __slots__ = ("heap_id", "name", "interval", "tracker", "samples", "frees")
    heap_id: int
    name: str
    interval: int
    tracker: Tracker
    samples: int
    frees: int

    def __init__(self, heap_id: int, name: str, interval: int, tracker: Tracker, samples: int = 0,
                 frees: int = 0) -> None:
        self.heap_id = heap_id
        self.name = name
        self.interval = interval
        self.tracker = tracker
        self.samples = samples
        self.frees = frees


class ProcessState(Slots):
    __slots__ = (
        "info", "sock", "memfd", "shm", "ingest", "flags", "heap", "stats", "heap_name", "python_state",
        "python_status", "python_pymem", "peak_rss", "own_rss", "rss_read_ns", "last_dump_ts", "stream", "exit_fd",
        "custom_heaps", "final_stats", "final_meta",
    )
    info: ProcessInfo
    sock: socket.socket
    memfd: int
    shm: mmap.mmap
    ingest: Ingest
    flags: ProcessFlags
    heap: ProcessHeap
    stats: ProcessStats
    heap_name: str
    python_state: int  # codec.PY_STATE_*; from the client's HS_REC_PYINFO
    python_status: str  # its one line for the summary and stats
    python_pymem: bool  # Python's MEM and OBJ allocator domains were sampled too
    # bytes: the largest VmHWM read while the process ran, and at its end the client's last reading
    # (wire.h, exit_peak_rss) or its parent's wait4 (heapscope/launch.py, Child.peak_rss)
    peak_rss: int
    own_rss: int  # bytes of heapscope's own mappings resident at the end (wire.h, own_rss); 0: not known
    rss_read_ns: int  # when VmHWM was last read
    last_dump_ts: int
    stream: list[bytes]
    # A pidfd, when the program closed heapscope's socket but runs on: its ring is
    # still read, and its exit is seen here instead of as the socket's EOF.
    exit_fd: int | None
    custom_heaps: dict[int, CustomHeap]  # by heap id
    # Kept when the process ends, after its ring is unmapped.
    final_stats: dict[str, int]
    final_meta: dict[str, int]

    def __init__(self, info: ProcessInfo, sock: socket.socket, memfd: int, shm: mmap.mmap, ingest: Ingest,
                 flags: ProcessFlags | None = None, heap: ProcessHeap | None = None, stats: ProcessStats | None = None,
                 heap_name: str = HEAP_NAME, python_state: int = 0, python_status: str = "", python_pymem: bool = False,
                 peak_rss: int = 0, own_rss: int = 0, rss_read_ns: int = 0, last_dump_ts: int = 0,
                 stream: list[bytes] | None = None, exit_fd: int | None = None,
                 custom_heaps: dict[int, CustomHeap] | None = None, final_stats: dict[str, int] | None = None,
                 final_meta: dict[str, int] | None = None) -> None:
        self.info = info
        self.sock = sock
        self.memfd = memfd
        self.shm = shm
        self.ingest = ingest
        self.flags = ProcessFlags() if flags is None else flags
        self.heap = ProcessHeap(ingest.resolver) if heap is None else heap
        self.stats = ProcessStats() if stats is None else stats
        self.heap_name = heap_name
        self.python_state = python_state
        self.python_status = python_status
        self.python_pymem = python_pymem
        self.peak_rss = peak_rss
        self.own_rss = own_rss
        self.rss_read_ns = rss_read_ns
        self.last_dump_ts = last_dump_ts
        self.stream = [] if stream is None else stream
        self.exit_fd = exit_fd
        self.custom_heaps = {} if custom_heaps is None else custom_heaps
        self.final_stats = {} if final_stats is None else final_stats
        self.final_meta = {} if final_meta is None else final_meta

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
