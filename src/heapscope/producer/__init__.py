"""The producer: the `heapscope record` side of the wire.

It accepts client connections (one per profiled process), hands each a
shared-memory ring, drains the rings through the C ingest loop
(`_ingest.Ingest`: record validation, sequence ordering, per-stack totals),
decodes the rare records (stacks, modules, heaps) in Python, and writes dumps
through the bookkeeping into the profile database.

May import: heapscope.bookkeeping, heapscope.store, heapscope.wire,
heapscope.model, heapscope.errors.
"""
