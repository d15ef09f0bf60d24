"""Bookkeeping: from raw stacks and per-stack totals to Perfetto's data model.

    client stack (pcs, leaf first) ──► frames ──► callsite trie ──► dumps
        per process, by stack id      interned    global, ids       per process,
                                      by pc       never reused      deltas of
                                                                    cumulative totals

A worked example. Process 1 defines stack 0xA = [f+4, main+9] and stack
0xB = [g+2, main+9]. The frames (main, f, g) are interned; the trie gets
callsites 1 = main, 2 = main→f, 3 = main→g. The C ingest reports cumulative
totals per stack id; a dump maps them onto callsites and writes what changed
since the previous dump of that process: a positive row for new allocations
and a negative row for new frees. Summing rows over ts <= T gives the
unreleased bytes at T (heapprofd's `space` view).

May import: heapscope.model, heapscope.wire.codec.
"""
