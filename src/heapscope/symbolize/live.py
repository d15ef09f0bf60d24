"""Symbolization that starts while the target still runs.

`record` hands every module the client announces to `module()`: the file with
its debug info is located at once and llvm-symbolizer starts reading it on
the producer's idle core. When recording ends, `finish()` symbolizes the
profile on that warm process, so the user waits only for the lookups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heapscope.symbolize.llvm import SymbolizerError, WarmSymbolizer, find_llvm_symbolizer
from heapscope.symbolize.locate import Locator
from heapscope.symbolize.profile import SymbolizeReport, symbolize_profile

if TYPE_CHECKING:
    from heapscope.store.writer import ProfileWriter


class LiveSymbolizer:
    def __init__(self) -> None:
        self.locator = Locator(())
        self.warm: WarmSymbolizer | None = None
        tool = find_llvm_symbolizer()
        if tool is not None:
            try:
                self.warm = WarmSymbolizer(tool)
            except OSError:
                self.warm = None
        self._seen: set[tuple[str, str]] = set()

    def module(self, path: str, build_id: str) -> None:
        """A module of a profiled process: start reading its debug info."""
        if self.warm is None or (path, build_id) in self._seen:
            return
        self._seen.add((path, build_id))
        located = self.locator.locate(path, build_id)
        if located.status == "found":
            try:
                self.warm.warm(located.debug_file)
            except SymbolizerError:
                self.close()

    def finish(self, writer: ProfileWriter) -> SymbolizeReport:
        try:
            return symbolize_profile(writer, warm=self.warm) if self.warm else symbolize_profile(writer)
        finally:
            self.close()

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()
            self.warm = None
