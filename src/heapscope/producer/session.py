"""A recording session: the loop around the producer and what it reacts to.

Signals (SIGUSR1: a dump of every process now; with -p, SIGINT/SIGTERM/SIGHUP:
detach), dump times (-c every MS after --dump-phase), the producer's own
guardrails (checked every second), attaching to running pids, and the end:
the target's exit, --duration, or a detach. Signals wake the loop through
signal.set_wakeup_fd.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from heapscope.errors import TargetError, UsageError
from heapscope.producer import attach, procfs
from heapscope.producer.producer import Producer

STATUS_EVERY_S = 0.5
IDLE_POLL_S = 0.005
GUARDRAIL_EVERY_S = 1.0
# -p: these end the session (detach); the targets are not ours to signal.
DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Session:
    """The record loop and what it reacts to: signals, dump times, guardrails, the end."""

    def __init__(self, producer: Producer, guard: Guardrails, duration: float | None,
                 continuous_ms: int, phase_ms: int, say: Callable[[str], None],
                 warn: Callable[[str], None]) -> None:
        self.producer = producer
        self.guard = guard
        self.duration = duration
        self.interval = continuous_ms / 1000
        self.phase = phase_ms / 1000
        self.say = say  # progress, quiet with -q
        self.warn = warn  # always shown
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

    def run(self, child: subprocess.Popen[bytes] | None, started: float,
            status: Callable[[float], None] | None = None) -> int:
        """Loop until the session ends; the target's exit status (0 when attached).

        `status(now)` is called every STATUS_EVERY_S, for a live status line.
        """
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
                    self.warn(f"guardrail hit: {hit}; final dumps written, the targets run on unprofiled")
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
            if status is not None and now >= next_status:
                status(now)
                next_status = now + STATUS_EVERY_S
        if code is None:
            return 0
        # The target is gone; its socket (and those of children that exited with
        # it) has reached EOF: end them as exited before ending the rest.
        producer.stop_accepting()
        while producer.poll(0):
            pass
        return 128 - code if code < 0 else code


class Guardrails:
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
            kb = procfs.status_field("self", "RssAnon") + procfs.status_field("self", "VmSwap")
            if kb > self.memory_kb:
                return f"producer memory {kb / 1024:.1f} MB > --max-producer-memory {self.memory_kb / 1024:g} MB"
        if self.cpu_s is not None:
            t = os.times()
            used = t.user + t.system - self.cpu_start
            if used > self.cpu_s:
                return f"producer CPU {used:.2f} s > --max-producer-cpu {self.cpu_s:g} s"
        return ""
