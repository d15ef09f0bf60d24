"""The protocol between the client (C, in the target) and the producer: one definition, two mirrors.

    wire.h        the definition: the handshake, the shared ring's layout, every record's
                  struct and the framing; the client writes it, the producer's ring reader
                  (producer/ingest_core.c) and the bookkeeping's C read it
    handshake.py  the handshake's part in Python, with `struct` alone (record's start)
    codec.py      every layout as a `struct` format, record decoding, a ring writer for
                  tests; re-exports handshake.py's names

tests/unit/wire compares every size and offset here with the C compiler's.

May import: heapscope.records.
"""
