"""What hosts ask of a recording: dumps, stop, watches, periodic calls, per-process windows;
and the loop's chores."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable

from heapscope.errors import HeapscopeError
from heapscope.producer.producer import Producer
from heapscope.producer.session import remove_stale_dirs
from heapscope.records import Record
from heapscope.session.core import END_MODULES, FRESH_DUMP_TIMEOUT_S, SYMBOLIZE_MODULES, SessionCore, _describe, _Waiter

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from typing import Any

    from heapscope.model import Frame, Mapping
    from heapscope.producer.process import ProcessState
    from heapscope.producer.producer import Producer


class Requests(SessionCore):
    """What hosts ask of a recording (dumps, stop, watches, periodic calls) and the chores of its loop."""

    def _install_signal(self, sig: int, handler: Callable[[int, Any], None] | int) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # in-process recording from another thread: the host owns the signals
        old = signal.signal(sig, handler)
        self._restore.setdefault(sig, old)

    def _on_usr1(self, _sig: int, _frame: object) -> None:
        self.request_dump("signal")

    def _on_stop(self, _sig: int, _frame: object) -> None:
        self._stopping = True

    def request_dump(self, reason: str = "signal") -> None:
        """A dump of every process, by the loop, as soon as it wakes."""
        if not self._ended:
            self._dumps_requested.append(reason)
            self._wake()

    def watch(self, fd: int, fn: Callable[[], None] | None) -> None:
        """The loop also wakes when `fd` is readable, and then calls fn (None: no more).

        fn runs on the loop's thread after each wake-up (it reads fd without
        blocking, and may read the producer through caught_up() and window_snapshot()); an exception
        in it is its own affair, recording goes on.
        """
        if fn is None:
            self._watched.pop(fd, None)
        else:
            self._watched[fd] = fn

    def stop(self) -> None:
        """End the session: final dumps; attached targets are let go, a started one runs on."""
        self._stopping = True
        self._wake()

    def fresh_dump(self, timeout: float = FRESH_DUMP_TIMEOUT_S) -> None:
        """From another thread: a dump of every process by the loop, returned from once committed.

        Concurrent callers share the next dump. HeapscopeError when the
        recording is over or failed, or the dump did not come within `timeout`.
        """
        if not self.options.keep:
            raise HeapscopeError("this recording keeps no profile")
        waiter = _Waiter()
        with self._waiters_lock:
            if self._ended or self._failed or self.producer is None:
                raise HeapscopeError("the recording is over" if self._ended else "the recording is not running")
            self._waiters.append(waiter)
        self._wake()
        if not waiter.event.wait(timeout):
            with self._waiters_lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            raise HeapscopeError(f"no dump within {timeout:.0f} s (the recording is busy)")
        if self._failed:
            raise HeapscopeError("the recording failed; see its error line")
        if not waiter.dumped:
            raise HeapscopeError("the recording is over")

    def every(self, seconds: float, fn: Callable[[Producer], None]) -> None:
        """Call fn(producer) on the loop's thread every `seconds` (first at once); it must return at once."""
        self._every.append([seconds, fn, 0.0])

    def _answer_waiters(self) -> None:
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        if not waiters:
            return
        self.dump_now("signal")
        for w in waiters:
            w.dumped = True
            w.event.set()

    def _release_waiters(self) -> None:
        """The loop is over: nobody waits for a dump that will not come."""
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.event.set()

    def dump_now(self, reason: str) -> None:
        """A dump of every process now; only from the loop's thread (or between start and run)."""
        if self.producer is None or self._failed or self._ended:
            return
        self._write_metadata()
        try:
            self.producer.dump_all(reason)
        except Exception as e:
            self._fail(e)

    def _write_metadata(self) -> None:
        """The profile's metadata, once: a chore, or before a dump (a scrape reads the profile)."""
        metadata, self._metadata = self._metadata, ()
        if not metadata or self.writer is None or self._failed:
            return
        try:
            for key, value in metadata:
                self.writer.set_metadata(key, value)
            self.writer.commit()
        except Exception as e:  # the profile cannot be written: as a failure of the loop's
            self._fail(e)

    def _remove_stale_dirs(self) -> None:
        with contextlib.suppress(OSError):
            removed = remove_stale_dirs()
            if removed:
                self.log(f"removed {removed} session director{'ies' if removed > 1 else 'y'} of dead runs")

    def _warm_up(self) -> None:
        """Queue the imports the end of the recording will need, for the loop's idle time."""
        if not self.options.keep:
            return  # no profile: the end reads nothing back
        modules = (END_MODULES if self.options.peaks else ()) + (SYMBOLIZE_MODULES if self.options.symbolize else ())
        self._chores += [(self._importer(m), False) for m in modules]

    def _importer(self, module: str) -> Callable[[], None]:
        def import_module() -> None:
            # Only what the end will use: a recording without a sample neither symbolizes nor
            # reads its peaks back; until the first one, the import waits its turn again.
            if self.producer is not None and self.producer.stats().samples == 0:
                self._chores.append((import_module, False))
                return
            __import__(module)  # importlib.import_module, without importing importlib

        import_module.__name__ = f"import {module}"
        return import_module

    def _chore(self, required_only: bool = False) -> None:
        """Do the next chore (every required one left, with `required_only`); a failure is only logged."""
        while self._chores:
            fn, required = self._chores.pop(0)
            if required_only and not required:
                continue
            try:
                fn()
            except Exception as e:  # a chore is housekeeping or a head start: never a reason to stop
                self.log(f"{getattr(fn, '__name__', 'chore')} failed: {_describe(e)}")
            if not required_only:
                return


