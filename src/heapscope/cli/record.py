"""`heapscope record -- CMD ...` / `-p PID`: profile a program (or attach to one) and write its profile.

A session: start the target under the client (or attach to running pids),
then loop: accept and drain clients, dump when asked (-c every MS after
--dump-phase, SIGUSR1 to heapscope), check the producer's guardrails every
second; end with final dumps when the target exits, --duration passes, or
(-p) on Ctrl-C. SIGUSR1 and the other signals wake the loop through
signal.set_wakeup_fd.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from heapscope import __version__
from heapscope.errors import TargetError, UsageError
from heapscope.producer import attach
from heapscope.producer.config import DEFAULT_INTERVAL, DEFAULT_SHMEM_SIZE, RecordConfig, parse_size
from heapscope.producer.producer import Producer
from heapscope.producer.session import Guardrails, Session
from heapscope.store.writer import ProfileWriter
from heapscope.view.units import human_bytes
from heapscope.wire.codec import Unwinder

NAME = "record"
HELP = "run a command under the profiler and write its heap profile"

# Signals sent to heapscope by pid are passed on to the target. SIGINT and
# SIGQUIT from the terminal already reach the target through its process
# group, so they are passed on only when heapscope is not in the foreground.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2, signal.SIGALRM)
TERMINAL = (signal.SIGINT, signal.SIGQUIT)
UNWINDERS = {"auto": Unwinder.AUTO, "libunwind": Unwinder.LIBUNWIND, "fp": Unwinder.FP, "none": Unwinder.NONE}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE",
                   help="profile database to write (default: heapscope.<command>.<pid>.db)")
    p.add_argument("--force", action="store_true", help="replace an existing heapscope profile at --output")
    p.add_argument("-i", "--interval", default=str(DEFAULT_INTERVAL), metavar="BYTES",
                   help=f"mean bytes between samples (default {DEFAULT_INTERVAL}; 1 records every allocation)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="sampler seed, for reproducible runs (default: random)")
    p.add_argument("--unwinder", choices=sorted(UNWINDERS), default="auto",
                   help="how the target takes stacks (default auto: libunwind, else frame pointers)")
    p.add_argument("--max-frames", type=int, default=128, metavar="N", help="deepest stack kept (default 128)")
    p.add_argument("--shmem-size", default=str(DEFAULT_SHMEM_SIZE), metavar="BYTES",
                   help="ring buffer per process, a power of two (default 8M)")
    block = p.add_mutually_exclusive_group()
    block.add_argument("--block-client", dest="block_client", action="store_true", default=True,
                       help="when the ring is full the target waits (default)")
    block.add_argument("--no-block-client", dest="block_client", action="store_false",
                       help="when the ring is full drop records and count them")
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
                   help="end the session after TIME (500ms, 30s, 2m; a bare number is ms); "
                        "the targets run on unprofiled")
    p.add_argument("--max-producer-memory", type=float, metavar="MB",
                   help="stop profiling (final dumps, hit_guardrail) when heapscope's own "
                        "RssAnon+VmSwap exceeds MB")
    p.add_argument("--max-producer-cpu", type=float, metavar="SECONDS",
                   help="stop profiling when heapscope's own CPU time exceeds SECONDS")
    p.add_argument("--no-symbolize", action="store_true", help="leave function names empty")
    p.add_argument("-q", "--quiet", action="store_true", help="no status line and no summary")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the program to profile and its arguments")


def main(args: argparse.Namespace) -> int:
    config = _config(args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    pids = _pids(args.pid)
    if pids and command:
        raise UsageError("give either -p PID or a command to run, not both")
    if not pids and not command:
        raise UsageError("no command to profile: heapscope record [options] -- CMD [ARGS...] (or -p PID)")
    if args.continuous_dump < 0 or args.dump_phase < 0:
        raise UsageError("--continuous-dump and --dump-phase are milliseconds >= 0")
    duration = _parse_duration(args.duration) if args.duration else None
    guard = Guardrails(args.max_producer_memory, args.max_producer_cpu)
    library = _client_library()
    if pids:
        attach.find_gdb()
        for pid in pids:
            attach.check_target(pid)
        executable = ""
        name = f"pid{pids[0]}"
    else:
        executable = _resolve(command[0])
        name = Path(command[0]).name
    output = Path(args.output or f"heapscope.{name}.{os.getpid()}.db")

    writer = ProfileWriter(output, force=args.force)  # fails here, before the target starts, if unwritable
    writer.set_metadata("heapscope_version", __version__)
    writer.set_metadata("command", " ".join(command) if command else "-p " + ",".join(map(str, pids)))
    writer.set_metadata("interval", config.interval)
    writer.set_metadata("started_unix_ns", time.time_ns())
    verbose = bool(args.verbose)
    producer = Producer(writer, config, log=_log if verbose else lambda _m: None)
    say = _log if verbose or not args.quiet else (lambda _m: None)
    session = Session(producer, guard, duration, args.continuous_dump, args.dump_phase, say, _log)

    status_line = _StatusLine(enabled=not args.quiet and sys.stderr.isatty())
    started = time.monotonic()
    child: subprocess.Popen[bytes] | None = None
    restore: dict[int, object] = {}
    locks: list[attach.PidLock] = []
    errors: list[str] = []
    returncode = 0
    symbolizer = None
    session.install_signals()
    try:
        if command:
            env = dict(os.environ)
            env.update(producer.client_env())
            preload = env.get("LD_PRELOAD", "")
            env["LD_PRELOAD"] = f"{library}:{preload}" if preload else str(library)
            try:
                child = subprocess.Popen(command, executable=executable, env=env)
            except OSError as e:
                writer.close()
                raise TargetError(f"cannot run {command[0]}: {e.strerror}") from e
            producer.target_pids.add(child.pid)
            restore = _forward_signals(child)
        else:
            restore = session.detach_on_signals()
            for pid in pids:
                session.attach(pid, library, locks, errors)
        if not args.no_symbolize:
            # Imported and started only now: that work overlaps the target's run.
            from heapscope.symbolize.live import LiveSymbolizer
            symbolizer = LiveSymbolizer()
            producer.on_module = symbolizer.module
        if child is not None or producer.attach_pids:
            returncode = session.run(child, started, status_line.updater(producer, started))
        # The target's own run time, apart from heapscope's start-up and post-processing.
        writer.set_metadata("target_wall_ns", int((time.monotonic() - started) * 1e9))
    finally:
        if child is not None:
            for sig, handler in restore.items():
                signal.signal(sig, handler)
        # -p: a second Ctrl-C while detaching and writing is ignored, not a traceback.
        session.uninstall_signals()
        status_line.clear()
        t_detach = time.monotonic()
        attached_live = [p.info.pid for p in producer.processes.values() if p.info.pid in producer.attach_pids]
        producer.finish()
        for pid in attached_live:
            say(f"detached from pid {pid} in {(time.monotonic() - t_detach) * 1000:.1f} ms")
        for lock in locks:
            lock.release()
        writer.add_stats(producer.global_stats())
        writer.set_metadata("duration_ns", int((time.monotonic() - started) * 1e9))
        writer.commit()
    if child is not None and child.returncode is None:
        # --duration or a guardrail ended the session: the target runs on unprofiled.
        returncode = _wait_child(child)
    if symbolizer is not None:
        symbolizer.finish(writer.db)
    writer.close()
    if not args.quiet:
        _summary(producer, output, returncode, time.monotonic() - started)
    if child is None:
        for sig, handler in restore.items():
            signal.signal(sig, handler)
    if errors:
        if not session.attached:
            raise TargetError("; ".join(errors))
        for e in errors:
            _log(f"error: {e}")
        return 1
    return returncode


def _wait_child(child: subprocess.Popen[bytes]) -> int:
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            continue
    return 128 - code if code < 0 else code


def _pids(values: list[str]) -> list[int]:
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


def _parse_duration(text: str) -> float:
    """'500ms', '30s', '2m', '1h'; a bare number is milliseconds (heap_profile -d). Seconds."""
    t = text.strip().lower()
    units = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
    mult = 0.001
    for suffix, m in units:
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    try:
        value = float(t)
    except ValueError:
        raise UsageError(f"--duration must be a time like 500ms, 30s or 2m, not {text!r}") from None
    if value <= 0:
        raise UsageError(f"--duration must be positive, not {text!r}")
    return value * mult


def _config(args: argparse.Namespace) -> RecordConfig:
    return RecordConfig(
        interval=parse_size(args.interval, "--interval"),
        seed=args.seed,
        unwinder=UNWINDERS[args.unwinder],
        shmem_size=parse_size(args.shmem_size, "--shmem-size"),
        block_client=args.block_client,
        skip_symbol_prefixes=tuple(args.skip_symbol_prefix),
        stream_allocations=args.stream_allocations,
        max_frames=args.max_frames,
        dump_at_max=args.dump_at_max,
        names=tuple(args.name),
    )


def _resolve(program: str) -> str:
    if "/" in program:
        if not os.path.isfile(program):
            raise TargetError(f"cannot run {program}: no such file")
        if not os.access(program, os.X_OK):
            raise TargetError(f"cannot run {program}: permission denied")
        return program
    found = shutil.which(program)
    if found is None:
        raise TargetError(f"command not found: {program}")
    return found


def _client_library() -> Path:
    lib = Path(__file__).resolve().parent.parent / "client" / "libheapscope.so"
    if not lib.is_file():
        raise TargetError(f"the client library is missing ({lib}); reinstall heapscope with `pip install .`")
    return lib


def _forward_signals(child: subprocess.Popen[bytes]) -> dict[int, object]:
    in_foreground = False
    with contextlib.suppress(OSError):
        in_foreground = os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(sig)

    restore: dict[int, object] = {}
    for sig in FORWARDED:
        restore[sig] = signal.signal(sig, forward)
    for sig in TERMINAL:
        restore[sig] = signal.signal(sig, signal.SIG_IGN if in_foreground else forward)
    return restore


class _StatusLine:
    """One line on the terminal that the next write replaces; never on a pipe."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def updater(self, producer: Producer, started: float) -> Callable[[float], None] | None:
        """What the session calls to refresh the line; None when there is no line."""
        if not self.enabled:
            return None

        def update(now: float) -> None:
            samples, live = producer.live_summary()
            self.show(f"heapscope: {now - started:6.1f} s  {samples:,} samples  {human_bytes(live)} live")
        return update

    def show(self, text: str) -> None:
        sys.stderr.write(f"\r\x1b[K{text}\r")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _log(msg: str) -> None:
    print(f"heapscope: {msg}", file=sys.stderr)


