"""Many machines: profiles leave the host while (or after) they are recorded.

    pprof_source   gzip pprof bytes of one dump, Go's heap-profile names, pid/executable labels
    push           Pusher: a bounded queue and a worker that sends to Pyroscope (HTTP) or Parca (gRPC)
    clickhouse     a ClickHouse table of samples, written through clickhouse-connect or chDB

Serving while recording is a host (heapscope.hosts.serve; hosts/fleet.py wires
it and these pushers into a recording). Reads profiles only through
heapscope.store.reader and builds pprof with heapscope.export.pprof; imports
nothing of the producer or the session. Network clients (grpcio,
clickhouse-connect; chdb) are optional extras (`pip install heapscope[fleet]`, `[clickhouse]`),
imported only when used.

May import: heapscope.export (pprof, and its _common and _proto), heapscope.store,
heapscope.model, heapscope.errors, heapscope.records, heapscope.units.
"""
