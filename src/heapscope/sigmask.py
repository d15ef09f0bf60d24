"""Signals held back while `heapscope record` starts, until its handlers exist.

Python takes ~40 ms to import `record` before its handlers are installed; a
SIGUSR1 (a dump request) or a signal meant for the target arriving then would
end heapscope at its default action, before the target even starts. The
entry point (heapscope.cli.start.run) blocks them first thing; the
launch lets them through once its handlers are in place, and they are delivered then (a
blocked signal stays pending). The target is spawned with the mask heapscope
was given, never with these blocked.

Python's own start is the rest of that time: the `heapscope` command
(cli/launcher.c) blocks HELD and SIGINT before it execs the interpreter and
names in HEAPSCOPE_LAUNCHER_HELD the ones it blocked; hold() counts those as
never blocked, and lets SIGINT through at once (a Ctrl-C then is status 130).

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
launched = False  # started by cli/launcher.c (known once hold() has run)


LAUNCHER_HELD = "HEAPSCOPE_LAUNCHER_HELD"  # cli/launcher.c: "10,15,..." (the signals it blocked)


def hold() -> None:
    """Block HELD (the first thing a command that installs handlers for them does)."""
    global _before, launched
    if _before is None:
        before = set(_signal.pthread_sigmask(_signal.SIG_BLOCK, HELD))
        by_launcher = _launcher_held()
        launched = by_launcher is not None
        if by_launcher:
            before -= by_launcher
            _signal.pthread_sigmask(_signal.SIG_SETMASK, before | set(HELD))
        _before = before


def _launcher_held() -> set[int] | None:
    """The signals cli/launcher.c blocked; None when it did not start us. Its variable leaves the
    environment here, so the target never sees it."""
    import os  # loaded by the interpreter's start already

    text = os.environ.pop(LAUNCHER_HELD, None)
    if text is None:
        return None
    try:
        return {int(s) for s in text.split(",") if s} & {*HELD, _signal.SIGINT}
    except ValueError:
        return set()


def release() -> None:
    """The mask as it was before hold(): what arrived meanwhile is delivered now, to the handlers."""
    global _before
    if _before is not None:
        before, _before = _before, None
        _signal.pthread_sigmask(_signal.SIG_SETMASK, before)


def swap(sig: int, handler: object) -> object:
    """signal.signal(sig, handler) with `sig` blocked in this thread meanwhile. Python runs a
    handler after the C one noted the signal; one noted between signal()'s check and the swap to
    SIG_IGN or SIG_DFL finds no Python handler and is printed as an "ignored due to race
    condition" traceback (a flood of SIGUSR1 at record's end did it). Blocked, it stays pending:
    dropped by SIG_IGN, or delivered to the new handler when unblocked."""
    before = _signal.pthread_sigmask(_signal.SIG_BLOCK, {sig})
    try:
        # signal.SIG_IGN is an enum there; _signal takes only the plain int (typing: an int or a callable)
        return _signal.signal(sig, int(handler) if isinstance(handler, int) else handler)  # type: ignore[arg-type]
    finally:
        if sig not in before:
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {sig})


def spawn_mask() -> set[int] | None:
    """The mask a child must start with while HELD are held (None: this process's own)."""
    return None if _before is None else set(_before)
