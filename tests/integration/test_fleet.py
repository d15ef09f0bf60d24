"""Many machines: a real recording served to `go tool pprof`, pushed to Pyroscope- and Parca-shaped
loopback servers (what they received decoded by `go tool pprof`), and written to ClickHouse (chDB).

Every number is checked against `heapscope report` of the same profile. Servers are loopback,
started and stopped by each test; every subprocess has a timeout.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import ParcaServer, PyroscopeServer, free_port, go_missing, go_pprof, parca_messages, raw_totals
from hs_integration import HEAPSCOPE, Recorder, run_process

from heapscope.fleet.serve import PprofServer, Snapshot
from heapscope.model import VIEWS
from heapscope.store.reader import open_profile
from heapscope.view.report import build_reports

GO_NAME = {"alloc_objects": "alloc_objects", "alloc_space": "alloc_space", "objects": "inuse_objects",
           "space": "inuse_space"}


@pytest.fixture(scope="module")
def tiny(programs, tmp_path_factory) -> Path:
    rec = Recorder(tmp_path_factory.mktemp("tiny"))([programs.path("tiny")], interval=1)
    assert rec.returncode == 0, rec.describe()
    return rec.db


def report_totals(db: Path) -> dict[str, int]:
    """The four views' totals of `heapscope report`, named as Go names them."""
    with open_profile(db) as p:
        return {GO_NAME[v]: sum(r.view_total for r in build_reports(p, v, dump="end")) for v in VIEWS}


def report_rows(db: Path, view: str) -> list[tuple[object, ...]]:
    with open_profile(db) as p:
        return sorted((r.process.info.pid, row.function, row.library, row.self_value, row.total_value)
                      for r in build_reports(p, view, dump="end", sort="total", keep_common=True)
                      for row in r.rows)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def heapscope(*args: object, timeout: float = 120):
    return run_process([*HEAPSCOPE, *(str(a) for a in args)], timeout=timeout)


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, stderr.decode()
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def pb2(tmp_path_factory):
    pytest.importorskip("grpc_tools", reason="grpcio-tools comes with the test extra")
    return parca_messages(tmp_path_factory.mktemp("proto"))


@pytest.fixture
def pyroscope() -> Iterator[PyroscopeServer]:
    s = PyroscopeServer()
    yield s
    s.close()


# --- pull ------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_go_tool_pprof_fetches_heap(tiny, tmp_path):
    if go_missing():
        pytest.skip(go_missing())
    with PprofServer(lambda: Snapshot(tiny), "127.0.0.1:0") as server:
        raw = go_pprof(["-raw", server.url + "heap"], tmp_path)
        top = go_pprof(["-top", server.url + "allocs"], tmp_path)
    assert "inuse_space/bytes[dflt]" in raw
    assert raw_totals(raw) == report_totals(tiny)
    assert "Type: alloc_space" in top


# --- push ------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_push_to_pyroscope(tiny, tmp_path, pyroscope):
    before = digest(tiny)
    run = heapscope("push", tiny, pyroscope.url, "--label", "service=api", "--label", "host=web1")
    assert run.returncode == 0, run.describe()
    assert one_line(run.stderr).startswith(f"push to {pyroscope.url}: 1 of 1 profiles sent")
    (got,) = pyroscope.received
    assert got.labels["__app__"] == "api" and got.labels["host"] == "web1" and got.labels["executable"] == "tiny"
    assert digest(tiny) == before
    if go_missing():
        pytest.skip(go_missing())
    f = tmp_path / "received.pb.gz"
    f.write_bytes(got.profile)
    assert raw_totals(go_pprof(["-raw", str(f)], tmp_path)) == report_totals(tiny)


@pytest.mark.timeout(300)
def test_push_to_parca(tiny, tmp_path, pb2):
    server = ParcaServer(pb2)
    try:
        run = heapscope("push", tiny, server.url, "--label", "service=api")
        received = list(server.received)
    finally:
        server.close()
    assert run.returncode == 0, run.describe()
    (got,) = received
    assert got.labels["__name__"] == "memory" and got.labels["service"] == "api"
    if go_missing():
        pytest.skip(go_missing())
    f = tmp_path / "received.pb.gz"
    f.write_bytes(got.profile)
    assert raw_totals(go_pprof(["-raw", str(f)], tmp_path)) == report_totals(tiny)


