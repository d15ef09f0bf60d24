"""The producer: the `heapscope record` side of the wire.

It accepts client connections (one per profiled process), hands each a
shared-memory ring, drains the rings through the C ring reader
(`_ingest.Ingest`, ingest_core.c: framing checks, record validation), which
hands MALLOC and FREE to the process's heap tracker (`Ingest.tracker`,
bookkeeping/tracker.c) and the rare records (stacks, modules, heaps) to
Python, and writes dumps through the bookkeeping into the profile database.
The extension `_ingest` is built here from both folders' C files
(meson.build; flags in _ingest.flags).

May import: heapscope.bookkeeping, heapscope.store, heapscope.wire,
heapscope.model, heapscope.errors.
"""
