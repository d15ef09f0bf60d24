"""`heapscope live`: a running program's heap in the terminal while it is recorded.

    snapshot   Snapshotter: once a second, on the recording loop's thread, the
               per-callsite totals of every process (the heap tracker's totals(),
               read, never changed), published as one immutable HeapSnapshot
    names      Namer: function names of the frames on screen, from llvm-symbolizer
               on its own thread (the profile itself is symbolized at the end, as usual)
    app        LiveApp: the Textual view; reads only published snapshots, asks the
               recording for dumps through Recording.fresh_dump() from worker threads

The recording (heapscope.recording.Recording) runs its loop in a thread of
its own; the view never touches producer state. Threads: the client does not
record thread ids, so the view has no thread filter and says so.
"""
