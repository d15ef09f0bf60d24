"""`heapscope record -- CMD ...` / `-p PID`: profile a program (or attach to one) and write its profile.

Only flags live here, and the start: the recording itself (start or attach,
signals, dumps, guardrails, teardown and the summary's figures) is
heapscope.session.Recording, its status line and summary are printed by
cli/summary.py (both imported after the target's spawn). Every option value
is checked before the target starts (one line, exit 2).

The target waits for heapscope's answer to its handshake before its main
(heapscope/launch.py): a started command is spawned and answered with this
module's light imports only, and the recording's modules are imported while
it runs (`_launch`; docs/README.md, "The start path").
"""

from __future__ import annotations

import os
import sys

from heapscope.errors import TargetError, UsageError
from heapscope.producer.config import (
    DEFAULT_INTERVAL,
    DEFAULT_SHMEM_SIZE,
    MAX_DURATION_S,
    RecordConfig,
    check_ms,
    check_positive,
)
from heapscope.units import parse_duration, parse_size
from heapscope.which import which
from heapscope.wire.handshake import UNWINDER_AUTO, UNWINDER_FP, UNWINDER_LIBUNWIND, UNWINDER_NONE

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from heapscope.launch import Launch
    from heapscope.session import RecordingOptions

NAME = "record"
HELP = "run a command under the profiler and write its heap profile"

