"""OTLP profiles: `export --format otlp` and `push otlp+http://` / `otlp+grpc://` of real recordings,
decoded with the opentelemetry-proto package and checked against the pprof export of the same state.

Skipped, with the install line, without the `[otlp]` extra.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from export_support import decode, packed_ints
from fleet_support import OTLP_INSTALL, OtlpGrpcServer, OtlpHttpServer, otlp_totals
from hs_integration import HEAPSCOPE, Programs, Recorder, Run, run_process

profiles_pb2 = pytest.importorskip("opentelemetry.proto.profiles.v1development.profiles_pb2", reason=OTLP_INSTALL)

from heapscope.store.reader import open_profile  # noqa: E402

PYTHON_PROGRAM = Path(__file__).parents[1] / "programs" / "python" / "known.py"
PEAKFREE_PEAK = (4000 * 256 + 16 * 65536, 4016)  # tests/programs/peakfree.c: held at its peak, all freed after
GO_TYPES = {"alloc_space": "bytes", "alloc_objects": "count", "inuse_space": "bytes", "inuse_objects": "count"}


def heapscope(*args: object, timeout: float = 120) -> Run:
    return run_process([*HEAPSCOPE, *(str(a) for a in args)], timeout=timeout)


def export(db: Path, fmt: str, out: Path, *extra: str) -> bytes:
    run = heapscope("export", db, "--format", fmt, "-o", out, "--force", *extra)
    assert run.returncode == 0, run.describe()
    return out.read_bytes()


def otlp(db: Path, tmp: Path, *extra: str) -> Any:
    return profiles_pb2.ProfilesData.FromString(export(db, "otlp", tmp / "p.otlp", *extra))


def pprof_totals(data: bytes) -> dict[str, int]:
    """Summed values per sample type of a gzip pprof profile (decoded field by field)."""
    msg = decode(gzip.decompress(data))
    strings = [v.decode() for f, v in msg if f == 6 and isinstance(v, bytes)]
    types = [strings[dict(decode(v))[1]] for f, v in msg if f == 1 and isinstance(v, bytes)]  # type: ignore[index]
    out = dict.fromkeys(types, 0)
    for f, v in msg:
        if f == 2 and isinstance(v, bytes):
            values = packed_ints(dict(decode(v))[2])  # type: ignore[arg-type]
            for t, x in zip(types, values, strict=True):
                out[t] += x if x < 1 << 63 else x - (1 << 64)
    return out


def check_shape(data: Any) -> None:
    """The rules of profiles.proto every reader may rely on: index 0 of each table the zero value,
    every index in range, one sample type per Profile, one value per sample."""
    d = data.dictionary
    assert d.string_table[0] == ""
    for table in (d.mapping_table, d.location_table, d.function_table, d.attribute_table, d.stack_table):
        assert len(table) > 1 and table[0].ByteSize() == 0
    assert (d.link_table[0].trace_id, d.link_table[0].span_id) == (bytes(16), bytes(8))
    for loc in d.location_table[1:]:
        assert 0 <= loc.mapping_index < len(d.mapping_table)
        assert all(0 < ln.function_index < len(d.function_table) for ln in loc.lines)
        assert all(0 < i < len(d.attribute_table) for i in loc.attribute_indices)
    for st in d.stack_table[1:]:
        assert st.location_indices and all(0 < i < len(d.location_table) for i in st.location_indices)
    for rp in data.resource_profiles:
        for sp in rp.scope_profiles:
            assert sp.scope.name == "heapscope"
            for prof in sp.profiles:
                assert d.string_table[prof.sample_type.type_strindex] in GO_TYPES
                assert (d.string_table[prof.period_type.type_strindex],
                        d.string_table[prof.period_type.unit_strindex]) == ("space", "bytes")
                for s in prof.samples:
                    assert 0 < s.stack_index < len(d.stack_table) and len(s.values) == 1 and s.values[0] != 0


def frame_types(data: Any) -> dict[str, set[str]]:
    """profile.frame.type -> the function names of the locations of that type."""
    d = data.dictionary
    out: dict[str, set[str]] = {}
    for loc in d.location_table[1:]:
        kinds = [d.attribute_table[i].value.string_value for i in loc.attribute_indices
                 if d.string_table[d.attribute_table[i].key_strindex] == "profile.frame.type"]
        assert len(kinds) == 1, loc
        names = out.setdefault(kinds[0], set())
        names.update(d.string_table[d.function_table[ln.function_index].name_strindex] for ln in loc.lines)
    return out


def resource(rp: Any) -> dict[str, object]:
    return {a.key: a.value.string_value or a.value.int_value for a in rp.resource.attributes}


@pytest.fixture(scope="module")
def tiny(programs: Programs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rec = Recorder(tmp_path_factory.mktemp("tiny"))([programs.path("tiny")], interval=1)
    assert rec.returncode == 0, rec.describe()
    return rec.db


# --- export --------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_export_matches_pprof_and_describes_the_process(tiny: Path, programs: Programs, tmp_path: Path) -> None:
    # GIVEN tiny recorded at interval 1, exported to OTLP and pprof at the same states
    for extra in ((), ("--dump", "end"), ("--view", "alloc_objects")):
        data = otlp(tiny, tmp_path, *extra)
        # THEN the file follows profiles.proto and each type's sum is pprof's
        check_shape(data)
        assert otlp_totals(data) == pprof_totals(export(tiny, "pprof", tmp_path / "p.pb.gz", *extra)), extra
    # AND the chosen view is the first Profile (what a viewer opens), the four types follow
    prof = data.resource_profiles[0].scope_profiles[0].profiles
    names = [data.dictionary.string_table[p.sample_type.type_strindex] for p in prof]
    assert names[0] == "alloc_objects" and sorted(names) == sorted(GO_TYPES)
    # AND the process is its Resource, named as the semantic conventions name it
    (rp,) = data.resource_profiles
    with open_profile(tiny) as p:
        (proc,) = p.processes()
        (tiny_mapping,) = [m for m in p.mappings() if m.name == proc.info.exe]
    attrs = resource(rp)
    assert attrs["process.pid"] == proc.info.pid and attrs["process.executable.name"] == "tiny"
    assert attrs["process.command_line"] == proc.info.cmdline and attrs["process.executable.path"] == proc.info.exe
    # AND the program's mapping carries its GNU build id, its frames are native with file:line
    d = data.dictionary
    (m,) = [m for m in d.mapping_table[1:] if d.string_table[m.filename_strindex] == proc.info.exe]
    build_ids = {d.string_table[d.attribute_table[i].key_strindex]: d.attribute_table[i].value.string_value
                 for i in m.attribute_indices}
    assert build_ids == {"process.executable.build_id.gnu": tiny_mapping.build_id} and tiny_mapping.build_id
    assert set(frame_types(data)) == {"native"} and "main" in frame_types(data)["native"]
    lines = {(d.string_table[d.function_table[ln.function_index].name_strindex],
              d.string_table[d.function_table[ln.function_index].filename_strindex], ln.line)
             for loc in d.location_table[1:] if loc.mapping_index and loc.mapping_index == list(
                 d.mapping_table).index(m) for ln in loc.lines}
    assert any(name == "main" and file.endswith("tiny.c") and line > 0 for name, file, line in lines), lines


@pytest.mark.timeout(300)
def test_export_holds_the_peak_and_every_dump_with_its_time(programs: Programs, record: Recorder,
                                                            tmp_path: Path) -> None:
    # GIVEN peakfree, whose 2 MB peak is freed before it exits (10 x 50 B left)
    rec = record([programs.path("peakfree")])
    assert rec.returncode == 0, rec.describe()
    # WHEN exported without --dump: the peak, as report and pprof show
    peak = otlp(rec.db, tmp_path)
    assert otlp_totals(peak)["inuse_space"] == PEAKFREE_PEAK[0]
    # AND with --dump all: four Profiles per dump, in time order, the exit state last
    every = otlp(rec.db, tmp_path, "--dump", "all")
    check_shape(every)
    with open_profile(rec.db) as p:
        (proc,) = p.processes()
        n = len(p.dumps(proc.info.upid))
        meta = p.metadata()
    profiles = list(every.resource_profiles[0].scope_profiles[0].profiles)
    assert len(profiles) == 4 * n
    times = [profiles[k].time_unix_nano for k in range(0, len(profiles), 4)]
    assert times == sorted(times) and all(len({q.time_unix_nano for q in profiles[k:k + 4]}) == 1
                                          for k in range(0, len(profiles), 4))
    assert int(meta["started_unix_ns"]) <= times[0]
    last = profiles[-4:]
    held = [q for q in last if every.dictionary.string_table[q.sample_type.type_strindex] == "inuse_space"]
    assert sum(s.values[0] for s in held[0].samples) == 500


@pytest.mark.timeout(300)
def test_python_frames_are_typed_cpython(tmp_path: Path) -> None:
    # GIVEN a Python program with known allocations per Python function, recorded
    db = tmp_path / "py.db"
    python = shutil.which("python3") or "/usr/bin/python3"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "4096", "--seed", "7", "--", python,
                       str(PYTHON_PROGRAM)], timeout=150)
    assert run.returncode == 0, run.describe()
    # WHEN it is exported to OTLP
    data = otlp(db, tmp_path)
    check_shape(data)
    # THEN its Python functions are cpython frames, without a mapping, with their file and line
    kinds = frame_types(data)
    assert {"kept", "freed", "Holder.method"} <= kinds["cpython"], kinds["cpython"]
    assert "main" in kinds["native"] or any("Py" in n for n in kinds["native"])
    d = data.dictionary
    for loc in d.location_table[1:]:
        if any(d.attribute_table[i].value.string_value == "cpython" for i in loc.attribute_indices):
            assert loc.mapping_index == 0 and loc.address == 0 and len(loc.lines) == 1
    marked = [i + 1 for i, line in enumerate(PYTHON_PROGRAM.read_text().splitlines()) if "# ALLOC kept" in line]
    kept = {(d.string_table[d.function_table[ln.function_index].filename_strindex], ln.line)
            for loc in d.location_table[1:] for ln in loc.lines
            if d.string_table[d.function_table[ln.function_index].name_strindex] == "kept"}
    assert (str(PYTHON_PROGRAM), marked[0]) in kept, kept
    # AND the totals are pprof's of the same state
    assert otlp_totals(data) == pprof_totals(export(db, "pprof", tmp_path / "py.pb.gz"))


# --- push ----------------------------------------------------------------------------------


@pytest.fixture
def collector() -> Iterator[OtlpHttpServer]:
    s = OtlpHttpServer()
    yield s
    s.close()


@pytest.mark.timeout(300)
def test_push_to_an_otlp_http_collector(tiny: Path, tmp_path: Path, collector: OtlpHttpServer) -> None:
    # WHEN the recording is pushed to a loopback OTLP/HTTP receiver, with labels
    run = heapscope("push", tiny, collector.url, "--label", "service=api", "--label", "deployment.environment=ci")
    assert run.returncode == 0, run.describe()
    assert run.stderr.decode().strip().startswith(f"push to {collector.url}: 1 of 1 profiles sent")
    # THEN it received one gzip protobuf request that decodes to the dump, as pprof has it
    (got,) = collector.received
    assert got.labels["Content-Encoding"] == "gzip"
    (req,) = collector.requests_decoded
    check_shape(req)
    assert otlp_totals(req) == pprof_totals(export(tiny, "pprof", tmp_path / "d.pb.gz", "--dump", "1"))
    # AND the labels are Resource attributes beside the process's own
    attrs = resource(req.resource_profiles[0])
    assert attrs["service.name"] == "api" and attrs["deployment.environment"] == "ci"
    assert attrs["process.executable.name"] == "tiny"


@pytest.mark.timeout(300)
def test_push_to_an_otlp_http_collector_retries_what_the_spec_retries(tiny: Path) -> None:
    # GIVEN a collector that answers 503 once, then accepts
    server = OtlpHttpServer(fail_first=[503])
    try:
        run = heapscope("push", tiny, server.url, "--attempts", "2")
        assert run.returncode == 0, run.describe()
        assert len(server.requests_decoded) == 1 and server.requests == 2
        # AND a 400 is final: one request, one line naming it
        server.fail_first = [400]
        run = heapscope("push", tiny, server.url, "--attempts", "3")
        assert run.returncode == 1 and server.requests == 3
        (line,) = run.stderr.decode().strip().splitlines()
        assert line.endswith("HTTP 400 Bad Request: failing on purpose)"), line
    finally:
        server.close()


@pytest.mark.timeout(300)
def test_push_to_an_otlp_grpc_collector(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="needs grpcio: pip install '.[fleet]'")
    server = OtlpGrpcServer()
    try:
        run = heapscope("push", tiny, server.url, "--label", "service=api")
        requests = list(server.requests_decoded)
    finally:
        server.close()
    assert run.returncode == 0, run.describe()
    (req,) = requests
    check_shape(req)
    assert otlp_totals(req) == pprof_totals(export(tiny, "pprof", tmp_path / "d.pb.gz", "--dump", "1"))
    assert resource(req.resource_profiles[0])["service.name"] == "api"


def test_missing_package_is_one_line(tiny: Path, tmp_path: Path) -> None:
    # GIVEN an interpreter that cannot import opentelemetry.proto (a meta path finder refuses it)
    code = ("import sys\n"
            "class No:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.startswith('opentelemetry'): raise ImportError(name)\n"
            "sys.meta_path.insert(0, No())\n"
            "from heapscope.cli.start import run\n"
            "sys.exit(run())\n")
    out = tmp_path / "x.otlp"
    proc = subprocess.run([HEAPSCOPE[0], "-c", code, "export", str(tiny), "-f", "otlp", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    # THEN export says what to install, in one line, and writes nothing
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("heapscope: error: OTLP profiles need the opentelemetry-proto package:"
                                   " pip install 'heapscope[otlp]'"), proc.stderr
    assert not out.exists()


@pytest.mark.timeout(300)
def test_record_pushes_to_two_collectors(programs: Programs, tmp_path: Path) -> None:
    # GIVEN two OTLP collectors, one over HTTP and one over gRPC when grpcio is here
    first = OtlpHttpServer()
    second: OtlpHttpServer | OtlpGrpcServer = OtlpHttpServer()
    try:
        import grpc  # noqa: F401
        second.close()
        second = OtlpGrpcServer()
    except ImportError:
        pass
    try:
        # WHEN tiny is recorded with --push to both
        rec = Recorder(tmp_path)([programs.path("tiny")], interval=1,
                                 extra=["--push", first.url, "--push", second.url, "--label", "service=api"])
        assert rec.returncode == 0, rec.describe()
        got = [list(first.requests_decoded), list(second.requests_decoded)]
    finally:
        first.close()
        second.close()
    # THEN each received the final dump, with the totals pprof has for it (each pusher counts its own
    # dumps: a second target used to get nothing)
    want = pprof_totals(export(rec.db, "pprof", tmp_path / "d.pb.gz", "--dump", "-1"))
    for requests in got:
        assert len(requests) == 1, requests
        assert otlp_totals(requests[0]) == want
        assert resource(requests[0].resource_profiles[0])["service.name"] == "api"
