"""OTLP profiles export: an `opentelemetry.proto.profiles.v1development.ProfilesData` (protobuf).

Written with the classes the `opentelemetry-proto` package generates (the
`[otlp]` extra), at the schema of OTLP proto v1.10.0 (opentelemetry-proto
1.43-1.45 on PyPI). The profiles signal is alpha and each release changed it
(v1.10 renumbered Sample's fields), so `messages()` refuses a package of
another schema rather than write bytes a collector would misread.

Layout (docs/exports.md, "OTLP"):

- one ResourceProfiles per process, its Resource holding the process's
  semantic-convention attributes (process.pid, process.parent_pid,
  process.executable.name/.path, process.command_line); one ScopeProfiles
  (scope `heapscope`, the recording's version);
- per state of the process (default: its peak for space/objects, its end
  for the alloc views, as pprof; `dump` chooses one, "all" gives every
  dump) four Profiles with ONE sample type each: the chosen view's first
  (profiles[0] is what viewers open), then alloc_space/bytes,
  alloc_objects/count, inuse_space/bytes, inuse_objects/count, less the
  first; period_type space/bytes, period = the sampling interval;
  time_unix_nano the state's wall-clock time, duration 0 (a snapshot: the
  alloc types are totals since the process started, as in Go's heap profile);
- one ProfilesDictionary shared by all: index 0 of every table the null
  entry; a Mapping per mapped file with its GNU build id as the attribute
  `process.executable.build_id.gnu`; a Location per frame with its lines
  (inlined functions first, the caller last, as pprof) and the attribute
  `profile.frame.type` (`cpython` for Python frames, else `native`); a Stack
  per call path, leaf first;
- a Sample per callsite with a non-zero value of the Profile's type:
  `values` [the de-sampled estimate], no timestamps (the Profile's time is
  the sample's). Sample attributes: `heap` (as pprof's label) when the
  profile has several heaps; allocation labels go there too, a sample per
  (callsite, label set) and one for the rest (docs/labels.md).

Unlike the pprof export this builds the message whole before writing it:
the generated classes have no streaming writer (a profile of 100k callsites
is a few tens of MB in memory, once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

from heapscope.errors import UsageError
from heapscope.estimate import desampled
from heapscope.export._common import (
    Frames,
    LabelParts,
    check_view,
    chosen_states,
    interval_of,
    select_processes,
    wall_clock,
)
from heapscope.model import HEAP_NAME, CallsiteId, FrameId, MappingId
from heapscope.store.reader import Process, Profile, mapping_basename
from heapscope.store.select import ALL_HEAPS, State, heap_names, process_state, select_heap

#: The OTLP proto release whose schema this module writes (the README says it too).
OTLP_PROTO_VERSION = "1.10.0"
#: `pip install` line for the messages.
INSTALL = "pip install 'heapscope[otlp]'"

#: Go's heap sample types, in the order written after the chosen view's.
SAMPLE_TYPES = (("alloc_space", "bytes"), ("alloc_objects", "count"),
                ("inuse_space", "bytes"), ("inuse_objects", "count"))
#: The store's view behind each sample type.
TYPE_VIEW = {"alloc_space": "alloc_space", "alloc_objects": "alloc_objects",
             "inuse_space": "space", "inuse_objects": "objects"}
VIEW_TYPE = {v: t for t, v in TYPE_VIEW.items()}

_U64 = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
FRAME_TYPE = "profile.frame.type"  # semantic conventions: the interpreter or compiler of a frame
BUILD_ID = "process.executable.build_id.gnu"  # hex, from .note.gnu.build-id


def _text(s: str) -> str:
    """`s` as protobuf can encode it: lone surrogates (bytes that were not UTF-8, decoded with
    surrogateescape upstream) become U+FFFD, where pprof's own encoder writes the raw bytes."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return s


def _i64(n: int) -> int:
    """An int64 field's value: a corrupt profile's out-of-range figure is clamped, not an exception."""
    return min(max(n, _I64_MIN), _I64_MAX)


def messages() -> tuple[Any, Any, Any, Any]:
    """The generated modules (profiles, common, resource, collector service) of the installed
    opentelemetry-proto; UsageError when it is missing or writes another schema than ours."""
    try:
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.profiles.v1development import profiles_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
    except ImportError as e:
        raise UsageError(f"OTLP profiles need the opentelemetry-proto package: {INSTALL}") from e
    # v1.10.0's shape: Sample.values is field 4 (it was 2 up to v1.9), and string values
    # may point into the dictionary. Another shape would be misread by a v1.10 collector.
    sample = profiles_pb2.Sample.DESCRIPTOR.fields_by_name
    if ("values" not in sample or sample["values"].number != 4
            or "string_value_strindex" not in common_pb2.AnyValue.DESCRIPTOR.fields_by_name):
        raise UsageError(f"the installed opentelemetry-proto is not of OTLP proto v{OTLP_PROTO_VERSION},"
                         f" the schema heapscope writes: {INSTALL}")
    return profiles_pb2, common_pb2, resource_pb2, profiles_service_pb2


