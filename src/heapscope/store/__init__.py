"""The profile database (SQLite, Perfetto's table names): schema, writer, reader.

    schema.sql  the tables (which integer columns are u64, and how they are stored)
    values.py   integers to and from SQLite, converted once each way
    writer.py   ProfileWriter (record), SymbolWriter (symbolize, in place or live)
    reader.py   open_profile(): validation, then typed queries; the only way to read
    rows.py     the typed rows those queries return
    convert.py  many rows' values converted at once (a column at a time when plain)
    grouped.py  many rows read in C and grouped by process (_rows.c), the reader's views applied
    checks.py   the file checks before SQLite opens a profile; one error line for a failed read
    tree.py     the callsite tree as read, checked for cycles and depth (_callsites.c: its rows, in C)
    paths.py    a few call paths walked in SQL, without the callsite table (record's summary)
    peak_tops.py  each process's peak and largest callsites there, in SQL (record's summary)
    peaks_by_heap.py  each heap set's peaks from one read of the peak rows (the flamegraph's heaps)
    select.py   views, processes by pid, dumps by number: one error line per mistake
    series.py   memory over time per process, and the samples behind a range of it
    sql.py      `heapscope sql`: read-only SQL (no writes, no ATTACH, no VACUUM INTO)
    files.py    creating files safely and the overwrite policy
    labels.py   how a process is named (argv[0]'s link, a compiler's file), its arguments
    lifetimes.py  how long sampled allocations lived, and their sizes, per callsite

May import: heapscope.model, heapscope.errors, heapscope.records. Nothing here knows about the
wire or the producer.
"""
