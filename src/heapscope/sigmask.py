"""Signals held back while `heapscope record` starts, until its handlers exist.

Python takes ~40 ms to import `record` before its handlers are installed; a
SIGUSR1 (a dump request) or a signal meant for the target arriving then would
end heapscope at its default action, before the target even starts. The
console entry point (heapscope.cli.start.run) blocks them first thing; the
launch lets them through once its handlers are in place, and they are delivered then (a
blocked signal stays pending). The target is spawned with the mask heapscope
was given, never with these blocked.

May import: nothing of heapscope.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # the C module under `signal`, without its enums

HELD = (_signal.SIGUSR1, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR2, _signal.SIGALRM)

_before: set[int] | None = None  # the mask before hold(), while held


def hold() -> None:
    """Block HELD (the first thing a command that installs handlers for them does)."""
    global _before
    if _before is None:
        _before = set(_signal.pthread_sigmask(_signal.SIG_BLOCK, HELD))


def release() -> None:
    """The mask as it was before hold(): what arrived meanwhile is delivered now, to the handlers."""
    global _before
    if _before is not None:
        before, _before = _before, None
        _signal.pthread_sigmask(_signal.SIG_SETMASK, before)


def spawn_mask() -> set[int] | None:
    """The mask a child must start with while HELD are held (None: this process's own)."""
    return None if _before is None else set(_before)
