"""`heapscope record -- CMD ...`: run a program under the client and write its profile."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from heapscope import __version__
from heapscope.errors import TargetError, UsageError
from heapscope.producer.config import DEFAULT_INTERVAL, DEFAULT_SHMEM_SIZE, RecordConfig, parse_size
from heapscope.producer.producer import Producer
from heapscope.store.writer import ProfileWriter
from heapscope.symbolize.profile import symbolize_profile
from heapscope.view.units import human_bytes
from heapscope.wire.codec import Unwinder

NAME = "record"
HELP = "run a command under the profiler and write its heap profile"

STATUS_EVERY_S = 0.5
IDLE_POLL_S = 0.005
# Signals sent to heapscope by pid are passed on to the target. SIGINT and
# SIGQUIT from the terminal already reach the target through its process
# group, so they are passed on only when heapscope is not in the foreground.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2, signal.SIGALRM)
TERMINAL = (signal.SIGINT, signal.SIGQUIT)
UNWINDERS = {"auto": Unwinder.AUTO, "libunwind": Unwinder.LIBUNWIND, "fp": Unwinder.FP, "none": Unwinder.NONE}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE",
                   help="profile database to write (default: heapscope.<command>.<pid>.db)")
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
    p.add_argument("--no-symbolize", action="store_true", help="leave function names empty")
    p.add_argument("-q", "--quiet", action="store_true", help="no status line and no summary")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the program to profile and its arguments")


def main(args: argparse.Namespace) -> int:
    config = _config(args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command to profile: heapscope record [options] -- CMD [ARGS...]")
    executable = _resolve(command[0])
    library = _client_library()
    output = Path(args.output or f"heapscope.{Path(command[0]).name}.{os.getpid()}.db")

    writer = ProfileWriter(output)  # fails here, before the target starts, if unwritable
    writer.set_metadata("heapscope_version", __version__)
    writer.set_metadata("command", " ".join(command))
    writer.set_metadata("interval", config.interval)
    writer.set_metadata("started_unix_ns", time.time_ns())
    verbose = bool(args.verbose)
    producer = Producer(writer, config, log=_log if verbose else lambda _m: None)

    env = dict(os.environ)
    env.update(producer.client_env())
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{library}:{preload}" if preload else str(library)

    status_line = _StatusLine(enabled=not args.quiet and sys.stderr.isatty())
    started = time.monotonic()
    try:
        child = subprocess.Popen(command, executable=executable, env=env)
    except OSError as e:
        writer.close()
        raise TargetError(f"cannot run {command[0]}: {e.strerror}") from e
    producer.target_pid = child.pid

    restore = _forward_signals(child)
    try:
        returncode = _run(producer, child, status_line, started)
        # The target's own run time, apart from heapscope's start-up and post-processing.
        writer.set_metadata("target_wall_ns", int((time.monotonic() - started) * 1e9))
    finally:
        for sig, handler in restore.items():
            signal.signal(sig, handler)
        status_line.clear()
        producer.finish()
        writer.add_stats(producer.global_stats())
        writer.set_metadata("duration_ns", int((time.monotonic() - started) * 1e9))
        writer.commit()
    if not args.no_symbolize:
        symbolize_profile(writer.db)
    writer.close()
    if not args.quiet:
        _summary(producer, output, returncode, time.monotonic() - started)
    return returncode


def _run(producer: Producer, child: subprocess.Popen[bytes], status: _StatusLine, started: float) -> int:
    busy = False
    next_status = started + STATUS_EVERY_S
    while True:
        busy = producer.poll(0 if busy else IDLE_POLL_S) > 0
        code = child.poll()
        if code is not None:
            break
        now = time.monotonic()
        if status.enabled and now >= next_status:
            samples, live = producer.live_summary()
            status.show(f"heapscope: {now - started:6.1f} s  {samples:,} samples  {human_bytes(live)} live")
            next_status = now + STATUS_EVERY_S
    # The target is gone; its socket (and those of children that exited with
    # it) has reached EOF: end them as exited before ending the rest.
    producer.stop_accepting()
    while producer.poll(0):
        pass
    return 128 - code if code < 0 else code


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
    lib = Path(str(resources.files("heapscope") / "client" / "libheapscope.so"))
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
    sampled = sum(t.alloc_bytes for p in procs for t in p.heap.previous.values())
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
