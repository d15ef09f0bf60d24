"""`heapscope live -- CMD ...` / `-p PID`: record, and watch the heap in the terminal meanwhile.

The options are `record`'s, and so is the profile: the recording
(heapscope.session.Recording) runs its loop in a thread of its own, takes
a snapshot of every process's per-callsite totals once a second on that
thread (heapscope.hosts.live.snapshot), and the view (heapscope.hosts.live.app, Textual)
shows the latest one. `q` ends profiling (final dumps); a started target runs
on, its output goes to the terminal, and heapscope waits for it and exits
with its status, as `record` does. When the target exits first, the view
closes by itself. The profile is written and the summary printed either way.

Without a terminal (stdin or stderr not a tty) it refuses at once: one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from heapscope.cli import record as record_cli
from heapscope.errors import UsageError
from heapscope.session import Recording, client_library

NAME = "live"
HELP = "record a command (or attach) and watch its heap in the terminal while it runs"
SNAPSHOT_EVERY_S = 1.0


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

        loop = threading.Thread(target=run, name="heapscope-recording", daemon=True)
        loop.start()
        control = Control(rec.fresh_dump, output, finished, messages,
                          lambda pid, n: _flamegraph(rec, output, pid, n))
        app = LiveApp(snapshots, control, relay, title[:200])
        try:
            app.run()
        finally:
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
    for e in rec.errors:
        record_cli.say_line(f"error: {e}")
    if not args.quiet:
        record_cli.print_summary(rec.summary)
    for line in rec.host_lines:
        record_cli.say_line(line)
    return result[0] if result else 1


def _flush(messages: deque[str]) -> None:
    while messages:
        record_cli.say_line(messages.popleft())


def _flamegraph(rec: Recording, output: Path, pid: int | None, n: int) -> Path:
    """A fresh dump, then the flamegraph page of the profile so far beside it (`NAME.live-N.html`)."""
    from heapscope.cli.flamegraph import write_page
    from heapscope.store.reader import open_profile
    from heapscope.view.flamegraph import heap_graphs, payload, render_html

    rec.fresh_dump()
    stem = output.name[:-3] if output.name.endswith(".db") else output.name
    page = output.with_name(f"{stem}.live-{n}.html")
    with open_profile(output) as profile:
        heaps, at = heap_graphs(profile, None, pid)  # custom heaps: a picker, the default heap first
        subtitle = profile.metadata().get("command", "")
    write_page(page, render_html(payload(heaps[at].graphs, title=f"{output.name} (live, {n})", subtitle=subtitle,
                                         heaps=heaps, heap=at)), False)
    return page
