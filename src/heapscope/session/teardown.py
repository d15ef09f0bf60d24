"""The end of a recording: final dumps, stats, symbolization, summary, signals restored."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time

from heapscope.session.core import _describe
from heapscope.session.figures import Figures

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:

    pass



class Teardown(Figures):
    """The end: final dumps, the profile's last rows, symbolization, the summary, signals back."""

    def close(self) -> None:
        """Write what is left, symbolize, and let everything go; always safe to call."""
        self._ended = True
        self._release_waiters()
        try:
            self._chore(required_only=True)
            if self.child is not None and self.child.returncode is None:
                # An exception left the session early: the target still ends under us.
                self._end_profiling()
                self.summary.exit_status = self.child.exit_status()
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
                self._missing_figures()
            self.summary.elapsed_s = time.monotonic() - self.started
            self._close_hosts()
            self._restore_nofile()
            self._nofile = None
            if self._child_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._child_fd)
                self._child_fd = None
            # Last: a signal after the target's end (say SIGUSR1) must find our handler.
            self._uninstall_signals()

    def _close_hosts(self) -> None:
        """The hosts' ends (on_close): a server stopped, the final dumps (now symbolized) pushed."""
        hooks, self.on_close = self.on_close, []
        complete = self.writer is not None and self.output.exists() and not self._failed
        for fn in hooks:
            try:
                self.host_lines += fn(complete)
            except Exception as e:  # a host's bug: one line, the recording's end goes on
                self.host_lines.append(f"{getattr(fn, '__name__', 'a host')} ended badly: {_describe(e)}")

    def _write_end(self) -> None:
        producer, writer = self.producer, self.writer
        if producer is None or writer is None:
            return
        if not self._failed:
            try:
                # A started target: spawn to the exit seen (the loop wakes on its pidfd);
                # else the session, as before.
                end = self._exited if self._exited is not None else time.monotonic()
                begin = self._spawned if self._spawned is not None else self.started
                writer.set_metadata("target_wall_ns", int((end - begin) * 1e9))
                writer.add_stats(producer.global_stats())
                writer.add_stats(self._not_profiled_stats(producer))
                writer.add_stats(self._shallow_stats(producer))
                writer.add_stats(_own_usage())
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
                self._symbol_report = symbolizer.finish(writer)
            except Exception as e:
                self._fail(e)

    def _restore_nofile(self) -> None:
        """heapscope's limit back as it was (the target, spawned before the raise, kept it)."""
        if self._nofile is not None:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, self._nofile)

    def _uninstall_signals(self) -> None:
        # A command that only prints and exits from here (exits_after_close: record, live): a
        # signal that would kill it now must not put its own death in place of the target's
        # status (SIGTERM just after the target's exit ended record with -15 instead of 3;
        # SIGINT raised KeyboardInterrupt: 130), so what had no handler of its own before (the
        # default, Python's for SIGINT) is ignored.
        ending = self.exits_after_close
        defaults = (signal.SIG_DFL, signal.default_int_handler)
        for sig, handler in self._restore.items():
            with contextlib.suppress(ValueError, TypeError, OSError):
                signal.signal(sig, signal.SIG_IGN if ending and handler in defaults else handler)
        self._restore.clear()
        if self._old_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        self._wake_r.close()
        self._wake_w.close()


def _own_usage() -> list[tuple[str, int | None, str, str, int, str]]:
    """heapscope's own CPU time and peak RSS so far (this process: the producer, not the targets)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so it would report
    # the peak of whatever process started heapscope when that was bigger.
    from heapscope.producer.procfs import status_field

    return [
        ("producer_cpu_ns", None, "info", "producer", int((ru.ru_utime + ru.ru_stime) * 1e9),
         "CPU time of the heapscope process (producer, bookkeeping, writing), user + system, up to the final dumps"),
        ("producer_peak_rss_bytes", None, "info", "producer", status_field("self", "VmHWM") * 1024,
         "peak resident set of the heapscope process up to the final dumps"),
    ]
