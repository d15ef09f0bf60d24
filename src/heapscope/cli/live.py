"""`heapscope live -- CMD ...` / `-p PID`: record, and watch the heap in the terminal meanwhile.

The options are `record`'s, and so is the profile: the recording
(heapscope.session.Recording) runs its loop in a thread of its own, takes
a snapshot of every process's per-callsite totals once a second on that
thread (heapscope.hosts.live.snapshot), and the view (heapscope.hosts.live.app, Textual)
shows the latest one. `q` ends profiling (final dumps); a started target runs
on, its output goes to the terminal, and heapscope waits for it and exits
with its status, as `record` does. When the target exits first, the view
closes by itself. The profile is written and the summary printed either way.

SIGTERM and SIGHUP go to a started target, as with `record` (attached: they
detach), and end live once the target is gone. A SIGHUP means the terminal is
gone: the view draws into /dev/null from then on, and should closing it still
hang (Textual writing to a terminal that failed under it), the profile is
written and live exits with the target's status without it (Ending).

Without a terminal (stdin or stderr not a tty) it refuses at once: one line, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from heapscope.cli import record as record_cli
from heapscope.cli.summary import print_summary
from heapscope.errors import UsageError
from heapscope.session import Recording, client_library

NAME = "live"
HELP = "record a command (or attach) and watch its heap in the terminal while it runs"
SNAPSHOT_EVERY_S = 1.0
END_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
VIEW_CLOSE_S = 5.0  # after a SIGTERM or SIGHUP and the target's end: the view's own close, at most


def add_arguments(p: argparse.ArgumentParser) -> None:
    record_cli.add_arguments(p)


# Long on purpose: the recording and the view start, run and stop together here, so each error path
# closes both in order.
def main(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stderr.isatty()):  # the view reads stdin and draws on stderr
        raise UsageError("live needs a terminal (stdin or stderr is not one); "
                         "use `heapscope record` to record without the view")
    try:
        import textual  # noqa: F401
    except ImportError:
        raise UsageError("live needs the textual package: pip install 'heapscope[live]'") from None
    from heapscope.hosts.live.app import Control, LiveApp, OutputRelay
    from heapscope.hosts.live.snapshot import Snapshotter

    config = record_cli.record_config(args, threads=True)  # the view's thread filter
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    pids = record_cli.parse_pids(args.pid)
    if pids and command:
        raise UsageError("give either -p PID or a command to run, not both")
    if not pids and not command:
        raise UsageError("no command to watch: heapscope live [options] -- CMD [ARGS...] (or -p PID)")
    options = record_cli.recording_options(args, command, pids)
    library = client_library()
    executable = record_cli.resolve_command(command[0]) if command else ""
    name = Path(command[0]).name if command else f"pid{pids[0]}"
    output = Path(args.output or f"heapscope.{name}.{os.getpid()}.db")

    messages: deque[str] = deque(maxlen=1000)  # heapscope's lines while the view is up, printed after
    rec = Recording(config, output, options, library=library, say=messages.append, warn=messages.append,
                    log=messages.append if args.verbose else record_cli.quiet)
    rec.exits_after_close = True
    snapshots = Snapshotter()
    finished = threading.Event()
    result: list[int] = []
    relay: OutputRelay | None = None
    with rec:
        if args.serve or args.push:
            from heapscope.hosts import fleet

            fleet.wire(rec, args)
        if command:
            read_fd, write_fd = os.pipe()
            try:
                rec.start(command, executable=executable, stdin=subprocess.DEVNULL, stdout=write_fd,
                          stderr=write_fd)
            except BaseException:
                os.close(read_fd)
                raise
            finally:
                os.close(write_fd)
            relay = OutputRelay(read_fd)
            title = f"heapscope live: pid {rec.child.pid if rec.child else '?'} {' '.join(command)}"
        else:
            attached = rec.attach(pids)
            title = f"heapscope live: pid {', '.join(map(str, attached))}"
        rec.every(SNAPSHOT_EVERY_S, snapshots.take)

        def run() -> None:
            try:
                result.append(rec.run_until_exit())
            finally:
                finished.set()

        def end_without_view() -> None:
            """The view is stuck on its terminal (Ending): the recording ends here, and the process."""
            try:
                rec.close()
                _flush(messages)
                _finish(args, rec)
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os._exit(result[0] if result else 1)

        ending = Ending(finished, end_without_view)
        loop = threading.Thread(target=run, name="heapscope-recording", daemon=True)
        loop.start()
        control = Control(rec.fresh_dump, output, finished, messages,
                          lambda pid, n: _flamegraph(rec, output, pid, n))
        app = LiveApp(snapshots, control, relay, title[:200])
        ending.install()
        try:
            app.run()
        finally:
            ending.view_closed()
            if relay is not None:
                relay.pass_through()
            _flush(messages)
            if not finished.is_set():
                rec.stop()
                if rec.child is not None and rec.child.poll() is None:
                    record_cli.say_line(f"view closed: profiling stopped; waiting for pid {rec.child.pid} to exit"
                                    " (its output follows)")
            while not finished.wait(0.5):
                pass
            loop.join()
    _flush(messages)
    if relay is not None:
        relay.join(timeout=2)
    _finish(args, rec)
    return result[0] if result else 1


def _finish(args: argparse.Namespace, rec: Recording) -> None:
    for e in rec.errors:
        record_cli.say_line(f"error: {e}")
    if not args.quiet:
        print_summary(rec.summary)
    for line in rec.host_lines:
        record_cli.say_line(line)


class Ending:
    """SIGTERM and SIGHUP while the view is up: passed on as before (the recording's handlers
    forward them to a started target, or detach), and live ends once the target has.

    The view closes by itself at the target's end, but Textual's close writes to the
    terminal: after a hang-up its output thread dies on EIO and the close then waits forever
    for it (live stayed up, catching every SIGTERM, until SIGKILL). So a SIGHUP puts /dev/null
    in the terminal's place, and a watcher, once the target is gone, gives the view VIEW_CLOSE_S
    to close before `end` (the profile written, the exit) is done without it."""

    def __init__(self, finished: threading.Event, end: Callable[[], None]) -> None:
        self.finished = finished
        self.end = end
        self.signals: list[int] = []
        self._previous: dict[int, object] = {}
        self._closed = threading.Event()
        self._claimed = False
        self._lock = threading.Lock()

    def install(self) -> None:
        for sig in END_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, sig: int, frame: object) -> None:
        previous = self._previous.get(sig)
        if callable(previous):
            previous(sig, frame)
        if sig == signal.SIGHUP:
            _leave_terminal()
        if not self.signals:
            threading.Thread(target=self._watch, name="heapscope-live-ending", daemon=True).start()
        self.signals.append(sig)

    def _watch(self) -> None:
        while not self.finished.wait(0.5):  # the target runs on after the signal: it is supervised
            pass
        if self._closed.wait(VIEW_CLOSE_S):
            return
        with self._lock:
            if self._closed.is_set():
                return
            self._claimed = True
        self.end()

    def view_closed(self) -> None:
        """The view has closed (on the main thread): the end is the main thread's, unless the
        watcher took it already; that one exits the process (os._exit), so this waits for it."""
        with self._lock:
            self._closed.set()
            claimed = self._claimed
        if claimed:
            threading.Event().wait()


def _leave_terminal() -> None:
    """The terminal hung up: our standard descriptors point at /dev/null from now on, so that
    nothing (the view's output thread, the summary) fails or waits writing to it."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)


def _flush(messages: deque[str]) -> None:
    while messages:
        record_cli.say_line(messages.popleft())


def _flamegraph(rec: Recording, output: Path, pid: int | None, n: int) -> Path:
    """A fresh dump, then the flamegraph page of the profile so far beside it (`NAME.live-N.html`)."""
    from heapscope.cli.flamegraph import write_page
    from heapscope.store.reader import open_profile
    from heapscope.view.flamegraph import payload, render_html
    from heapscope.view.flamegraph_heaps import heap_graphs

    rec.fresh_dump()
    stem = output.name[:-3] if output.name.endswith(".db") else output.name
    page = output.with_name(f"{stem}.live-{n}.html")
    with open_profile(output) as profile:
        heaps, at = heap_graphs(profile, None, pid)  # custom heaps: a picker, the default heap first
        subtitle = profile.metadata().get("command", "")
    write_page(page, render_html(payload(heaps[at].graphs, title=f"{output.name} (live, {n})", subtitle=subtitle,
                                         heaps=heaps, heap=at)), False)
    return page
