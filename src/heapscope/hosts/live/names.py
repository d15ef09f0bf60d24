"""Function names for the frames the live view shows, found off every other thread.

The profile is symbolized when the recording ends (symbolize/), as with
`record`; the view wants names now, for the few frames on screen. `want()`
queues frames and returns at once; a daemon thread asks one llvm-symbolizer
(started at the lowest priority, symbolize/llvm.py) for them. `name()` gives
the function's name when known, else `library+0xoffset` as the reports
spell an unsymbolized frame.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterable

from heapscope.hosts.live.snapshot import FrameKey
from heapscope.store.reader import fallback_frame_name

BATCH = 256


class Namer:
    def __init__(self) -> None:
        self._names: dict[tuple[str, int], str] = {}
        self._wanted: dict[tuple[str, int], None] = {}  # insertion-ordered set
        self._cond = threading.Condition()
        self._closed = False
        self._warm: object | None = None
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
                if not fixed and path.startswith("/") and key not in self._names:
                    self._wanted[key] = None
            if self._wanted:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from heapscope.symbolize.llvm import SymbolizerError, WarmSymbolizer, find_llvm_symbolizer

        tool = find_llvm_symbolizer()
        if tool is None:
            return  # names stay library+offset; the profile is still symbolized at the end
        try:
            warm = WarmSymbolizer(tool)
        except OSError:
            return
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
                    by_path.setdefault(path, []).append(offset)
                requests = list(by_path.items())
                try:
                    chains = warm.symbolize_files(requests, timeout=30)
                except SymbolizerError:
                    return
                for (path, offsets), per_address in zip(requests, chains, strict=True):
                    for offset, chain in zip(offsets, per_address, strict=True):
                        # The outermost function of the inline chain is the frame's function.
                        fn = chain[-1].function if chain else ""
                        self._names[(path, offset)] = fn or fallback_frame_name(path, offset)
        finally:
            with contextlib.suppress(Exception):
                warm.close()

