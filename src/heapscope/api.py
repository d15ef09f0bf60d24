"""heapscope from Python: the public name of heapscope.hosts.api (see it for the usage).

    from heapscope import api

    with api.recording(["./build_index", "--big"], "prof.db") as rec:
        ...

May import: heapscope.hosts.api.
"""

from heapscope.hosts.api import RunningRecording, record, recording

__all__ = ["RunningRecording", "record", "recording"]
