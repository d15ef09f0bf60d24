"""One profiled process: its ring, its ingest, its heap state and stats."""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
from dataclasses import dataclass, field

from heapscope.bookkeeping.dump import ProcessHeap
from heapscope.model import HEAP_NAME, ProcessFlags, ProcessInfo
from heapscope.producer._ingest import Ingest, Tracker
from heapscope.wire import codec


@dataclass(slots=True)
class ProcessStats:
    """Counted by the producer in Python (the C ingest counts the rest)."""

    malformed_records: int = 0  # rare records that failed to decode
    modules: int = 0
    stacks: int = 0
    python_codes: int = 0  # HS_REC_PYCODE records


@dataclass(slots=True)
class CustomHeap:
    """One custom heap of a process (wire.h, "Custom heaps"): its own tracker
    and sequence; its stacks resolve through the process's malloc heap."""

    heap_id: int
    name: str
    interval: int
    tracker: Tracker
    samples: int = 0
    frees: int = 0


@dataclass(slots=True)
class ProcessState:
    info: ProcessInfo
    sock: socket.socket
    memfd: int
    shm: mmap.mmap
    ingest: Ingest
    flags: ProcessFlags = field(default_factory=ProcessFlags)
    heap: ProcessHeap = field(default_factory=ProcessHeap)
    stats: ProcessStats = field(default_factory=ProcessStats)
    heap_name: str = HEAP_NAME
    python_state: int = 0  # codec.PY_STATE_*; from the client's HS_REC_PYINFO
    python_status: str = ""  # its one line for the summary and stats
    python_pymem: bool = False  # Python's MEM and OBJ allocator domains were sampled too
    peak_rss: int = 0  # bytes: the largest VmHWM read while the process ran (a lower bound of its peak)
    rss_read_ns: int = 0  # when VmHWM was last read
    last_dump_ts: int = 0
    stream: list[bytes] = field(default_factory=list)
    # A pidfd, when the program closed heapscope's socket but runs on: its ring is
    # still read, and its exit is seen here instead of as the socket's EOF.
    exit_fd: int | None = None
    custom_heaps: dict[int, CustomHeap] = field(default_factory=dict)  # by heap id
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


def create_ring(ring_size: int) -> tuple[int, mmap.mmap]:
    """A fresh shared-memory ring: memfd + mapping with the meta header written."""
    fd = os.memfd_create("heapscope-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, codec.META_SIZE + ring_size)
        # The client is untrusted: a ring it could shrink would fault the producer.
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        shm = mmap.mmap(fd, codec.META_SIZE + ring_size, mmap.MAP_SHARED)
    except OSError:
        os.close(fd)
        raise
    codec.write_meta(shm, "magic", codec.WIRE_MAGIC)
    codec.write_meta(shm, "version", codec.WIRE_VERSION)
    codec.write_meta(shm, "ring_size", ring_size)
    return fd, shm
