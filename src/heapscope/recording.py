"""One recording, from the target's start (or the attach) to the written profile.

    with Recording(config, output, options) as rec:   # nothing started yet
        rec.start(argv)          # or rec.attach(pids)
        status = rec.run_until_exit()
    rec.summary                  # the figures `record` prints

The Recording owns what happens in between: the producer and its private
directory, signals (SIGUSR1: a dump now; others passed on to the target, or,
attached, a detach), dump times (-c), the producer's guardrails, the end
(the target's exit, --duration, stop()), and the teardown (final dumps,
stats, symbolization). Whatever fails inside heapscope, the Recording says so
in one line, lets the clients go (the target runs on unprofiled), keeps what
was written, and still waits for the target to end: the exit status is the
target's.

Hooks for a live view or an HTTP endpoint: `request_dump(reason)` and
`stop()` may be called from a signal handler or another thread (they only set
a flag and wake the loop); `dump_now(reason)` dumps at once from the loop's
own thread; `status` is called every STATUS_EVERY_S from the loop.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.resources
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heapscope import __version__
from heapscope.errors import HeapscopeError, TargetError, UsageError
from heapscope.producer import attach
from heapscope.producer.config import RecordConfig, check_ms, check_positive
from heapscope.producer.producer import Producer
from heapscope.producer.session import Guardrails, remove_stale_dirs
from heapscope.store.writer import ProfileWriter

STATUS_EVERY_S = 0.5
IDLE_POLL_S = 0.005
GUARDRAIL_EVERY_S = 1.0
MAX_DURATION_S = 366 * 24 * 3600.0
# Each profiled process holds a socket and a ring's memfd here: a common soft
# limit of 1024 descriptors would stop a recording at ~500 live processes.
WANTED_NOFILE = 1 << 16
# Signals sent to heapscope by pid are passed on to the target. SIGINT and
# SIGQUIT from the terminal already reach the target through its process
# group, so they are passed on only when heapscope is not in the foreground.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2, signal.SIGALRM)
TERMINAL = (signal.SIGINT, signal.SIGQUIT)
# Attached (-p): these end the session (detach); the targets are not ours to signal.
DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _quiet(_msg: str) -> None:
    pass


@dataclass(frozen=True, slots=True)
class RecordingOptions:
    duration: float | None = None  # seconds; None = until the target ends (or stop())
    continuous_ms: int = 0  # a dump every so many ms; 0 = only at the end
    phase_ms: int = 0  # before the first continuous dump
    max_memory_mb: float | None = None  # guardrails on heapscope itself
    max_cpu_s: float | None = None
    symbolize: bool = True
    command: str = ""  # for the profile's metadata
    # Pass SIGTERM, SIGHUP, ... on to a started target (the CLI); an in-process
    # host (a test runner with its own SIGALRM timeout, say) keeps its handlers.
    forward_signals: bool = True
    force: bool = False  # replace an existing heapscope profile at the output path

    def __post_init__(self) -> None:
        check_positive(self.duration, "--duration (seconds)", MAX_DURATION_S)
        check_ms(self.continuous_ms, "--continuous-dump")
        check_ms(self.phase_ms, "--dump-phase")


@dataclass(slots=True)
class Summary:
    """The figures of a finished recording."""

    output: Path
    processes: int = 0
    samples: int = 0
    sampled_bytes: int = 0
    interval: int = 0
    elapsed_s: float = 0.0
    blocked_ms: float = 0.0
    dropped_records: int = 0
    unwinders: list[str] = field(default_factory=list)
    client_errors: list[str] = field(default_factory=list)
    exit_status: int | None = None  # the target's, shell style (128+N for signal N)
    output_bytes: int = 0
    no_descriptors: int = 0  # processes not profiled: heapscope was out of file descriptors
    problems: list[str] = field(default_factory=list)  # what went wrong inside heapscope, one line each
    python: list[str] = field(default_factory=list)  # the Python frames status lines, one per distinct one
    peak_heap: int = 0  # sum over processes of each one's peak of sampled unreleased bytes
    peak_rss: int = 0  # sum over processes of each one's peak RSS (VmHWM), as read


class Recording:
    """Start or attach, loop, dump, guard, tear down; see the module's docstring."""

    def __init__(self, config: RecordConfig, output: Path, options: RecordingOptions | None = None, *,
                 library: Path | None = None, say: Callable[[str], None] = _quiet,
                 warn: Callable[[str], None] = _quiet, log: Callable[[str], None] = _quiet) -> None:
        self.config = config
        self.output = Path(output)
        self.options = options or RecordingOptions()
        self.guard = Guardrails(self.options.max_memory_mb, self.options.max_cpu_s)
        self.library = library or client_library()
        self.say = say  # progress, quiet with -q
        self.warn = warn  # always shown
        self.log = log  # -v
        self.status: Callable[[float], None] | None = None
        self.summary = Summary(self.output, interval=config.interval)
        self.writer: ProfileWriter | None = None
        self.producer: Producer | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.attached: list[int] = []
        self.errors: list[str] = []  # attach failures
        self.started = time.monotonic()
        self._dumps_requested: list[str] = []
        self._stopping = False
        self._failed = False  # an internal error: profiling abandoned
        self._ended = False  # the loop is over: requests are ignored
        self._pending: list[int] = []  # signals for a target not started yet
        self._restore: dict[int, Any] = {}
        self._old_wakeup: int | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._locks: list[attach.PidLock] = []
        self._symbolizer: Any = None
        self._nofile: tuple[int, int] | None = None  # the limit before we raised it

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self) -> Recording:
        with contextlib.suppress(OSError):
            removed = remove_stale_dirs()
            if removed:
                self.log(f"removed {removed} session director{'ies' if removed > 1 else 'y'} of dead runs")
        self._raise_nofile()
        self._install_signal(signal.SIGUSR1, self._on_usr1)
        if threading.current_thread() is threading.main_thread():
            self._old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _open(self, command: str) -> Producer:
        """The profile and the producer: fails here, before any target is touched."""
        if self.producer is not None:
            raise UsageError("a Recording records one target (or one set of pids) only")
        writer = ProfileWriter(self.output, force=self.options.force)
        self.writer = writer
        writer.set_metadata("heapscope_version", __version__)
        writer.set_metadata("command", self.options.command or command)
        writer.set_metadata("interval", self.config.interval)
        writer.set_metadata("started_unix_ns", time.time_ns())
        self.producer = Producer(writer, self.config, log=self.log)
        self.started = time.monotonic()
        return self.producer

    def start(self, argv: list[str], executable: str | None = None,
              stdin: int | None = None, stdout: int | None = None) -> int:
        """Start `argv` under the client; its pid. `stdin`/`stdout`: as for subprocess.Popen."""
        if not argv:
            raise UsageError("no command to profile")
        producer = self._open(" ".join(argv))
        env = dict(os.environ)
        env.update(producer.client_env())
        preload = env.get("LD_PRELOAD", "")
        env["LD_PRELOAD"] = f"{self.library}:{preload}" if preload else str(self.library)
        if self.options.forward_signals:
            self._forward_signals()
        try:
            self.child = subprocess.Popen(argv, executable=executable, env=env, stdin=stdin, stdout=stdout,
                                          preexec_fn=self._restore_nofile if self._nofile else None)
        except OSError as e:
            raise TargetError(f"cannot run {argv[0]}: {e.strerror}") from e
        producer.target_pids.add(self.child.pid)
        for sig in self._pending:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(sig)
        self._pending.clear()
        self._start_symbolizer()
        return self.child.pid

    def attach(self, pids: list[int]) -> list[int]:
        """Attach to running processes; the pids attached. Refusals before any
        attach raise TargetError; later failures are collected in `errors`."""
        for pid in pids:
            attach.check_target(pid)
        attach.find_gdb()
        producer = self._open("-p " + ",".join(map(str, pids)))
        for sig in DETACH_SIGNALS:
            self._install_signal(sig, self._on_stop)
        for pid in pids:
            if self._stopping:
                break
            self._attach_one(producer, pid)
        if not self.attached and self.errors:
            raise TargetError("; ".join(self.errors))
        self._start_symbolizer()
        return list(self.attached)

    def _attach_one(self, producer: Producer, pid: int) -> None:
        try:
            lock = attach.PidLock(pid)
        except attach.AlreadyProfiled as e:
            producer.reject_concurrent(pid)
            self.errors.append(str(e))
            return
        producer.attach_pids.add(pid)
        producer.target_pids.add(pid)
        t0 = time.monotonic()
        env = producer.client_env()
        try:
            injection = attach.start_injection(pid, self.library, env["HEAPSCOPE_SOCKET"], env["HEAPSCOPE_TOKEN"])
            while not injection.done():
                if time.monotonic() - t0 > attach.GDB_TIMEOUT_S:
                    injection.kill()
                    raise TargetError(f"attaching to pid {pid} timed out after {attach.GDB_TIMEOUT_S:.0f} s "
                                      "(is it stopped?)")
                self._poll(IDLE_POLL_S)
            injection.result()
        except attach.AlreadyProfiled as e:
            producer.attach_pids.discard(pid)
            producer.reject_concurrent(pid)
            lock.release()
            self.errors.append(str(e))
            return
        except TargetError as e:
            producer.attach_pids.discard(pid)
            lock.release()
            self.errors.append(str(e))
            return
        self._locks.append(lock)
        self.attached.append(pid)
        self.say(f"attached to pid {pid} in {(time.monotonic() - t0) * 1000:.1f} ms")

    def _raise_nofile(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = WANTED_NOFILE if hard == resource.RLIM_INFINITY else min(hard, WANTED_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                self._nofile = (soft, hard)

    def _restore_nofile(self) -> None:
        """The target gets the limit it would have had without heapscope (also run in the child)."""
        if self._nofile is not None:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, self._nofile)

    def _start_symbolizer(self) -> None:
        if not self.options.symbolize or self.producer is None:
            return
        try:
            # Imported and started only now: that work overlaps the target's run.
            from heapscope.symbolize.live import LiveSymbolizer
            self._symbolizer = LiveSymbolizer()
            self.producer.on_module = self._symbolizer.module
        except Exception as e:  # symbolization is a bonus: never a reason to stop
            self.warn(f"symbolization unavailable: {_describe(e)}")
            self._symbolizer = None

    # -- requests (signal handlers, other threads) ---------------------------

    def request_dump(self, reason: str = "signal") -> None:
        """A dump of every process, by the loop, as soon as it wakes."""
        if not self._ended:
            self._dumps_requested.append(reason)
            self._wake()

    def stop(self) -> None:
        """End the session: final dumps; attached targets are let go, a started one runs on."""
        self._stopping = True
        self._wake()

    def dump_now(self, reason: str) -> None:
        """A dump of every process now; only from the loop's thread (or between start and run)."""
        if self.producer is None or self._failed or self._ended:
            return
        try:
            self.producer.dump_all(reason)
        except Exception as e:
            self._fail(e)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _on_usr1(self, _sig: int, _frame: object) -> None:
        self.request_dump("signal")

    def _on_stop(self, _sig: int, _frame: object) -> None:
        self._stopping = True

    def _install_signal(self, sig: int, handler: Callable[[int, Any], None] | int) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # in-process recording from another thread: the host owns the signals
        old = signal.signal(sig, handler)
        self._restore.setdefault(sig, old)

    def _forward_signals(self) -> None:
        in_foreground = False
        with contextlib.suppress(OSError):
            in_foreground = os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()

        def forward(sig: int, _frame: object) -> None:
            child = self.child
            if child is None:
                self._pending.append(sig)
            elif child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(sig)

        for sig in FORWARDED:
            self._install_signal(sig, forward)
        for sig in TERMINAL:
            self._install_signal(sig, signal.SIG_IGN if in_foreground else forward)

    # -- the loop --------------------------------------------------------------

    def _poll(self, timeout: float) -> int:
        assert self.producer is not None
        drained = 0
        if not self._failed:
            try:
                drained = self.producer.poll(timeout, wake=self._wake_r)
            except Exception as e:
                self._fail(e)
        with contextlib.suppress(BlockingIOError, InterruptedError, OSError):
            while self._wake_r.recv(512):
                pass
        return drained

    def run_until_exit(self) -> int:
        """Record until the session ends, then wait for a started target to end.

        The target's exit status, shell style; attached: 0, or 1 when an attach
        failed or an attached process died during the session.
        """
        producer = self.producer
        if producer is None:
            raise UsageError("nothing to record: call start() or attach() first")
        code: int | None = None
        try:
            code = self._loop(producer)
        except Exception as e:  # the loop's own bookkeeping: same as a producer failure
            self._fail(e)
        self._ended = True
        if self.child is not None:
            if code is None:
                # --duration, a guardrail, stop() or a failure ended the session:
                # the target runs on unprofiled, and we wait for it.
                if not self._failed:
                    self._end_profiling()
                code = _wait_child(self.child)
            self.summary.exit_status = code
            return code
        self._end_profiling()
        dead = [pid for pid in self.attached if not attach.alive(pid)]
        for pid in dead:
            self._problem(f"pid {pid} exited during the session")
        return 1 if dead or self.errors or self._failed else 0

    def _loop(self, producer: Producer) -> int | None:
        opts = self.options
        started = self.started
        interval = opts.continuous_ms / 1000
        busy = False
        next_status = started + STATUS_EVERY_S
        next_dump = started + opts.phase_ms / 1000 if interval > 0 else None
        next_guard = started + GUARDRAIL_EVERY_S if self.guard.enabled else None
        end_at = started + opts.duration if opts.duration is not None else None
        while True:
            busy = self._poll(0 if busy else IDLE_POLL_S) > 0
            while self._dumps_requested:
                self.dump_now(self._dumps_requested.pop(0))
            now = time.monotonic()
            if next_dump is not None and now >= next_dump:
                self.dump_now("periodic")
                while next_dump <= now:
                    next_dump += interval
            if next_guard is not None and now >= next_guard and not self._failed:
                hit = self.guard.check()
                if hit:
                    try:
                        producer.hit_guardrail(hit)
                    except Exception as e:
                        self._fail(e)
                    self.warn(f"guardrail hit: {hit}; final dumps written, the targets run on unprofiled")
                    next_guard = next_dump = None
                else:
                    next_guard = now + GUARDRAIL_EVERY_S
            if self.child is not None:
                code = self.child.poll()
                if code is not None:
                    return self._target_exited(producer, code)
                if self._failed:
                    return None  # supervised by run_until_exit from here
            elif self._stopping or self._failed or not any(
                    p.info.pid in producer.attach_pids for p in producer.processes.values()):
                return None
            if self._stopping or (end_at is not None and now >= end_at):
                return None
            if producer.guardrail and self.child is None:
                return None
            if self.status is not None and now >= next_status:
                with contextlib.suppress(Exception):
                    self.status(now)
                next_status = now + STATUS_EVERY_S

    def _target_exited(self, producer: Producer, code: int) -> int:
        # The target is gone; its socket (and those of children that exited with
        # it) has reached EOF: end them as exited before ending the rest.
        if not self._failed:
            try:
                producer.stop_accepting()
                while producer.poll(0):
                    pass
            except Exception as e:
                self._fail(e)
        return 128 - code if code < 0 else code

    def _end_profiling(self) -> None:
        """Final dumps of every process still connected; they run on unprofiled."""
        producer = self.producer
        if producer is None or self._failed:
            return
        t0 = time.monotonic()
        live = [p.info.pid for p in producer.processes.values() if p.info.pid in producer.attach_pids]
        try:
            producer.finish()
        except Exception as e:
            self._fail(e)
            return
        for pid in live:
            self.say(f"detached from pid {pid} in {(time.monotonic() - t0) * 1000:.1f} ms")

    # -- failures ----------------------------------------------------------------

    def _fail(self, e: BaseException) -> None:
        """An internal error: one line, the clients let go, what was written kept."""
        if self._failed:
            return
        self._failed = True
        what = _describe(e, self.output)
        running = "the target runs on unprofiled" if self.child is not None else "the targets run on unprofiled"
        self._problem(f"{what}; profiling stopped, {running}; the profile keeps what was written before")
        if self.producer is not None:
            self.producer.abandon()
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.rollback()

    def _problem(self, line: str) -> None:
        self.summary.problems.append(line)
        self.warn(f"error: {line}")

    # -- teardown ----------------------------------------------------------------

    def close(self) -> None:
        """Write what is left, symbolize, and let everything go; always safe to call."""
        self._ended = True
        try:
            if self.child is not None and self.child.returncode is None:
                # An exception left the session early: the target still ends under us.
                self._end_profiling()
                self.summary.exit_status = _wait_child(self.child)
            else:
                self._end_profiling()
            self._write_end()
        finally:
            if self.producer is not None:
                self.producer.abandon()
            for lock in self._locks:
                lock.release()
            self._locks.clear()
            self._figures()
            if self.writer is not None:
                with contextlib.suppress(Exception):
                    self.writer.close()
                self.summary.output_bytes = self.output.stat().st_size if self.output.exists() else 0
            self.summary.elapsed_s = time.monotonic() - self.started
            self._restore_nofile()
            self._nofile = None
            # Last: a signal after the target's end (say SIGUSR1) must find our handler.
            self._uninstall_signals()

    def _write_end(self) -> None:
        producer, writer = self.producer, self.writer
        if producer is None or writer is None:
            return
        if not self._failed:
            try:
                writer.set_metadata("target_wall_ns", int((time.monotonic() - self.started) * 1e9))
                writer.add_stats(producer.global_stats())
                writer.set_metadata("duration_ns", int((time.monotonic() - self.started) * 1e9))
                writer.commit()
            except Exception as e:
                self._fail(e)
        symbolizer, self._symbolizer = self._symbolizer, None
        if symbolizer is not None:
            if self._failed:
                with contextlib.suppress(Exception):
                    symbolizer.close()
                return
            try:
                symbolizer.finish(writer)
            except Exception as e:
                self._fail(e)

    def _figures(self) -> None:
        producer = self.producer
        if producer is None:
            return
        procs = producer.ended
        s = self.summary
        s.processes = len(procs)
        s.no_descriptors = producer.no_descriptors
        with contextlib.suppress(Exception):
            s.samples = sum(p.final_stats.get("mallocs", 0) for p in procs)
            # What the dumps summed: all sampled bytes, or with --dump-at-max those at the peak.
            key = "peak_unfreed" if self.config.dump_at_max else "sampled_bytes"
            s.sampled_bytes = sum(p.final_stats.get(key, 0) for p in procs)
            s.blocked_ms = sum(p.final_meta.get("blocked_ns", 0) for p in procs) / 1e6
            s.dropped_records = sum(p.final_meta.get("dropped_records", 0) for p in procs)
            s.unwinders = sorted({p.flags.unwinder for p in procs if p.flags.unwinder})
            s.client_errors = sorted({f"{p.info.name}: {p.flags.client_error}"
                                      for p in procs if p.flags.client_error})
            s.python = sorted({p.python_status for p in procs if p.python_status})
            s.peak_heap = sum(p.final_stats.get("peak_unfreed", 0) for p in procs)
            s.peak_rss = sum(p.peak_rss for p in procs)
            invalid = sum(p.final_meta.get("python_walks_invalid", 0) for p in procs)
            unplaced = sum(p.heap.python.unplaced for p in procs)
            if invalid:
                s.python.append(f"python frames: {invalid:,} walks cut short by a failed check")
            if unplaced:
                s.python.append(f"python frames: {unplaced:,} frames put at the root "
                                "(their eval activation was not in the native stack)")

    def _uninstall_signals(self) -> None:
        for sig, handler in self._restore.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)
        self._restore.clear()
        if self._old_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        self._wake_r.close()
        self._wake_w.close()


def client_library() -> Path:
    lib = Path(__file__).resolve().parent / "client" / "libheapscope.so"
    if not lib.is_file():
        # An editable install keeps built files in its build tree: ask the package.
        with contextlib.suppress(Exception):
            found = Path(str(importlib.resources.files("heapscope.client") / "libheapscope.so"))
            if found.is_file():
                lib = found
    if not lib.is_file():
        raise TargetError(f"the client library is missing ({lib}); reinstall heapscope with `pip install .`")
    return lib


def _wait_child(child: subprocess.Popen[bytes]) -> int:
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            continue
    return 128 - code if code < 0 else code


def _describe(e: BaseException, output: Path | None = None) -> str:
    """One line for an internal error; a full disk says so plainly."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    full = (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(e, sqlite3.Error) and "full" in text.lower())
    if full:
        return f"disk full writing {output}" if output else "disk full"
    if isinstance(e, HeapscopeError):
        return text
    return f"internal error ({type(e).__name__}: {text})"
