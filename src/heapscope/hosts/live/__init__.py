"""`heapscope live`: a running program's heap in the terminal while it is recorded.

    snapshot   Snapshotter: once a second, on the recording loop's thread, the
               per-callsite totals of every process (the heap tracker's totals(),
               read, never changed; counts estimated as the report's), published as
               one immutable HeapSnapshot
    names      Namer: function names of the frames on screen, from llvm-symbolizer
               on its own thread (the profile itself is symbolized at the end, as usual)
    app        LiveApp: the Textual view; reads only published snapshots, asks the
               recording for dumps through Recording.fresh_dump() from worker threads

The recording (heapscope.session.Recording) runs its loop in a thread of
its own; the view never touches producer state. Threads: every sample carries
its thread's id (wire.h struct hs_malloc), the recording's trackers keep
totals per (stack, thread) for the view (RecordConfig.threads), and the view
filters its table on one thread (`t`); the memory graph stays per process.
Threads are live-only: the profile has no place for them (Perfetto's
heap_profile_allocation has none either).
"""
