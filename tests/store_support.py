"""Small profiles written by hand for the store's tests, and the store's reads in C traced."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

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


def read_in_c(monkeypatch: pytest.MonkeyPatch, seen: Callable[[str], None]) -> None:
    """Gives `seen` each statement the store runs in C on a connection of its own
    (store/grouped.py), as the reader connection's trace callback gets its own: a test that
    counts the reads of a table counts both."""
    from heapscope.store import grouped as module

    for name in ("grouped", "summed"):
        run = getattr(module, name)

        def traced(*args: Any, run: Callable[..., Any] = run) -> Any:
            got = run(*args)
            if got is not None:  # None: the reader reads the rows itself, and its callback sees it
                seen(args[2])
            return got

        monkeypatch.setattr(module, name, traced)
