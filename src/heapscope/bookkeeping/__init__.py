"""Bookkeeping: from sampled mallocs and frees to Perfetto's data model.

    MALLOC/FREE + seq ──► heap tracker (C) ──────────────► dump rows
      from the producer's   sequence order, live table,      per callsite: what
      ring reader           totals per callsite, the peak    changed since the last
                                  ▲                          dump; the peak's state
    client stack (pcs) ──► frames ──► callsite trie ─┘
      per process,         interned   global, ids never reused;
      by stack id          by pc      each stack's callsite told to the tracker once

    tracker.h/.c         the heap tracker of one process: its C API and the
                         row structs it hands to Python
    tracker_order.h/.c   ops waiting for their sequence number
    tracker_tables.h/.c  the live table (addr -> allocation), stack id -> totals
    rows.py              the row structs' Python mirror (one definition each)
    frames.py, trie.py   frames and mappings; the callsite trie
    dump.py              per-process glue: stacks -> callsites -> tracker rows

A worked example. Process 1 defines stack 0xA = [f+4, main+9] and stack
0xB = [g+2, main+9]. The frames (main, f, g) are interned; the trie gets
callsites 1 = main, 2 = main→f, 3 = main→g. The tracker books each malloc
and free under its stack until the stack's callsite is known, then under the
callsite (stacks of one callsite share its totals). A dump writes what changed
since the previous dump of that process: a positive row for new allocations
and a negative row for new frees. Summing rows over ts <= T gives the
unreleased bytes at T (heapprofd's `space` view). The tracker also keeps the
process's peak of sampled unreleased bytes (heapprofd's dump_at_max state):
per callsite, what was unreleased and what had been allocated at that moment.

The C files are built into heapscope.producer._ingest (producer/meson.build),
whose `Tracker` type is their Python face.

May import: heapscope.model, heapscope.wire.codec.
"""