class WindowSnapshot(Record, frozen=True):
    """One process's figures since its window began (Recording.window_snapshot; the
    producer's window(): malloc's heap and python.pymalloc, summed at their joint peak).
    Its methods read the producer: only on the loop's thread (a watch() function)."""

    peak: int  # highest sampled unreleased bytes in the window, above its start
    leak: int  # sampled unreleased bytes at the snapshot, above the window's start
    pid: int
    _producer: Producer
    _process: ProcessState

    def window_rows(self) -> list[tuple[int, ...]]:
        """The window's rows by callsite or stack (bookkeeping/rows.py, WINDOW_ROW), as of now."""
        return self._producer.window_rows(self._process)

    def stack_frame_ids(self, stack_id: int) -> list[int] | None:
        """The frame ids of a row's stack not resolved to a callsite, innermost first; None
        when the stack has not been received yet."""
        return self._producer.stack_frame_ids(self._process, stack_id)


class Windows(Requests):
    """Per-process windows and the frame tables, for a host on the loop's thread (the pytest plugin)."""

    def caught_up(self, pid: int, resolve: bool = True) -> bool:
        """Every record `pid`'s ring holds handled (and its stacks resolved to callsites);
        False if it is not profiled (or profiling failed). Only from the loop's thread."""
        producer = self.producer
        if producer is None or self._failed:
            return False
        p = producer.process_of(pid)
        if p is None:
            return False
        producer.catch_up(p, resolve)
        return True

    def window_snapshot(self, pid: int, *, restart: bool = False, keep_peak: bool = False) -> WindowSnapshot | None:
        """From the loop's thread: pid's figures since its window began, every record of its
        ring handled (stacks not resolved: cheap). `restart`: a new window begins after the
        snapshot; with `keep_peak`, a closing window that holds the process's peak is resolved
        first, so that the profile keeps its rows.
        None when pid is not profiled."""
        producer = self.producer
        if producer is None or self._failed:
            return None
        p = producer.process_of(pid)
        if p is None:
            return None
        producer.catch_up(p, resolve=False)
        peak, leak = producer.window(p, restart, keep_peak)
        return WindowSnapshot(peak, leak, p.info.pid, producer, p)

    def callsite_paths(self, first: int) -> list[tuple[int, int]]:
        """(parent callsite or 0, frame id) of every callsite from id `first` on, in id order."""
        return self.producer.callsite_paths(first) if self.producer is not None else []

    def frames_since(self, n: int) -> list[Frame]:
        """The frames interned after the first `n` (ids dense from 1)."""
        return self.producer.frames_since(n) if self.producer is not None else []

    def mappings_since(self, n: int) -> list[Mapping]:
        """The mappings interned after the first `n` (ids dense from 1)."""
        return self.producer.mappings_since(n) if self.producer is not None else []
