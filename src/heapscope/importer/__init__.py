"""Reading profiles that other tools wrote into heapscope's profile database.

heapprofd.py: Perfetto traces with heapprofd ProfilePackets (`.pftrace`), read by
tracefile.py (the file, gunzipped and within an inflate budget, a packet at a time).

May import: heapscope.store.writer, heapscope.model, heapscope.errors, heapscope.records, heapscope.store.names,
heapscope.units.
"""
