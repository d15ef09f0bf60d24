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
import socket
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
from heapscope.store.writer import ProfileWriter
from heapscope.view.units import human_bytes
from heapscope.wire.codec import Unwinder

NAME = "record"
HELP = "run a command under the profiler and write its heap profile"

STATUS_EVERY_S = 0.5
IDLE_POLL_S = 0.005
GUARDRAIL_EVERY_S = 1.0
# -p: these end the session (detach); the targets are not ours to signal.
DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
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
    guard = _Guardrails(args.max_producer_memory, args.max_producer_cpu)
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

    writer = ProfileWriter(output)  # fails here, before the target starts, if unwritable
    writer.set_metadata("heapscope_version", __version__)
    writer.set_metadata("command", " ".join(command) if command else "-p " + ",".join(map(str, pids)))
    writer.set_metadata("interval", config.interval)
    writer.set_metadata("started_unix_ns", time.time_ns())
    verbose = bool(args.verbose)
    producer = Producer(writer, config, log=_log if verbose else lambda _m: None)
    say = _log if verbose or not args.quiet else (lambda _m: None)
    session = _Session(producer, guard, duration, args.continuous_dump, args.dump_phase, say)

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
            returncode = session.run(child, status_line, started)
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


class _Session:
    """The record loop and what it reacts to: signals, dump times, guardrails, the end."""

    def __init__(self, producer: Producer, guard: _Guardrails, duration: float | None,
                 continuous_ms: int, phase_ms: int, say: Callable[[str], None]) -> None:
        self.producer = producer
        self.guard = guard
        self.duration = duration
        self.interval = continuous_ms / 1000
        self.phase = phase_ms / 1000
        self.say = say
        self.usr1 = 0  # SIGUSR1s not yet answered with a dump
        self.stop = False  # -p: Ctrl-C or SIGTERM: detach now
        self.attached: list[int] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._old_wakeup = -1
        self._old_usr1: object = None

    def install_signals(self) -> None:
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self._old_usr1 = signal.signal(signal.SIGUSR1, self._on_usr1)

    def uninstall_signals(self) -> None:
        signal.signal(signal.SIGUSR1, self._old_usr1)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._old_wakeup)
        self._wake_r.close()
        self._wake_w.close()

    def detach_on_signals(self) -> dict[int, object]:
        restore: dict[int, object] = {}
        for sig in DETACH_SIGNALS:
            restore[sig] = signal.signal(sig, self._on_stop)
        return restore

    def _on_usr1(self, _sig: int, _frame: object) -> None:
        self.usr1 += 1

    def _on_stop(self, _sig: int, _frame: object) -> None:
        self.stop = True

    def _poll(self, timeout: float) -> int:
        drained = self.producer.poll(timeout, wake=self._wake_r)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self._wake_r.recv(512):
                pass
        return drained

    def attach(self, pid: int, library: Path, locks: list[attach.PidLock], errors: list[str]) -> None:
        """Load the client into `pid`; failures go to `errors` (rejections also to the profile)."""
        producer = self.producer
        try:
            lock = attach.PidLock(pid)
        except attach.AlreadyProfiled as e:
            producer.reject_concurrent(pid)
            errors.append(str(e))
            return
        producer.attach_pids.add(pid)
        producer.target_pids.add(pid)
        t0 = time.monotonic()
        env = producer.client_env()
        injection = attach.start_injection(pid, library, env["HEAPSCOPE_SOCKET"], env["HEAPSCOPE_TOKEN"])
        try:
            while not injection.done():
                if time.monotonic() - t0 > attach.GDB_TIMEOUT_S:
                    injection.kill()
                    raise TargetError(f"attaching to pid {pid} timed out after {attach.GDB_TIMEOUT_S:.0f} s "
                                      "(is it stopped, or holding the malloc lock?)")
                self._poll(IDLE_POLL_S)
            injection.result()
        except attach.AlreadyProfiled as e:
            producer.attach_pids.discard(pid)
            producer.reject_concurrent(pid)
            lock.release()
            errors.append(str(e))
            return
        except TargetError as e:
            producer.attach_pids.discard(pid)
            lock.release()
            errors.append(str(e))
            return
        locks.append(lock)
        self.attached.append(pid)
        self.say(f"attached to pid {pid} in {(time.monotonic() - t0) * 1000:.1f} ms")

    def run(self, child: subprocess.Popen[bytes] | None, status: _StatusLine, started: float) -> int:
        producer = self.producer
        busy = False
        next_status = started + STATUS_EVERY_S
        next_dump = started + self.phase if self.interval > 0 else None
        next_guard = started + GUARDRAIL_EVERY_S if self.guard.enabled else None
        end_at = started + self.duration if self.duration is not None else None
        code: int | None = None
        while True:
            busy = self._poll(0 if busy else IDLE_POLL_S) > 0
            while self.usr1 > 0:
                self.usr1 -= 1
                producer.dump_all("signal")
            now = time.monotonic()
            if next_dump is not None and now >= next_dump:
                producer.dump_all("periodic")
                while next_dump <= now:
                    next_dump += self.interval
            if next_guard is not None and now >= next_guard:
                hit = self.guard.check()
                if hit:
                    producer.hit_guardrail(hit)
                    _log(f"guardrail hit: {hit}; final dumps written, the targets run on unprofiled")
                    next_guard = next_dump = None
                else:
                    next_guard = now + GUARDRAIL_EVERY_S
            if child is not None:
                code = child.poll()
                if code is not None:
                    break
            elif self.stop or not any(p.info.pid in producer.attach_pids for p in producer.processes.values()):
                break
            if end_at is not None and now >= end_at:
                break
            if producer.guardrail and child is None:
                break
            if status.enabled and now >= next_status:
                samples, live = producer.live_summary()
                status.show(f"heapscope: {now - started:6.1f} s  {samples:,} samples  {human_bytes(live)} live")
                next_status = now + STATUS_EVERY_S
        if code is None:
            return 0
        # The target is gone; its socket (and those of children that exited with
        # it) has reached EOF: end them as exited before ending the rest.
        producer.stop_accepting()
        while producer.poll(0):
            pass
        return 128 - code if code < 0 else code


class _Guardrails:
    """heapprofd's max_heapprofd_memory_kb / max_heapprofd_cpu_secs, for heapscope itself."""

    def __init__(self, memory_mb: float | None, cpu_s: float | None) -> None:
        if (memory_mb is not None and memory_mb <= 0) or (cpu_s is not None and cpu_s <= 0):
            raise UsageError("--max-producer-memory and --max-producer-cpu must be positive")
        self.memory_kb = memory_mb * 1024 if memory_mb is not None else None
        self.cpu_s = cpu_s
        self.enabled = memory_mb is not None or cpu_s is not None
        t = os.times()
        self.cpu_start = t.user + t.system

    def check(self) -> str:
        """'' while within the limits, else which one was passed."""
        if self.memory_kb is not None:
            kb = _self_status_kb("RssAnon") + _self_status_kb("VmSwap")
            if kb > self.memory_kb:
                return f"producer memory {kb / 1024:.1f} MB > --max-producer-memory {self.memory_kb / 1024:g} MB"
        if self.cpu_s is not None:
            t = os.times()
            used = t.user + t.system - self.cpu_start
            if used > self.cpu_s:
                return f"producer CPU {used:.2f} s > --max-producer-cpu {self.cpu_s:g} s"
        return ""


def _self_status_kb(key: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


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
