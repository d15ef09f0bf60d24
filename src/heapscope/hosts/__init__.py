"""What drives a recording (heapscope.session): each reads only what the recording publishes.

    api            heapscope.api: record a command from Python, on a thread of its own
    pytest_plugin  `pytest --heapscope`: per-test peak and leak windows (the pytest11 entry point)
    live/          `heapscope live`: the terminal view, its snapshots and its names
    serve          PprofServer: Go's /debug/pprof/heap and /allocs over HTTP (--serve)

The command line's `record` (cli/record.py) is the fifth host: it prints the
recording's status line and summary. Imports point down: a host imports the
session and what it publishes (never the producer or the bookkeeping beneath
it), never the session a host.

May import: heapscope.session (what a host needs of the layers below it too: the recording's
config, its stats, the live view's totals rows, the pytest plugin's private directory),
heapscope.fleet, heapscope.symbolize, heapscope.view (the live view's lifetime figures, the
report's functions), heapscope.estimate, heapscope.store, heapscope.model,
heapscope.errors, heapscope.records, heapscope.units.
"""