# --- ClickHouse ------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_clickhouse_top_functions_match_report(tiny, tmp_path):
    pytest.importorskip("chdb", reason="chdb comes with the test extra")
    from heapscope.fleet.clickhouse import Writer, parse_destination

    dest = f"chdb:{tmp_path / 'ch'}"
    run = heapscope("export", tiny, "--format", "clickhouse", "--to", dest, "--host", "h1", "--label", "service=api")
    assert run.returncode == 0, run.describe()
    assert one_line(run.stderr).startswith("wrote ") and "rows to heapscope.heapscope_samples" in one_line(run.stderr)
    with Writer(parse_destination(dest)) as w:
        for view in VIEWS:
            got = w.query(f"SELECT pid, function, library, self_{view}, total_{view}"
                          " FROM heapscope.heapscope_samples_top_functions"
                          f" WHERE self_{view} != 0 OR total_{view} != 0")
            assert sorted(tuple(r) for r in got) == report_rows(tiny, view), view
    script = tmp_path / "rows.sql"
    run = heapscope("export", tiny, "--format", "clickhouse", "-o", script)
    assert run.returncode == 0, run.describe()
    assert script.read_text().startswith("CREATE DATABASE IF NOT EXISTS heapscope;")


# --- errors: one line each, the local profile untouched ----------------------------------------


@pytest.mark.timeout(300)
def test_errors_are_one_line(tiny, pyroscope):
    before = digest(tiny)
    port = free_port()
    cases = [
        (["push", tiny, f"pyroscope+http://127.0.0.1:{port}", "--attempts", "2"], 1,
         f"heapscope: error: push to pyroscope+http://127.0.0.1:{port}: 0 of 1 profiles sent (0.0 KiB); 1 failed"
         " (last error: dump 1 of pid "),
        (["push", tiny, "pyroscope+http//127.0.0.1:4040"], 2, "heapscope: error: push URL 'pyroscope+http//127.0.0.1"
         ":4040': no scheme"),
        (["push", tiny, "parca+grpc://127.0.0.1:99999"], 2, "heapscope: error: push URL 'parca+grpc://127.0.0.1:99999'"
         ": Port out of range"),
        (["push", tiny, pyroscope.url, "--label", "service"], 2, "heapscope: error: --label 'service': expected"),
        (["export", tiny, "-f", "clickhouse", "--to", f"http://127.0.0.1:{port}/profiles"], 1,
         f"heapscope: error: ClickHouse 127.0.0.1:{port}: "),
        (["export", tiny, "-f", "pprof", "--to", "chdb:/tmp/x"], 2, "heapscope: error: --to, --label and --host go"
         " with --format clickhouse"),
    ]
    for argv, status, start in cases:
        run = heapscope(*argv)
        assert run.returncode == status, run.describe()
        assert one_line(run.stderr).startswith(start), run.describe()
    assert "connection refused" in one_line(heapscope(*cases[0][0]).stderr)
    assert digest(tiny) == before


@pytest.mark.timeout(300)
def test_server_errors_are_one_line(tiny, pyroscope):
    pyroscope.fail_first = [400]
    run = heapscope("push", tiny, pyroscope.url)
    assert run.returncode == 1
    assert one_line(run.stderr).endswith("HTTP 400 Bad Request: failing on purpose)")
    pyroscope.fail_first = [503, 503]
    run = heapscope("push", tiny, pyroscope.url, "--attempts", "2")
    assert run.returncode == 1 and one_line(run.stderr).endswith("HTTP 503 Service Unavailable: failing on purpose)"
                                                                 "; 1 retries")
    pyroscope.hold = threading.Event()  # a server that never answers in time
    run = heapscope("push", tiny, pyroscope.url, "--timeout", "0.5", "--attempts", "1")
    assert run.returncode == 1 and one_line(run.stderr).endswith("no answer within 0.5 s)")