class _Dictionary:
    """The ProfilesDictionary being filled: each table interned, index 0 the null entry."""

    def __init__(self, pb: Any, common: Any, msg: Any, profile: Profile) -> None:
        self.pb, self.common = pb, common
        self.msg = d = msg
        d.mapping_table.add()
        d.location_table.add()
        d.function_table.add()
        d.link_table.add(trace_id=bytes(16), span_id=bytes(8))  # zero ids of the lengths codecs expect
        d.string_table.append("")
        d.attribute_table.add()
        d.stack_table.add()
        self._strings: dict[str, int] = {"": 0}
        self._attrs: dict[tuple[str, str | int], int] = {}
        self._functions: dict[tuple[str, str], int] = {}
        self._locations: dict[FrameId, int] = {}
        self._mappings: dict[int, tuple[int, int]] = {}  # stored id -> (index, runtime address of rel_pc 0)
        self._stacks: dict[CallsiteId, int] = {}
        self.frames = Frames(profile)
        self.python = profile.python_frames()
        self.stored_mappings = {m.id: m for m in profile.mappings()}

    def string(self, s: str) -> int:
        i = self._strings.get(s)
        if i is None:
            i = self._strings[s] = len(self.msg.string_table)
            self.msg.string_table.append(_text(s))
        return i

    def attribute(self, key: str, value: str | int) -> int:
        k = (key, value)
        i = self._attrs.get(k)
        if i is None:
            i = self._attrs[k] = len(self.msg.attribute_table)
            v = (self.common.AnyValue(int_value=_i64(value)) if isinstance(value, int)
                 else self.common.AnyValue(string_value=_text(value)))
            self.msg.attribute_table.add(key_strindex=self.string(key), value=v)
        return i

    def mapping(self, stored: int) -> tuple[int, int]:
        got = self._mappings.get(stored)
        if got is None:
            m = self.stored_mappings.get(MappingId(stored))
            if m is None or (m.start == 0 and m.end == 0):
                got = (0, 0)  # no code behind it (Python's files, unknown pcs): a location without mapping
            else:
                attrs = [self.attribute(BUILD_ID, m.build_id)] if m.build_id else []
                self.msg.mapping_table.add(memory_start=m.start, memory_limit=m.end, file_offset=m.exact_offset,
                                           filename_strindex=self.string(m.name), attribute_indices=attrs)
                got = (len(self.msg.mapping_table) - 1, m.start - m.exact_offset - m.load_bias)
            self._mappings[stored] = got
        return got

    def function(self, name: str, file: str) -> int:
        k = (name, file)
        i = self._functions.get(k)
        if i is None:
            i = self._functions[k] = len(self.msg.function_table)
            # No system name: the store keeps demangled names only, and Python has none.
            self.msg.function_table.add(name_strindex=self.string(name), filename_strindex=self.string(file))
        return i

    def location(self, fid: FrameId) -> int:
        i = self._locations.get(fid)
        if i is None:
            f = self.frames
            info = f.info.get(fid)
            python = fid in self.python
            loc = self.pb.Location(attribute_indices=[self.attribute(FRAME_TYPE, "cpython" if python else "native")])
            if info is not None and not python:
                # As pprof's: rel_pc is already inside the call instruction, no further adjustment.
                loc.mapping_index, base = self.mapping(f.mapping.get(fid, 0))
                loc.address = (info.rel_pc + base) & _U64 if loc.mapping_index else 0  # wraps as a CPU would
            if info is not None and (info.name or fid in f.symbols):
                for line in reversed(f.chain(fid)):  # inlined functions first, their caller last
                    loc.lines.add(function_index=self.function(line.name, line.file), line=_i64(line.line))
            self.msg.location_table.append(loc)
            i = self._locations[fid] = len(self.msg.location_table) - 1
        return i

    def stack(self, cs: CallsiteId) -> int:
        i = self._stacks.get(cs)
        if i is None:
            locs = [self.location(fid) for fid in reversed(self.frames.path(cs))]  # leaf first
            self.msg.stack_table.add(location_indices=locs)
            i = self._stacks[cs] = len(self.msg.stack_table) - 1
        return i


def _states(profile: Profile, processes: list[Process], dump: str | int | None,
            view: str) -> list[tuple[Process, State]]:
    """Each process with its chosen state, or (dump "all") with every dump of it, in time order."""
    if dump != "all":
        return chosen_states(profile, processes, dump, view)
    out: list[tuple[Process, State]] = []
    for p in processes:
        for n in range(1, len(profile.dumps(p.info.upid)) + 1):
            st = process_state(profile, p, n, view)
            if st is not None:
                out.append((p, st))
    return out


