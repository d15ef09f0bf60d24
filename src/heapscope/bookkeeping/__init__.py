"""Bookkeeping: from sampled mallocs and frees to Perfetto's data model.

    MALLOC/FREE + seq ──► heap tracker (C) ──────────────► dump rows
      from the producer's   sequence order, live table,      per callsite: what
      ring reader           totals per callsite, the peak    changed since the last
                                  ▲                          dump; the peak's state
    STACK record ──► resolver (C) ──► callsite trie (C) ─┘
      per process,   kept until       global, ids never reused;
      by stack id    resolved; new    each stack's callsite told to the tracker once
                     frames named by frames.py

    tracker.h/.c         the heap tracker of one process: its C API and the
                         row structs it hands to Python
    tracker_order.h/.c   ops waiting for their sequence number
    tracker_tables.h/.c  the live table (addr -> allocation), stack id -> totals
    resolver.h/.c        one process's stacks, kept and resolved to callsites
    trie.h/.c            the callsite trie
    hashmap.h/.c         the resolver's and the trie's map and array
    pylines.h/.c         CPython line tables (pylines.py reads them through it)
    native.h, _native.c  the extension heapscope.bookkeeping._native: Tracker,
                         Trie, Resolver, addr2line (_native.pyi)
    native_rows.h/.c     the tracker's lifetime and sample rows as the lists the
                         store's writer binds
    rows.py              the row structs' Python mirror (one definition each)
    frames.py            frames and mappings, interned; the resolver's namer
    dump.py              per-process glue: resolve, then the tracker's rows

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

The C files are built into heapscope.bookkeeping._native (meson.build; flags
in native.flags). The producer's ring reader (heapscope.producer._ingest)
makes a Tracker and a Resolver per process and feeds them from its ring: it
compiles the same tracker and resolver C into its own extension (native.h
says why), and nothing here imports the producer. The C headers include
downwards only: resolver.h -> tracker.h, trie.h -> hashmap.h; wire.h.

May import: heapscope.model, heapscope.wire.codec, heapscope.records.
"""
