"""The producer: the `heapscope record` side of the wire.

It accepts client connections (one per profiled process), hands each a
shared-memory ring, drains the rings through the C ring reader
(`_ingest.Ingest`, ingest_core.c: framing checks, record validation), which
hands MALLOC and FREE to the process's heap tracker (`Ingest.tracker`) and
STACK records to its resolver (`Ingest.resolver`), both objects of
heapscope.bookkeeping._native, and the other rare records (modules, heaps,
Python code objects) to Python, and writes dumps through the bookkeeping
into the profile database. The extension `_ingest` is built from
ingest_core.c and the bookkeeping's C core (meson.build; the flags are
bookkeeping/native.flags).

May import: heapscope.bookkeeping, heapscope.store.writer, heapscope.wire,
heapscope.heaps (a heap name's rule), heapscope.model, heapscope.errors, heapscope.records,
heapscope.elf (attaching: the target's loader and malloc).
"""
