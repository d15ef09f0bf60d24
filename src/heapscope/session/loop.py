"""The recording loop: poll, dump, guard; and the end of the target."""

from __future__ import annotations

import contextlib
import signal
import time

from heapscope import sigmask
from heapscope.errors import UsageError
from heapscope.producer.producer import Producer
from heapscope.session.core import (
    BUSY_POLL_S,
    CHORES_AFTER_S,
    GUARDRAIL_EVERY_S,
    IDLE_POLL_S,
    QUIET_AFTER_S,
    QUIET_POLL_S,
    STATUS_EVERY_S,
    _describe,
)
from heapscope.session.requests import Windows


class Loop(Windows):
    """The loop: poll the producer, dump, guard, end with the target."""

    def _poll(self, timeout: float) -> int:
        assert self.producer is not None
        drained = 0
        if not self._failed:
            try:
                watch = tuple(self._watched)
                if self._child_fd is not None:
                    watch += (self._child_fd,)
                drained = self.producer.poll(timeout, wake=self._wake_r, watch=watch)
            except Exception as e:
                self._fail(e)
        for fn in list(self._watched.values()):
            with contextlib.suppress(Exception):
                fn()
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
        self._release_waiters()
        if self.child is not None:
            if code is None:
                # --duration, a guardrail, stop() or a failure ended the session:
                # the target runs on unprofiled, and we wait for it.
                if not self._failed:
                    self._end_profiling()
                code = self.child.exit_status()
            self.summary.exit_status = code
            return code
        self._end_profiling()
        dead: list[int] = []
        if self.attached:
            from heapscope.producer.attach import alive

            # The client shuts its socket in the process's last destructor, before the
            # kernel makes it a zombie: the producer saw that exit even when /proc has not yet.
            dead = [pid for pid in self.attached if pid in producer.exited_pids or not alive(pid)]
        for pid in dead:
            self._problem(f"pid {pid} exited during the session")
        return 1 if dead or self.errors or self._failed else 0

    def _loop(self, producer: Producer) -> int | None:
        opts = self.options
        started = self.started
        interval = opts.continuous_ms / 1000
        next_status = started + STATUS_EVERY_S
        next_dump = started + opts.phase_ms / 1000 if interval > 0 else None
        next_guard = started + GUARDRAIL_EVERY_S if self.guard.enabled else None
        end_at = started + opts.duration if opts.duration is not None else None
        batch = max(1, self.config.shmem_size // 8)  # drained per round above which the loop does not nap
        timeout = IDLE_POLL_S
        chores_from = started + CHORES_AFTER_S
        polled = time.monotonic()
        quiet_from = polled + QUIET_AFTER_S
        while True:
            drained = self._poll(timeout)
            # The idle nap too when, at the rate this round drained, it fills under a quarter
            # of `batch`: a busy compiler's records then cost ~5x fewer wake-ups.
            was, polled = polled, time.monotonic()
            slow = drained * IDLE_POLL_S * 4 <= batch * (polled - was)
            timeout = 0.0 if drained >= batch else BUSY_POLL_S if drained and not slow else IDLE_POLL_S
            if self._chores or timeout != IDLE_POLL_S:
                quiet_from = polled + QUIET_AFTER_S
            # At this round's rate, how long a quarter of `batch` takes to fill: how long a quiet
            # loop may nap (one sample per 512 KiB, always on, drains a little every round).
            fill_s = batch / 4 * (polled - was) / drained if drained else QUIET_POLL_S
            if self._chores and drained < batch and (
                    producer.processes or producer.ended or polled >= chores_from):
                self._chore()
            if self._dumps_requested:
                # Every request so far in one dump, then on: a flood of SIGUSR1 that came faster
                # than dumps kept this loop dumping, and record never saw its target's exit
                # (tests/fault: test_a_flood_of_dump_requests_never_stops_the_recording).
                reasons, self._dumps_requested = self._dumps_requested, []
                self.dump_now(reasons[0])
            if self._waiters:
                self._answer_waiters()
            now = time.monotonic()
            if next_dump is not None and now >= next_dump:
                self.dump_now("periodic")
                while next_dump <= now:
                    next_dump += interval
                self._dumped()
            if self._every:
                self._run_every(producer, now)
            if next_guard is not None and now >= next_guard and not self._failed:
                if self._guardrail_hit(producer):
                    next_guard = next_dump = None
                else:
                    next_guard = now + GUARDRAIL_EVERY_S
            if self.child is not None:
                code = self.child.poll()
                if code is not None:
                    self._exited = time.monotonic()
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
            if now >= next_status:
                self._publish(producer, now)
                next_status = now + STATUS_EVERY_S
            if self._symbolizer is not None:
                try:
                    self._symbolizer.tick(now)
                except Exception as e:  # symbolization is a bonus: the frames get names at the end
                    self.log(f"early symbolization stopped: {_describe(e)}")
            if timeout == IDLE_POLL_S and now >= quiet_from:
                due = [t for t in (next_dump, next_guard, end_at, next_status) if t is not None]
                due += [job[2] for job in self._every]
                timeout = max(IDLE_POLL_S, min([now + min(QUIET_POLL_S, fill_s), *due]) - now)

    def _run_every(self, producer: Producer, now: float) -> None:
        """The every() functions that are due."""
        for job in self._every:
            if now >= job[2] and not self._failed:
                job[2] = now + job[0]
                try:
                    job[1](producer)
                except Exception as e:  # a watcher's bug must not end the recording
                    self._every.remove(job)
                    self.warn(f"live view stopped: {_describe(e)}")
                    break

    def _guardrail_hit(self, producer: Producer) -> bool:
        """Check heapscope's own limits; on a hit, final dumps and the targets run on unprofiled."""
        hit = self.guard.check()
        if not hit:
            return False
        try:
            producer.hit_guardrail(hit)
        except Exception as e:
            self._fail(e)
        self.warn(f"guardrail hit: {hit}; final dumps written, the targets run on unprofiled")
        return True

    def _publish(self, producer: Producer, now: float) -> None:
        """The figures so far for any thread (`progress`: one immutable object, swapped in), then
        the host's status function."""
        if not self._failed:
            with contextlib.suppress(Exception):
                self.progress = producer.stats()
        if self.status is not None:
            with contextlib.suppress(Exception):
                self.status(now)

    def _dumped(self) -> None:
        if self._failed:
            return
        for fn in self.on_dump:
            with contextlib.suppress(Exception):  # a pusher only queues; nothing of it may stop us
                fn(self.output)

    def _target_exited(self, producer: Producer, code: int) -> int:
        # A dump asked for now has nothing left to show, and record and live exit after the
        # close: SIGUSR1 ignored from here, so that a flood of it (each one a Python handler
        # between two bytecodes) no longer slows the final dump, symbolization and summary.
        if self.exits_after_close and signal.SIGUSR1 in self._restore:
            with contextlib.suppress(ValueError, OSError):
                sigmask.swap(signal.SIGUSR1, signal.SIG_IGN)
        # The target is gone: the sockets that reached EOF with it (children that exited
        # with it) end as exited now; the rest, the target's own if its EOF is late (the
        # client's pin outlives an exec, _exit or signal a while), in the end's finish().
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
