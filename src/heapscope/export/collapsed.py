"""Collapsed ("folded") stacks: one line `root;...;leaf value` per callsite, one view, one dump.

The format of flamegraph.pl and speedscope's importer (`^(.*) (\\d+)$`): a single
space, then an integer. Frame names cannot escape `;` or a newline, so those
become `:` and a space. With several processes each line starts with a frame
naming the process. Callsites whose value is zero are left out. The state is
each process's peak for the held views, its end for the allocated ones (--dump
chooses); object counts are de-sampled estimates (heapscope/estimate.py).
"""

from __future__ import annotations

from typing import BinaryIO

from heapscope.estimate import desampled_map
from heapscope.export._common import Frames, check_view, chosen_states, process_label, select_processes
from heapscope.export._sink import Sink
from heapscope.model import CallsiteId
from heapscope.store.reader import Profile

_CLEAN = str.maketrans({";": ":", "\n": " ", "\r": " "})


def clean(name: str) -> str:
    return name.translate(_CLEAN) or "?"


def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: str | int | None = None) -> None:
    check_view(view)
    processes = select_processes(profile, pid)
    frames = Frames(profile)
    sink = Sink(out)
    several = len(processes) > 1
    for p, st in chosen_states(profile, processes, dump, view):
        prefix = clean(process_label(p)) + ";" if several else ""
        for cs, v in desampled_map(st.values, st.interval).items():
            value = v.get(view)
            if value <= 0:
                continue
            stack = ";".join(clean(n) for n in frames.names(CallsiteId(cs))) or "[no frames]"
            sink.text(f"{prefix}{stack} {value}\n")
    sink.flush()
