"""One recording (a session), from the target's start (or the attach) to the written profile.

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
a flag and wake the loop); `fresh_dump()`, from another thread, asks the
loop for a dump and waits until it is committed (an HTTP scrape);
`dump_now(reason)` dumps at once from the loop's own thread;
`status` is called every STATUS_EVERY_S from the loop, right after it
publishes `progress` (the producer's stats(): samples over every heap, live
bytes; an immutable object any thread may read); `on_dump` functions
after each committed continuous dump (a pusher queues it and returns);
`every(seconds, fn)` calls fn(producer) on the loop's thread (a live view's
snapshot of per-callsite totals: producer state is read there and nowhere
else); `watch(fd, fn)` makes the loop wake when fd is readable and call fn
(the pytest plugin's per-test windows). Every hook runs on the loop's thread
and must return at once: the producer is not thread-safe.

`on_close` functions end a host's part after the final dumps (the fleet
options --serve, --push, --label: heapscope.hosts.fleet.wire).

The Recording is one object, built in layers, one concern a module, each
layer calling only those under it (all of them run on the loop's thread and
share its state, so they are one class rather than objects that would pass
that state around). Five modules, not more: each one is a module import on
`record`'s fixed cost after the target's spawn (~0.13 ms each):

    core.py       RecordingOptions (what it is asked to do), SessionCore (the state, its
                  constants, how it fails: _fail), Summary and ProcessPeak (its end figures)
    requests.py   Requests, Windows: the hosts' hooks (dumps, stop, watch, every, fresh_dump,
                  per-process windows) and the loop's chores
    loop.py       Loop: poll, dump, guard, publish `progress`, the target's end
    teardown.py   Figures, Teardown: close(): final dumps, stats, symbolization, the summary's
                  figures (from the producer and the written profile), signals restored
    lifecycle.py  Recording: start(), attach(), and the with-block

Hosts (heapscope/hosts/, cli/record.py) read what the recording publishes
(`progress`, `summary`, WindowSnapshot), never the producer's state. What a
host needs of the layers below comes from here too: RecordConfig (what the
client is asked to do), ProducerStats (the type of `progress`), TOTALS_ROW and
THREAD_ROW (the rows of the totals a live view's `every` function reads), SERIES_ROW
(the memory-over-time points it draws), LIFETIME_ROW and its kinds LT_* (the lifetimes
and sizes it shows per stack) and
owned_dir() (a private directory like the recording's own, for a host's own
sockets: the pytest plugin's).

May import: heapscope.producer, heapscope.launch, heapscope.symbolize, heapscope.store,
heapscope.view (the summary's largest stacks and figures), heapscope.bookkeeping.rows (re-exported for the
hosts), heapscope.wire.handshake, heapscope.model,
heapscope.errors, heapscope.closing, heapscope.sigmask, heapscope.records, heapscope.which.
"""

from heapscope.bookkeeping.rows import (
    LIFETIME_ROW,
    LT_FREED,
    LT_HEAPTRACK,
    LT_HELD,
    LT_SIZE,
    LT_UNKNOWN,
    SERIES_ROW,
    THREAD_ROW,
    TOTALS_ROW,
)
from heapscope.producer.config import RecordConfig
from heapscope.producer.producer import ProducerStats
from heapscope.session.core import ProcessPeak, RecordingOptions, Summary, client_library, owned_dir
from heapscope.session.lifecycle import Recording
from heapscope.session.requests import WindowSnapshot

__all__ = ["LIFETIME_ROW", "LT_FREED", "LT_HEAPTRACK", "LT_HELD", "LT_SIZE", "LT_UNKNOWN", "SERIES_ROW",
           "THREAD_ROW", "TOTALS_ROW", "ProcessPeak", "ProducerStats", "RecordConfig", "Recording", "RecordingOptions",
           "Summary", "WindowSnapshot", "client_library", "owned_dir"]
