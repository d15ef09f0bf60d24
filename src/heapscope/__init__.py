"""heapscope: a sampling native-heap profiler for Linux.

Pipeline (one folder a part; imports point one way: cli -> hosts ->
session -> producer -> bookkeeping -> wire, producer -> store, session -> view |
symbolize -> store, hosts -> fleet -> export -> store, cli -> importer -> store;
every part may use the top-level modules (model, errors, slots, ...), which sit
under all of them; each part's docstring lists what it may import, and
tests/test_architecture.py checks all of this against the code; client/ is C
only; docs/ beside src/ explains each part):

    client/      LD_PRELOAD library inside the target: hooks, sampler, unwinder
    wire/        the protocol between client and producer (wire.h + mirror)
    producer/    handshakes, per-process state, the ring reader (C) that moves
                 records out of each shared ring; the Producer's stats() and
                 window() are what the session reads
    session/     one recording: start or attach, the loop, dumps, guardrails,
                 teardown and the summary (the Recording, one concern a module)
    hosts/       what drives a recording and reads what it publishes: the API
                 (heapscope.api), the pytest plugin, the live view, the pprof
                 server and pushers (--serve, --push); of the layers below
                 they import only the session (it re-exports what they need)
    bookkeeping/ all the state after the ring, in one C extension: the heap
                 tracker (sequence order, live allocations, totals per
                 callsite, the peak, dump rows), the stacks and their resolve,
                 the callsite trie; frames and dumps in Python
    store/       the profile database (SQLite, Perfetto's names)
    symbolize/   function names from ELF files
    view/        reports built from a profile
    export/      a profile in other tools' formats (pprof, Perfetto, Chrome JSON, ...)
    importer/    profiles other tools wrote (Perfetto heapprofd traces), into the database
    fleet/       profiles that leave the host: pprof bytes, Pyroscope/Parca pushers, ClickHouse
    cli/         the command line
    include/     heapscope.h: the custom heap API for C programs (`heapscope --include`)

The path of one sampled allocation: the client's malloc hook samples it,
unwinds, and writes a MALLOC record (its stack id, and a STACK record the first
time) into the process's shared ring (wire/wire.h). The producer's ring reader
(producer/ingest_core.c) checks the framing and hands the MALLOC to that
process's heap tracker (bookkeeping/tracker.c), which applies it in sequence
order to its live table and its stack's totals; the STACK record is kept by
the process's resolver (bookkeeping/resolver.c). While the process runs and
at each dump the resolver turns new stacks into callsites of the trie
(bookkeeping/trie.c), naming each new frame through bookkeeping/frames.py,
and tells the tracker each stack's callsite once; the producer writes the
tracker's rows per callsite (what changed since the last dump; at the final
one also the peak) through store/writer.py.

The package's own attribute is the labels API (`heapscope.label`, labels.py), imported on
first use. May import: heapscope.labels.
"""

__version__ = "0.1.0"
__all__ = ["__version__", "label"]

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from heapscope.labels import label as label


def __getattr__(name: str) -> object:
    # heapscope.label (labels.py), imported on first use: `import heapscope` stays free.
    if name == "label":
        from heapscope.labels import label

        globals()["label"] = label  # found directly from now on, without this call
        return label
    raise AttributeError(f"module 'heapscope' has no attribute {name!r}")
