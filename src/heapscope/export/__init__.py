"""Exports of a profile to the formats other tools read.

One module per format, each with `export(profile, out, *, view, pid, dump) -> None`
that writes to the binary file object `out` as it goes (nothing is built whole
in memory). FORMATS is the one table the CLI reads; modules are imported only
when their format is used, so `heapscope --help` stays light.

May import: heapscope.store, heapscope.estimate, heapscope.model, heapscope.errors, heapscope.records.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import BinaryIO

from heapscope.records import Record
from heapscope.store.reader import Profile


class ExportFormat(Record, frozen=True):
    name: str  # the --format value
    module: str  # module under heapscope.export
    suffix: str  # default output file suffix
    help: str

    def exporter(self) -> Callable[..., None]:
        mod = importlib.import_module(f"heapscope.export.{self.module}")
        fn: Callable[..., None] = mod.export
        return fn


FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat("pprof", "pprof", ".pb.gz",
                 "gzipped pprof profile.proto (go tool pprof, speedscope); one dump, all four views"),
    ExportFormat("perfetto", "perfetto", ".pftrace",
                 "Perfetto trace with heapprofd ProfilePackets (ui.perfetto.dev, trace_processor); every dump"),
    ExportFormat("chrome-json", "chrome_json", ".json",
                 "Chrome trace JSON with memory-infra heaps_v2 dumps (chrome://tracing); every dump"),
    ExportFormat("speedscope", "speedscope", ".speedscope.json",
                 "speedscope JSON, one profile per view (and per process); one dump"),
    ExportFormat("otlp", "otlp", ".otlp",
                 "OpenTelemetry OTLP profiles (ProfilesData protobuf, proto v1.10.0), four sample types per"
                 " process state; needs heapscope[otlp]"),
    ExportFormat("collapsed", "collapsed", ".collapsed",
                 "collapsed stacks `root;...;leaf value`, one view, one dump (flamegraph.pl, speedscope)"),
)}


def export(fmt: str, profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: int | None = None) -> None:
    """Write `profile` to `out` in format `fmt` (a FORMATS key)."""
    FORMATS[fmt].exporter()(profile, out, view=view, pid=pid, dump=dump)