def _summary(producer: Producer, output: Path, returncode: int, elapsed: float) -> None:
    procs = producer.ended
    samples = sum(p.final_stats["mallocs"] for p in procs)
    # What the dumps summed: all sampled bytes, or with --dump-at-max those at the peak.
    key = "peak_unfreed" if producer.config.dump_at_max else "sampled_bytes"
    sampled = sum(p.final_stats[key] for p in procs)
    blocked_us = sum(p.final_meta["blocked_ns"] for p in procs) // 1000
    dropped = sum(p.final_meta["dropped_records"] for p in procs)
    unwinders = sorted({p.flags.unwinder for p in procs if p.flags.unwinder}) or ["none (no process connected)"]
    share = blocked_us / 1e6 / elapsed * 100 if elapsed > 0 else 0.0
    size = output.stat().st_size if output.exists() else 0
    lines = [
        f"recorded {len(procs)} process{'es' if len(procs) != 1 else ''}, {samples:,} samples, "
        f"{human_bytes(sampled)} sampled, interval {producer.config.interval} B, {elapsed:.2f} s",
        f"unwinder {', '.join(unwinders)}; target blocked {blocked_us / 1000:.1f} ms ({share:.1f}%); "
        f"{dropped:,} records dropped",
    ]
    errors = sorted({f"{p.info.name}: {p.flags.client_error}" for p in procs if p.flags.client_error})
    if errors:
        lines.append("client stopped early: " + "; ".join(errors))
    if returncode > 128:
        with contextlib.suppress(ValueError):
            lines.append(f"target died of {signal.Signals(returncode - 128).name}")
    lines.append(f"profile written to {output} ({human_bytes(size)})")
    lines.append(f"next: heapscope report {output}")
    for line in lines:
        print(f"heapscope: {line}", file=sys.stderr)
