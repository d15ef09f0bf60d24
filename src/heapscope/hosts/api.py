"""heapscope from Python: record a command without the command line.

    from heapscope import api

    with api.recording(["./build_index", "--big"], "prof.db") as rec:
        print("profiling pid", rec.pid)
        rec.dump()                   # optional: a dump of every process now
    print(rec.exit_status, rec.summary.sampled_bytes)

    summary = api.record(["./build_index"], "prof.db", interval=1)   # the same, to its end

`heapscope.api` is this module's public name. The command runs as
`heapscope record` would run it (its own stdin, stdout and stderr; every
process of its tree profiled), but the Recording (heapscope/session/) runs
on a thread of its own: the host's signal handlers are
left alone, and the block's body runs while the command does. Leaving the
block waits for the command to end (an exception in the block first ends
profiling: the command runs on unprofiled, and is still waited for).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from heapscope.session import ProducerStats, RecordConfig, Recording, RecordingOptions, Summary


class RunningRecording:
    """A command being recorded on a background thread; see `recording()`."""

    def __init__(self, rec: Recording) -> None:
        self._rec = rec
        self.pid = 0
        self.exit_status: int | None = None  # shell style: 128+N when killed by signal N
        self._started = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None

    @property
    def summary(self) -> Summary:
        """The recording's figures; complete once the block is left."""
        return self._rec.summary

    @property
    def progress(self) -> ProducerStats:
        """The figures so far (samples over every heap, sampled bytes live), as the loop last
        published them (every half second; final once the block is left)."""
        return self._rec.progress

    def dump(self, reason: str = "api") -> None:
        """A dump of every process, as soon as the recording's loop wakes."""
        self._rec.request_dump(reason)

    def stop(self) -> None:
        """End profiling now (final dumps); the command runs on and is still waited for."""
        self._rec.stop()

    def wait(self, timeout: float | None = None) -> int | None:
        """The command's exit status once it has ended and the profile is written; None on timeout."""
        self._done.wait(timeout)
        return self.exit_status if self._done.is_set() else None

    def _run(self, argv: list[str]) -> None:
        try:
            with self._rec:
                try:
                    self.pid = self._rec.start(argv)
                finally:
                    self._started.set()
                self.exit_status = self._rec.run_until_exit()
        except BaseException as e:  # handed to the caller's thread
            self._error = e
        finally:
            self._started.set()
            self._done.set()


@contextmanager
def recording(argv: Sequence[str], output: str | Path, *, interval: int = 4096, seed: int | None = None,
              force: bool = False, symbolize: bool = True, continuous_ms: int = 0) -> Iterator[RunningRecording]:
    """Record `argv` into `output` while the block runs; see the module's docstring.

    Bad options or a command that cannot start raise heapscope.errors
    (UsageError, TargetError) before the block runs.
    """
    config = RecordConfig(interval=interval, seed=seed)
    options = RecordingOptions(forward_signals=False, force=force, symbolize=symbolize,
                               continuous_ms=continuous_ms, command=" ".join(argv))
    running = RunningRecording(Recording(config, Path(output), options))
    thread = threading.Thread(target=running._run, args=(list(argv),), name="heapscope-recording", daemon=True)
    thread.start()
    running._started.wait()
    if running._error is not None and not running.pid:
        thread.join()
        raise running._error
    try:
        yield running
    except BaseException:
        running.stop()
        raise
    finally:
        thread.join()
    if running._error is not None:
        raise running._error


def record(argv: Sequence[str], output: str | Path, *, interval: int = 4096, seed: int | None = None,
           force: bool = False, symbolize: bool = True, continuous_ms: int = 0) -> Summary:
    """Record `argv` to its end; the summary (exit_status included)."""
    with recording(argv, output, interval=interval, seed=seed, force=force, symbolize=symbolize,
                   continuous_ms=continuous_ms) as rec:
        pass
    return rec.summary
