"""Function names for the frames the live view shows, found off every other thread.

The profile is symbolized when the recording ends (symbolize/), as with
`record`; the view wants names now, for the few frames on screen. `want()`
queues frames and returns at once; a daemon thread asks one llvm-symbolizer
(started at the lowest priority, symbolize/llvm.py) for them. `name()` gives
the function's name when known, else `library+0xoffset` as the reports
spell an unsymbolized frame.

Code in no loaded object (`[unknown pid N]`: what a JIT generated) is named
from the perf map the process writes (symbolize/perfmap.py), as `record`
names it at its end; the map is read again, at most once a second per
process, while frames of it stay unnamed (it grows as code is generated).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from heapscope.hosts.live.snapshot import FrameKey
from heapscope.model import unknown_code_pid
from heapscope.store.reader import fallback_frame_name

if TYPE_CHECKING:
    from heapscope.symbolize.perfmap import PerfMap

BATCH = 256
PERF_MAP_EVERY_S = 1.0  # a process's perf map is read again at most this often


class Namer:
    def __init__(self) -> None:
        self._names: dict[tuple[str, int], str] = {}
        self._wanted: dict[tuple[str, int], None] = {}  # insertion-ordered set
        self._cond = threading.Condition()
        self._closed = False
        self._warm: object | None = None
        self._perf_maps: dict[int, tuple[float, PerfMap]] = {}  # pid -> (read at, its map); this thread's
        self._thread = threading.Thread(target=self._run, name="heapscope-live-names", daemon=True)
        self._thread.start()

    def name(self, frame: FrameKey) -> str:
        path, offset, fixed = frame
        if fixed:
            return fixed
        found = self._names.get((path, offset))  # a dict read: safe against the writer thread
        return found or fallback_frame_name(path, offset)

    @property
    def known(self) -> int:
        """How many frames have a name by now (the view redraws when it grows)."""
        return len(self._names)

    def want(self, frames: Iterable[FrameKey]) -> None:
        with self._cond:
            for path, offset, fixed in frames:
                key = (path, offset)
                named_by_file = path.startswith("/") or unknown_code_pid(path) is not None
                if not fixed and named_by_file and key not in self._names:
                    self._wanted[key] = None
            if self._wanted:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _jit_name(self, pid: int, addr: int) -> str | None:
        """The function at `addr` in process `pid`'s perf map (read again when due); None if not there."""
        from heapscope.symbolize.perfmap import read_perf_map

        now = time.monotonic()
        have = self._perf_maps.get(pid)
        if have is None or (have[1].lookup(addr) is None and now - have[0] >= PERF_MAP_EVERY_S):
            try:
                uid = os.stat(f"/proc/{pid}").st_uid
            except OSError:  # gone: the map read last (if any) stays
                uid = -1
            if uid >= 0:
                have = (now, read_perf_map(pid, uid))
                self._perf_maps[pid] = have
        return have[1].lookup(addr) if have is not None else None

    def _run(self) -> None:
        from heapscope.symbolize.llvm import SymbolizerError, WarmSymbolizer, find_llvm_symbolizer

        tool = find_llvm_symbolizer()
        warm: WarmSymbolizer | None = None
        if tool is not None:  # without it, file frames stay library+offset until the end's symbolization
            with contextlib.suppress(OSError):
                warm = WarmSymbolizer(tool)
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or bool(self._wanted))
                    if self._closed:
                        return
                    batch = list(itertools.islice(self._wanted, BATCH))
                    for key in batch:
                        del self._wanted[key]
                by_path: dict[str, list[int]] = {}
                for path, offset in batch:
                    pid = unknown_code_pid(path)
                    if pid is None:
                        by_path.setdefault(path, []).append(offset)
                        continue
                    name = self._jit_name(pid, offset)
                    if name is not None:  # else asked again at the next redraw
                        self._names[(path, offset)] = name
                if warm is None or not by_path:
                    continue
                requests = list(by_path.items())
                try:
                    chains = warm.symbolize_files(requests, timeout=30)
                except SymbolizerError:
                    warm.close()
                    warm = None
                    continue
                for (path, offsets), per_address in zip(requests, chains, strict=True):
                    for offset, chain in zip(offsets, per_address, strict=True):
                        # The outermost function of the inline chain is the frame's function.
                        fn = chain[-1].function if chain else ""
                        self._names[(path, offset)] = fn or fallback_frame_name(path, offset)
        finally:
            if warm is not None:
                with contextlib.suppress(Exception):
                    warm.close()

