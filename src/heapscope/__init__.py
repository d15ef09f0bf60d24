"""heapscope: a sampling native-heap profiler for Linux.

Pipeline (one folder a part; imports point one way, cli -> views -> store ->
bookkeeping -> wire; client/ is C only):

    client/      LD_PRELOAD library inside the target: hooks, sampler, unwinder
    wire/        the protocol between client and producer (wire.h + mirror)
    producer/    `heapscope record`'s loop: handshakes, per-process state, C ingest
    bookkeeping/ frames, callsite trie, dumps
    store/       the profile database (SQLite, Perfetto's names)
    symbolize/   function names from ELF files
    view/        reports built from a profile
    cli/         the command line
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
