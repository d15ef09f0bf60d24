"""The profile database (SQLite, Perfetto's table names): schema, writer, reader.

May import: heapscope.model, heapscope.errors. Nothing here knows about the
wire or the producer.
"""