UNWINDERS = {"auto": UNWINDER_AUTO, "libunwind": UNWINDER_LIBUNWIND, "fp": UNWINDER_FP, "none": UNWINDER_NONE}
# Imported between the target's spawn and the recording's start, leaves first, the clients that
# connect meanwhile answered between two of them (Launch.serve): each step a few ms at most.
START_MODULES = ("enum", "collections", "contextlib", "signal", "threading", "sqlite3",
                 "heapscope.wire.codec", "heapscope.store.writer", "heapscope.bookkeeping.dump",
                 "heapscope.producer.process", "heapscope.producer.producer", "heapscope.session")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE",
                   help="profile database to write (default: heapscope.<command>.<pid>.db)")
    p.add_argument("--force", action="store_true", help="replace an existing heapscope profile at --output")
    p.add_argument("-i", "--interval", default=str(DEFAULT_INTERVAL), metavar="BYTES",
                   help=f"mean bytes between samples (default {DEFAULT_INTERVAL}; 1 records every allocation)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="sampler seed, for reproducible runs (default: random)")
    p.add_argument("--unwinder", choices=sorted(UNWINDERS), default="auto",
                   help="how the target takes stacks (default auto: heapscope's DWARF CFA walk, frame pointers"
                        " where code has no unwind table; libunwind: the CFA walk with libunwind behind it)")
    p.add_argument("--max-frames", type=int, default=128, metavar="N", help="deepest stack kept (default 128)")
    p.add_argument("--shmem-size", default=str(DEFAULT_SHMEM_SIZE), metavar="BYTES",
                   help="ring buffer per process, a power of two (default 8M)")
    block = p.add_mutually_exclusive_group()
    block.add_argument("--block-client", dest="block_client", action="store_true", default=True,
                       help="when the ring is full the target waits (default)")
    block.add_argument("--no-block-client", dest="block_client", action="store_false",
                       help="when the ring is full drop records and count them")
    p.add_argument("--mmap-files", action="store_true",
                   help="the mmap heap counts file-backed and shared mappings too (default: anonymous private"
                        " mappings only, the memory a program maps for itself)")
    p.add_argument("--skip-symbol-prefix", action="append", default=[], metavar="PREFIX",
                   help="show frames of mappings whose path starts with PREFIX as one FILTERED frame")
    p.add_argument("--stream-allocations", action="store_true",
                   help="also store every sampled malloc and free (table heapscope_allocation_stream)")
    p.add_argument("-c", "--continuous-dump", type=int, default=0, metavar="MS",
                   help="dump every MS milliseconds (first after --dump-phase); 0 = only at the end")
    p.add_argument("--dump-phase", type=int, default=0, metavar="MS",
                   help="delay before the first continuous dump (default 0)")
    p.add_argument("--dump-at-max", action="store_true",
                   help="dumps show the state at the peak of unreleased bytes, not the current one")
    p.add_argument("-n", "--name", action="append", default=[], metavar="NAME",
                   help="profile only the processes of the tree named NAME (executable basename, "
                        "argv0 as heapprofd normalizes it, a glob with *, or the whole command line); "
                        "repeatable; the others run with the client dormant")
    p.add_argument("-p", "--pid", action="append", default=[], metavar="PID",
                   help="attach to a running process (through gdb) instead of starting one; repeatable")
    p.add_argument("-d", "--duration", metavar="TIME",
                   help="end the session after TIME, with its unit (500ms, 30s, 2m, 1h); "
                        "the targets run on unprofiled")
    p.add_argument("--max-producer-memory", type=float, metavar="MB",
                   help="stop profiling (final dumps, hit_guardrail) when heapscope's own "
                        "RssAnon+VmSwap exceeds MB")
    p.add_argument("--max-producer-cpu", type=float, metavar="SECONDS",
                   help="stop profiling when heapscope's own CPU time exceeds SECONDS")
    p.add_argument("--no-symbolize", action="store_true", help="leave function names empty")
    add_fleet_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no status line and no summary")
    p.add_argument("command", nargs="...", metavar="-- CMD ARGS",  # "...": argparse.REMAINDER
                   help="the program to profile and its arguments")


def add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    """--serve, --serve-remote, --push, --label (heapscope.hosts.fleet wires them into a recording)."""
    p.add_argument("--serve", metavar="ADDR",
                   help="answer Go's /debug/pprof/heap and /allocs on ADDR (e.g. 127.0.0.1:6060) while recording,"
                        " for go tool pprof or a Parca scrape")
    p.add_argument("--serve-remote", action="store_true",
                   help="allow --serve on an address that is not loopback (anyone who reaches it reads the profile)")
    p.add_argument("--serve-open", action="store_true",
                   help="serve without a token (by default --serve makes one, or takes $HEAPSCOPE_SERVE_TOKEN, and"
                        " answers only under http://ADDR/TOKEN/debug/pprof/: loopback is every local user)")
    p.add_argument("--push", action="append", default=[], metavar="URL",
                   help="send each dump to pyroscope+http://HOST:PORT, parca+grpc://HOST:PORT or otlp+http://HOST:PORT"
                        " (repeatable);"
                        " a server that is down costs the recording nothing but counted losses")
    p.add_argument("--label", action="append", default=[], metavar="K=V",
                   help="a label of every pushed profile (repeatable), e.g. service=api")


def main(args: argparse.Namespace) -> int:
    try:
        return _record(args)
    finally:
        from heapscope import jobs

        jobs.restore()  # the terminal's foreground, given to the target, back to our group


def _record(args: argparse.Namespace) -> int:
    config = record_config(args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    pids = parse_pids(args.pid)
    if pids and command:
        raise UsageError("give either -p PID or a command to run, not both")
    if not pids and not command:
        raise UsageError("no command to profile: heapscope record [options] -- CMD [ARGS...] (or -p PID)")
    _check_options(args)
    from heapscope.launch import client_library_path, in_main_thread

    library = client_library_path()
    if pids:
        executable = ""
        name = f"pid{pids[0]}"
    else:
        executable = resolve_command(command[0])
        name = os.path.basename(command[0])
    output = args.output or f"heapscope.{name}.{os.getpid()}.db"
    verbose = bool(args.verbose)
    say = say_line if verbose or not args.quiet else quiet
    log = say_line if verbose else quiet
    launch: Launch | None = None
    if command and not (args.serve or args.push) and in_main_thread():
        try:
            launch = _launch(config, output, args.force, command, executable, library, log)
        except _Started as started:  # the target runs, the recording could not start: it is supervised
            _remove_created(output)
            say_line(f"error: {started.error}; the target runs on unprofiled")
            return started.wait()
    from heapscope.cli.summary import StatusLine, print_summary
    from heapscope.session import Recording

    options = recording_options(args, command, pids, job_control=True)
    try:
        rec = Recording(config, output, options, library=library, say=say, warn=say_line, log=log,
                        launch=launch)
        rec.exits_after_close = True
    except Exception as failed:
        if launch is None or launch.child is None:
            raise
        launch.abandon()
        if launch.created:
            _remove_created(output)
        say_line(f"error: {failed or type(failed).__name__}; the target runs on unprofiled")
        return _Started(launch, str(failed)).wait()
    status_line = StatusLine(enabled=not args.quiet and sys.stderr.isatty())
    jobs_now = launch.jobs if launch is not None else None
    if jobs_now is not None:
        rec.every(0.1, lambda _producer: jobs_now.heal())  # heapscope/jobs.py: a target left stopped
    with rec:
        if args.serve or args.push:
            from heapscope.hosts import fleet

            fleet.wire(rec, args)
        if command:
            rec.start(command, executable=executable)
        else:
            rec.attach(pids)
        rec.status = status_line.updater(rec)
        try:
            returncode = rec.run_until_exit()
        finally:
            status_line.clear()
    for e in rec.errors:
        say_line(f"error: {e}")
    if not args.quiet:
        print_summary(rec.summary)
    elif rec.summary.problems:
        pass  # already said, one line each, as they happened
    for line in rec.host_lines:
        if not args.quiet or "failed" in line or "dropped" in line:  # a loss is said even with -q
            say_line(line)
    return returncode


class _Started(Exception):
    """The target was spawned, and what should have followed failed."""

    def __init__(self, launch: Launch, error: str) -> None:
        super().__init__(error)
        self.launch = launch
        self.error = error

    def wait(self) -> int:
        """The target's exit status, shell style, once it has ended; our signal handlers go then."""
        child = self.launch.child
        assert child is not None
        status = child.exit_status()
        self.launch.restore_signals()
        return status


def _launch(config: RecordConfig, output: str, force: bool, command: list[str], executable: str, library: str,
            log: Callable[[str], None]) -> Launch | None:
    """Spawn the target and answer its first handshakes with light imports only, then import the
    recording while it runs (heapscope/launch.py). None when the output is already there (its
    checks read it with sqlite3: the recording does them, before the target starts)."""
    from heapscope.launch import FIRST_ANSWER_S, Launch, create_output

    if not create_output(output, force):
        return None
    try:
        launch = Launch(config, log)
    except BaseException:
        _remove_created(output)
        raise
    launch.created = True  # the recording's ProfileWriter takes the files as they are
    try:
        launch.forward_signals(job_control=True)
        launch.spawn(command, executable, library)
    except BaseException:
        launch.abandon()
        launch.restore_signals()
        _remove_created(output)
        raise
    try:
        launch.answer(FIRST_ANSWER_S)
        for module in START_MODULES:
            __import__(module)  # importlib.import_module, without importing importlib
            launch.serve()
    except Exception as e:
        launch.abandon()
        raise _Started(launch, str(e) or type(e).__name__) from e
    return launch


def _remove_created(output: str) -> None:
    """The empty profile files create_output made, when the target never started."""
    from heapscope.store.names import WRITTEN_SIDECARS

    for name in (output, *(output + s for s in WRITTEN_SIDECARS)):
        try:  # noqa: SIM105 (contextlib is ~3 ms of imports on the target's path)
            os.unlink(name)
        except OSError:
            pass


def _check_options(args: argparse.Namespace) -> None:
    """What RecordingOptions and Guardrails check, before any target starts (they are built after)."""
    if args.duration is not None:
        parse_duration(args.duration, "--duration", MAX_DURATION_S)
    check_ms(args.continuous_dump, "--continuous-dump")
    check_ms(args.dump_phase, "--dump-phase")
    from heapscope.producer.session import MAX_CPU_S, MAX_MEMORY_MB

    check_positive(args.max_producer_memory, "--max-producer-memory", MAX_MEMORY_MB)
    check_positive(args.max_producer_cpu, "--max-producer-cpu", MAX_CPU_S)
    if args.output is not None and not args.output.strip():
        raise UsageError("-o/--output must not be empty")


def quiet(_msg: str) -> None:
    pass


def recording_options(args: argparse.Namespace, command: list[str], pids: list[int],
                      job_control: bool = False) -> RecordingOptions:
    """The session options `record` and `live` share, checked; -o checked too. `job_control`:
    record's (heapscope/jobs.py); live's view keeps the terminal."""
    from heapscope.session import RecordingOptions

    options = RecordingOptions(
        duration=parse_duration(args.duration, "--duration", MAX_DURATION_S) if args.duration is not None else None,
        continuous_ms=args.continuous_dump, phase_ms=args.dump_phase,
        max_memory_mb=args.max_producer_memory, max_cpu_s=args.max_producer_cpu,
        symbolize=not args.no_symbolize, force=args.force,
        command=" ".join(command) if command else "-p " + ",".join(map(str, pids)),
        job_control=job_control, peaks=not args.quiet,
    )
    if args.output is not None and not args.output.strip():
        raise UsageError("-o/--output must not be empty")
    return options


def parse_pids(values: list[str]) -> list[int]:
    pids: list[int] = []
    for v in values:
        for part in v.split(","):
            try:
                pid = int(part, 10)
            except ValueError:
                raise UsageError(f"-p/--pid takes process ids, not {part!r}") from None
            if pid <= 0:
                raise UsageError(f"-p/--pid takes process ids, not {part!r}")
            if pid not in pids:
                pids.append(pid)
    return pids


def record_config(args: argparse.Namespace, threads: bool = False) -> RecordConfig:
    return RecordConfig(
        interval=parse_size(args.interval, "--interval"),
        seed=args.seed,
        unwinder=UNWINDERS[args.unwinder],
        shmem_size=parse_size(args.shmem_size, "--shmem-size"),
        block_client=args.block_client,
        mmap_files=args.mmap_files,
        skip_symbol_prefixes=tuple(args.skip_symbol_prefix),
        stream_allocations=args.stream_allocations,
        max_frames=args.max_frames,
        dump_at_max=args.dump_at_max,
        names=tuple(args.name),
        threads=threads,
    )


def resolve_command(program: str) -> str:
    if "/" in program:
        if not os.path.isfile(program):
            raise TargetError(f"cannot run {program}: no such file")
        if not os.access(program, os.X_OK):
            raise TargetError(f"cannot run {program}: permission denied")
        return program
    found = which(program)
    if found is None:
        raise TargetError(f"command not found: {program}")
    return found


def say_line(msg: str) -> None:
    print(f"heapscope: {msg}", file=sys.stderr)
