"""heapscope: a sampling native-heap profiler for Linux.

Pipeline (one folder a part; imports point one way: cli -> producer ->
bookkeeping -> wire, producer -> store, cli -> view | export | symbolize ->
store; every part may use model and errors; client/ is C only; docs/ beside
src/ explains each part):

    client/      LD_PRELOAD library inside the target: hooks, sampler, unwinder
    wire/        the protocol between client and producer (wire.h + mirror)
    producer/    `heapscope record`'s loop: handshakes, per-process state, C ingest
    bookkeeping/ frames, callsite trie, dumps
    store/       the profile database (SQLite, Perfetto's names)
    symbolize/   function names from ELF files
    view/        reports built from a profile
    export/      a profile in other tools' formats (pprof, Perfetto, Chrome JSON, ...)
    cli/         the command line
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