def _resource_attributes(p: Process) -> list[tuple[str, str | int]]:
    """The process as OpenTelemetry's semantic conventions name it (process.*)."""
    info = p.info
    exe = info.exe or info.name
    attrs: list[tuple[str, str | int]] = [("process.pid", info.pid)]
    if info.ppid > 0:
        attrs.append(("process.parent_pid", info.ppid))
    if exe:
        attrs.append(("process.executable.name", mapping_basename(exe)))
    if info.exe:
        attrs.append(("process.executable.path", info.exe))
    if info.cmdline:
        attrs.append(("process.command_line", info.cmdline))
    return attrs


def _sample_attributes(d: _Dictionary, heap: str) -> list[int]:
    """The attributes every sample of one (process, state, heap) carries; a sample's allocation
    labels are added to them, one dictionary attribute per key and value, as pprof's Sample.label."""
    return [d.attribute("heap", heap)] if heap else []


def build(profile: Profile, *, view: str = "space", pid: int | None = None, dump: str | int | None = None,
          heaps: Sequence[str] | None = None, process: Process | None = None) -> Any:
    """The ProfilesData message (see the module docstring). `heaps` (--heap all or A+B): each heap
    in turn, its samples carrying its name; `process`: that one only (a pid may name several)."""
    pb, common, _resource, _service = messages()
    check_view(view)
    processes = [process] if process is not None else select_processes(profile, pid)
    labelled = len(heap_names(profile)) > 1  # several heaps: every sample says its heap
    chosen: list[tuple[Process, State, str]] = []
    if heaps:
        for h in heaps:
            select_heap(profile, h)
            chosen += [(p, st, h) for p, st in _states(profile, processes, dump, view)]
        select_heap(profile, ALL_HEAPS)
    else:
        for p, st in _states(profile, processes, dump, view):
            names = {x.heap_name for x in profile.dumps(p.info.upid)}
            chosen.append((p, st, next(iter(names)) if len(names) == 1 else ""))
    data = pb.ProfilesData()
    d = _Dictionary(pb, common, data.dictionary, profile)
    to_unix = wall_clock(profile)
    version = profile.metadata().get("heapscope_version", "")
    order = [VIEW_TYPE[view]] + [t for t, _ in SAMPLE_TYPES if t != VIEW_TYPE[view]]
    units = dict(SAMPLE_TYPES)
    period_type = pb.ValueType(type_strindex=d.string("space"), unit_strindex=d.string("bytes"))
    scopes: dict[int, Any] = {}
    for p, st, heap in chosen:
        scope = scopes.get(p.info.upid)
        if scope is None:
            rp = data.resource_profiles.add()
            for key, value in _resource_attributes(p):
                rp.resource.attributes.add(key=key, value=common.AnyValue(int_value=_i64(value))
                                           if isinstance(value, int) else common.AnyValue(string_value=_text(value)))
            scope = scopes[p.info.upid] = rp.scope_profiles.add()
            scope.scope.name, scope.scope.version = "heapscope", _text(version)
        attrs = _sample_attributes(d, heap if heap and (labelled or heap != HEAP_NAME) else "")
        # A callsite's samples per allocation label set, each set's pairs as attributes (docs/labels.md).
        split = LabelParts(profile, p.info.upid, st.kind, st.ts)
        pieces = [(cs, attrs + [d.attribute(k, x) for k, x in pairs],
                   desampled(raw, st.interval) if st.interval > 1 else raw)
                  for cs, whole in st.values.items() for pairs, raw in split.parts(cs, whole)]
        state_attr = d.attribute("heapscope.state", st.label)
        for type_name in order:
            prof = scope.profiles.add(
                sample_type=pb.ValueType(type_strindex=d.string(type_name), unit_strindex=d.string(units[type_name])),
                time_unix_nano=to_unix(st.ts) & _U64, duration_nano=0, period_type=period_type,
                period=_i64(interval_of(profile, p)), attribute_indices=[state_attr])
            view_of = TYPE_VIEW[type_name]
            for cs, sample_attrs, v in pieces:
                n = v.get(view_of)
                if n:
                    prof.samples.add(stack_index=d.stack(CallsiteId(cs)), attribute_indices=sample_attrs,
                                     values=[_i64(n)])
    return data


def export(profile: Profile, out: BinaryIO, *, view: str = "space", pid: int | None = None,
           dump: str | int | None = None, heaps: Sequence[str] | None = None) -> None:
    """Write the ProfilesData of `profile` (see build) to `out`."""
    out.write(build(profile, view=view, pid=pid, dump=dump, heaps=heaps).SerializeToString())
