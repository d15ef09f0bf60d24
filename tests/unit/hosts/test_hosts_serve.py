"""PprofServer: Go's /debug/pprof/heap and /allocs, answered from a profile file, loopback only."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from export_support import decode
from fleet_support import go_missing, go_pprof, raw_totals

from heapscope.errors import ProfileError, UsageError
from heapscope.hosts.serve import PprofServer, Snapshot, parse_address


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


@pytest.fixture
def server(known_profile: Path) -> Iterator[PprofServer]:
    calls: list[int] = []

    def snapshot() -> Snapshot:
        calls.append(1)
        return Snapshot(known_profile)

    with PprofServer(snapshot, "127.0.0.1:0", min_dump_interval=0) as s:
        s.calls = calls  # type: ignore[attr-defined]
        yield s


def default_type(body: bytes) -> str:
    msg = decode(gzip.decompress(body))
    strings = [v.decode() for f, v in msg if f == 6]  # type: ignore[union-attr]
    return strings[next(v for f, v in msg if f == 14)]  # type: ignore[index]


def test_heap_and_allocs(server: PprofServer) -> None:
    status, body, ctype = get(server.url + "heap")
    assert status == 200 and ctype == "application/octet-stream" and body[:2] == b"\x1f\x8b"
    assert default_type(body) == "inuse_space"
    status, body, _ = get(server.url + "allocs?gc=1")
    assert status == 200 and default_type(body) == "alloc_space"
    assert len(server.calls) == 2  # type: ignore[attr-defined]  # a fresh snapshot per request
    status, body, ctype = get(server.url)
    assert status == 200 and b"heap" in body and ctype.startswith("text/html")
    assert server.requests == 3 and server.errors == 0


@pytest.mark.parametrize(("query", "status", "line"), [
    ("heap?seconds=30", 400, "seconds: delta profiles over an interval are not offered"),
    ("allocs?debug=1", 400, "debug=1: only the binary pprof format"),
    ("heap?pid=999", 404, "pid 999: not profiled (pids present: 100, 200, 300)"),
    ("heap?pid=abc", 400, "pid='abc': not a process id"),
    ("goroutine", 404, "/debug/pprof/goroutine: not served"),
])
def test_refusals_are_one_line(server: PprofServer, query: str, status: int, line: str) -> None:
    got, body, ctype = get(server.url + query)
    assert got == status and ctype.startswith("text/plain")
    text = body.decode()
    assert text.startswith(line) and text.count("\n") == 1
    assert server.errors == 1


def test_pid_selects_one_process(server: PprofServer) -> None:
    status, body, _ = get(server.url + "heap?pid=200")
    assert status == 200
    samples = [v for f, v in decode(gzip.decompress(body)) if f == 2]
    assert len(samples) == 1


def test_snapshot_failure_is_503(tmp_path: Path) -> None:
    def broken() -> Snapshot:
        raise ProfileError(f"{tmp_path}/x.db: no such file")

    with PprofServer(broken, "127.0.0.1:0") as s:
        status, body, _ = get(s.url + "heap")
    assert status == 503 and body.decode() == f"{tmp_path}/x.db: no such file\n"


def test_loopback_only_unless_allowed() -> None:
    with pytest.raises(UsageError, match="not a loopback address.*--serve-remote"):
        parse_address("0.0.0.0:6060")
    with pytest.raises(UsageError, match="not a loopback address"):
        PprofServer(lambda: Snapshot(Path("x")), ("192.0.2.1", 6060))
    assert parse_address("0.0.0.0:6060", allow_remote=True) == ("0.0.0.0", 6060)
    assert parse_address(":6060") == ("127.0.0.1", 6060)
    assert parse_address("[::1]:6060") == ("::1", 6060)
    assert parse_address("localhost:1") == ("localhost", 1)
    for bad in ("6060", "127.0.0.1:http", "127.0.0.1:70000", ""):
        with pytest.raises(UsageError, match="expected HOST:PORT"):
            parse_address(bad)


def test_port_in_use_is_one_line(server: PprofServer) -> None:
    with pytest.raises(UsageError, match=rf"--serve 127.0.0.1:{server.port}: cannot listen"):
        PprofServer(lambda: Snapshot(Path("x")), f"127.0.0.1:{server.port}")


@pytest.mark.timeout(240)
def test_go_tool_pprof_over_http(server: PprofServer, tmp_path: Path) -> None:
    missing = go_missing()
    if missing:
        pytest.skip(missing)
    raw = go_pprof(["-raw", server.url + "heap"], tmp_path)
    assert raw_totals(raw)["inuse_space"] == 434 + 4096
    top = go_pprof(["-top", server.url + "allocs?pid=100"], tmp_path)
    assert "Type: alloc_space" in top and "malloc" in top


@pytest.mark.timeout(60)
def test_close_leaves_requests_in_flight_to_finish(known_profile: Path) -> None:
    """close() stops accepting at once (it does not wait for a scrape being answered, nor for a poll
    interval), may be called twice (a recording's end does), and frees the port."""
    import threading

    entered, release = threading.Event(), threading.Event()

    def slow() -> Snapshot:
        entered.set()
        assert release.wait(30)
        return Snapshot(known_profile)

    s = PprofServer(slow, "127.0.0.1:0")
    answer: list[tuple[int, bytes, str]] = []
    client = threading.Thread(target=lambda: answer.append(get(s.url + "heap")))
    client.start()
    assert entered.wait(30)
    s.close()
    s.close()
    release.set()
    client.join(30)
    assert answer and answer[0][0] == 200 and answer[0][1][:2] == b"\x1f\x8b"
    with PprofServer(lambda: Snapshot(known_profile), f"127.0.0.1:{s.port}") as again:
        assert get(again.url + "heap")[0] == 200


# --- a token, and dumps bounded however many scrapes come ----------------------------------------


def _request(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    req = urllib.request.Request(url, headers=headers or {}, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_with_a_token_only_its_holders_are_answered_and_no_one_else_dumps(known_profile: Path) -> None:
    calls: list[int] = []

    def snapshot() -> Snapshot:
        calls.append(1)
        return Snapshot(known_profile)

    # GIVEN a server with a token
    with PprofServer(snapshot, "127.0.0.1:0", token="s3cret-token", min_dump_interval=0) as s:
        base = f"http://127.0.0.1:{s.port}"
        assert s.url == f"{base}/s3cret-token/debug/pprof/"
        # WHEN another local user asks without it (or with another) THEN 403, and no dump is taken
        for url, headers in ((f"{base}/debug/pprof/heap", {}), (f"{base}/debug/pprof/allocs", {}),
                             (f"{base}/wrong-token/debug/pprof/heap", {}), (f"{base}/debug/pprof/", {}),
                             (f"{base}/debug/pprof/heap", {"Authorization": "Bearer wrong-token"})):
            assert _request(url, headers) == 403, url
        assert _request(f"{base}/debug/pprof/symbol", method="POST") == 403
        assert calls == []
        # AND the holder is answered, by the URL's path or by the bearer header
        assert _request(s.url + "heap") == 200
        assert _request(f"{base}/debug/pprof/allocs", {"Authorization": "Bearer s3cret-token"}) == 200
        assert _request(s.url + "symbol", method="POST") == 200
        assert len(calls) == 2


def test_a_burst_of_scrapes_takes_one_dump(known_profile: Path) -> None:
    import threading

    calls: list[int] = []

    def snapshot() -> Snapshot:
        calls.append(1)
        return Snapshot(known_profile)

    # GIVEN a server that takes at most one dump an hour
    with PprofServer(snapshot, "127.0.0.1:0", min_dump_interval=3600) as s:
        statuses: list[int] = []
        # WHEN 40 scrapes come at once
        threads = [threading.Thread(target=lambda: statuses.append(_request(s.url + "heap"))) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        # THEN every one is answered, from one dump
        assert statuses == [200] * 40
        assert len(calls) == 1 and s.dumps == 1
