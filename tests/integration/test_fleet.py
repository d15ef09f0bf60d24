"""Many machines: a real recording served to `go tool pprof`, pushed to Pyroscope- and Parca-shaped
loopback servers (what they received decoded by `go tool pprof`), and written to ClickHouse (chDB).

Every number is checked against `heapscope report` of the same profile. Servers are loopback,
started and stopped by each test; every subprocess has a timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import IO

import pytest
from fleet_support import ParcaServer, PyroscopeServer, free_port, go_missing, go_pprof, parca_messages, raw_totals
from hs_integration import HEAPSCOPE, Programs, Recorder, Run, kill_group, run_process

from heapscope.hosts.serve import PprofServer, Snapshot
from heapscope.model import VIEWS
from heapscope.store.reader import open_profile
from heapscope.view.report import build_reports

GO_NAME = {"alloc_objects": "alloc_objects", "alloc_space": "alloc_space", "objects": "inuse_objects",
           "space": "inuse_space"}


@pytest.fixture(scope="module")
def tiny(programs: Programs, tmp_path_factory: pytest.TempPathFactory) -> Path:
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


def heapscope(*args: object, timeout: float = 120) -> Run:
    return run_process([*HEAPSCOPE, *(str(a) for a in args)], timeout=timeout)


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, stderr.decode()
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def pb2(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    pytest.importorskip("grpc_tools", reason="needs grpcio-tools: pip install '.[dev]'")
    return parca_messages(tmp_path_factory.mktemp("proto"))


@pytest.fixture
def pyroscope() -> Iterator[PyroscopeServer]:
    s = PyroscopeServer()
    yield s
    s.close()


# --- pull ------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_go_tool_pprof_fetches_heap(tiny: Path, tmp_path: Path) -> None:
    missing = go_missing()
    if missing:
        pytest.skip(missing)
    with PprofServer(lambda: Snapshot(tiny), "127.0.0.1:0") as server:
        raw = go_pprof(["-raw", server.url + "heap"], tmp_path)
        top = go_pprof(["-top", server.url + "allocs"], tmp_path)
    assert "inuse_space/bytes[dflt]" in raw
    assert raw_totals(raw) == report_totals(tiny)
    assert "Type: alloc_space" in top


# --- push ------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_push_to_pyroscope(tiny: Path, tmp_path: Path, pyroscope: PyroscopeServer) -> None:
    before = digest(tiny)
    run = heapscope("push", tiny, pyroscope.url, "--label", "service=api", "--label", "host=web1")
    assert run.returncode == 0, run.describe()
    assert one_line(run.stderr).startswith(f"push to {pyroscope.url}: 1 of 1 profiles sent")
    (got,) = pyroscope.received
    assert got.labels["__app__"] == "api" and got.labels["host"] == "web1" and got.labels["executable"] == "tiny"
    assert digest(tiny) == before
    missing = go_missing()
    if missing:
        pytest.skip(missing)
    f = tmp_path / "received.pb.gz"
    f.write_bytes(got.profile)
    assert raw_totals(go_pprof(["-raw", str(f)], tmp_path)) == report_totals(tiny)


@pytest.mark.timeout(300)
def test_push_to_parca(tiny: Path, tmp_path: Path, pb2: ModuleType) -> None:
    server = ParcaServer(pb2)
    try:
        run = heapscope("push", tiny, server.url, "--label", "service=api")
        received = list(server.received)
    finally:
        server.close()
    assert run.returncode == 0, run.describe()
    (got,) = received
    assert got.labels["__name__"] == "memory" and got.labels["service"] == "api"
    missing = go_missing()
    if missing:
        pytest.skip(missing)
    f = tmp_path / "received.pb.gz"
    f.write_bytes(got.profile)
    assert raw_totals(go_pprof(["-raw", str(f)], tmp_path)) == report_totals(tiny)


# --- ClickHouse ------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_clickhouse_top_functions_match_report(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("chdb", reason="needs chDB: pip install '.[clickhouse]'")
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
def test_errors_are_one_line(tiny: Path, pyroscope: PyroscopeServer) -> None:
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
def test_server_errors_are_one_line(tiny: Path, pyroscope: PyroscopeServer) -> None:
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
    # --timeout is the whole push's: the request waited what was left of it, at most 0.5 s
    assert run.returncode == 1 and re.search(r"no answer within 0\.[0-5]\d* s\)$", one_line(run.stderr))


def _many_processes(path: Path, n: int) -> Path:
    """A profile of `n` processes with a dump each (the same small stack): a fleet's worth of pushes."""
    from heapscope.model import Frame, Mapping, MappingId, ProcessInfo, Upid
    from heapscope.store.writer import ProfileWriter

    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("ab12", 0, 0, 0x5000, 0x9000, 0, "/usr/bin/prog"))])
    w.add_frames([(1, Frame(MappingId(1), 0x1100, "main")), (2, Frame(MappingId(1), 0x1200, "work"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2)])
    for upid in range(1, n + 1):
        w.add_process(ProcessInfo(Upid(upid), pid=1000 + upid, ppid=1, name="prog", cmdline="prog",
                                  exe="/usr/bin/prog", uid=0, start_ts=1))
        w.add_dump(upid, 0, 100, "exit", [(2, 1, 4096)], "libc.malloc")
    w.close()
    return path


@pytest.mark.parametrize("server", ["refusing", "silent"])
@pytest.mark.timeout(120)
def test_push_to_a_dead_endpoint_ends_within_its_timeout(tmp_path: Path, server: str) -> None:
    import socket

    # GIVEN a profile of 300 processes and an endpoint that refuses connections, or one that
    # accepts them and never answers
    profile = _many_processes(tmp_path / "fleet.db", 300)
    held: list[socket.socket] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()
    if server == "refusing":
        listener.close()  # the port is free: connect() is refused
    else:
        listener.listen(512)

        def accept() -> None:
            listener.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    held.append(listener.accept()[0])  # held open, never read, never answered

        t = threading.Thread(target=accept, daemon=True)
        t.start()
    try:
        # WHEN it is pushed there with a deadline of 4 s and 4 tries a profile
        run = heapscope("push", profile, f"pyroscope+http://127.0.0.1:{port}", "--timeout", "4", "--attempts", "4",
                        timeout=60)  # old: 300 profiles x 4 tries x (10 s + backoff)
    finally:
        stop.set()
        if server == "silent":
            t.join(timeout=5)
            listener.close()
        for c in held:
            c.close()
    # THEN it ends (the run's own timeout would fail the test), with one line saying what was lost
    assert run.returncode == 1, run.describe()
    line = one_line(run.stderr)
    assert "0 of 300 profiles sent" in line, line
    assert ("connection refused" if server == "refusing" else "no answer within") in line, line


# --- while recording: record --serve / --push -----------------------------------------------


class LiveRecord:
    """`heapscope record ... -- phases DONE` in its own session; the test feeds its stdin and reads
    its output through pipes, each read bounded by a deadline (no sleeps)."""

    def __init__(self, programs: Programs, tmp_path: Path, *options: object) -> None:
        self.db = tmp_path / "live.db"
        self.argv = [*HEAPSCOPE, "record", "-i", "1", "-o", str(self.db), *(str(o) for o in options), "--",
                     str(programs.path("phases")), str(tmp_path / "done")]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stderr is not None  # both piped
        self.stdout, self.stderr = self.proc.stdout, self.proc.stderr
        self.out = {self.stdout.fileno(): b"", self.stderr.fileno(): b""}

    def wait_for(self, stream: IO[bytes], text: bytes, timeout: float = 60) -> bytes:
        """Read `stream` until `text` appears; all of it so far."""
        fd = stream.fileno()
        deadline = time.monotonic() + timeout
        while text not in self.out[fd]:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} within {timeout} s; got {self.out[fd]!r}"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, f"EOF before {text!r}; got {self.out[fd]!r}"
                self.out[fd] += chunk
        return self.out[fd]

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """Let phase 2 run; the exit status and the whole of stderr."""
        seen = self.out[self.stderr.fileno()]
        try:
            out, err = self.proc.communicate(b"go\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            pytest.fail(f"timed out after {timeout}s: {' '.join(self.argv)}")
        return self.proc.returncode, (seen + err).decode()

    def close(self) -> None:
        if self.proc.returncode is None:
            kill_group(self.proc)


@pytest.fixture
def live_record(programs: Programs, tmp_path: Path) -> Iterator[Callable[..., LiveRecord]]:
    started: list[LiveRecord] = []

    def start(*options: object) -> LiveRecord:
        started.append(LiveRecord(programs, tmp_path, *options))
        return started[-1]

    yield start
    for r in started:
        r.close()


def inuse_at_dump(db: Path, n: int) -> dict[str, int]:
    """The four views summed over callsites at the process's dump `n` (1 = first), Go's names."""
    with open_profile(db) as p:
        (proc,) = p.processes()
        dump = p.dumps(proc.info.upid)[n - 1]
        values = p.callsite_values(proc.info.upid, dump.ts_end).values()
        return {GO_NAME[v]: sum(x.get(v) for x in values) for v in VIEWS}


@pytest.mark.timeout(300)
def test_go_tool_pprof_scrapes_a_live_recording(live_record: Callable[..., LiveRecord], tmp_path: Path) -> None:
    """phases holds 1000 x 100 bytes and waits on its stdin: the scrape takes a fresh dump (dump 1)
    whose totals are what go tool pprof reads, and the ground truth."""
    missing = go_missing()
    if missing:
        pytest.skip(missing)
    rec = live_record("--serve", "127.0.0.1:0")
    served = rec.wait_for(rec.stderr, b"/debug/pprof/heap and /allocs\n")
    found = re.search(rb"serving (http://127\.0\.0\.1:\d+/[\w-]+/debug/pprof/)heap", served)
    assert found is not None, served
    url = found.group(1).decode()
    rec.wait_for(rec.stdout, b"phase 1 done\n")
    raw = go_pprof(["-raw", url + "heap"], tmp_path)
    top = go_pprof(["-top", url + "allocs"], tmp_path)
    status, err = rec.finish()
    assert status == 0, err
    assert "served 4 requests on " + url in err, err  # each pprof run also asks /symbol
    assert "inuse_space/bytes[dflt]" in raw and "Type: alloc_space" in top
    got = raw_totals(raw)
    assert got["inuse_space"] == 100000 and got["inuse_objects"] == 1000, raw
    assert got == inuse_at_dump(rec.db, 1)
    with open_profile(rec.db) as p:
        (proc,) = p.processes()
        # Each scrape's dump, or one for both when they came within the server's minimum interval.
        assert [d.reason for d in p.dumps(proc.info.upid)] in (["signal", "signal", "exit"], ["signal", "exit"])


@pytest.mark.timeout(300)
def test_record_serve_needs_its_token_and_bounds_the_dumps_scrapes_take(live_record: Callable[..., LiveRecord]) -> None:
    import urllib.error
    import urllib.request

    def status(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                r.read()
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    # GIVEN a recording serving its profile (a token made for it, in the URL it prints)
    rec = live_record("--serve", "127.0.0.1:0")
    served = rec.wait_for(rec.stderr, b"/debug/pprof/heap and /allocs\n")
    m = re.search(rb"serving (http://127\.0\.0\.1:(\d+)/([\w-]{16,})/debug/pprof/)heap", served)
    assert m, served
    url, port = m.group(1).decode(), int(m.group(2))
    rec.wait_for(rec.stdout, b"phase 1 done\n")
    # WHEN another local user scrapes without the token THEN 403
    assert status(f"http://127.0.0.1:{port}/debug/pprof/heap") == 403
    # AND 30 scrapes at once with it are all answered
    codes: list[int] = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda: codes.append(status(url + "heap"))) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    elapsed = time.monotonic() - t0
    status_code, err = rec.finish()
    assert status_code == 0, err
    assert codes == [200] * 30
    # THEN the refused scrape took no dump, and the 30 took one a second at most (the server's minimum)
    with open_profile(rec.db) as p:
        (proc,) = p.processes()
        signal_dumps = [d for d in p.dumps(proc.info.upid) if d.reason == "signal"]
    assert 1 <= len(signal_dumps) <= 1 + int(elapsed), (len(signal_dumps), elapsed)


@pytest.mark.timeout(300)
def test_push_follows_continuous_dumps(live_record: Callable[..., LiveRecord], pyroscope: PyroscopeServer,
                                       tmp_path: Path) -> None:
    """-c: every continuous dump is pushed while the target runs, the final one after it ends."""
    rec = live_record("-c", "100", "--push", pyroscope.url, "--label", "service=api")
    rec.wait_for(rec.stdout, b"phase 1 done\n")
    first = pyroscope.wait_for(1)[0]  # pushed while the target waits in phase 1
    assert first.labels["__app__"] == "api" and first.labels["executable"] == "phases"
    status, err = rec.finish()
    assert status == 0, err
    with open_profile(rec.db) as p:
        (proc,) = p.processes()
        dumps = len(p.dumps(proc.info.upid))
    received = pyroscope.wait_for(dumps)
    assert len(received) == dumps
    assert f"push to {pyroscope.url}: {dumps} of {dumps} profiles sent" in err, err
    if go_missing():
        return
    last = tmp_path / "last.pb.gz"
    last.write_bytes(received[-1].profile)
    assert raw_totals(go_pprof(["-raw", str(last)], tmp_path)) == inuse_at_dump(rec.db, dumps)


@pytest.mark.timeout(300)
def test_push_to_a_dead_server_costs_the_recording_nothing(live_record: Callable[..., LiveRecord]) -> None:
    """Nothing listens: the target runs and exits as usual, the profile is whole, the loss is said."""
    url = f"pyroscope+http://127.0.0.1:{free_port()}"
    rec = live_record("-c", "100", "--push", url, "-q")
    rec.wait_for(rec.stdout, b"phase 1 done\n")
    status, err = rec.finish()
    assert status == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith(f"heapscope: push to {url}: 0 of ")]
    assert "failed" in line and "connection refused" in line, err
    assert report_totals(rec.db)["inuse_space"] == 200000  # phase_one's and phase_two's kept blocks
