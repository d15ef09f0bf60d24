"""Pusher: Pyroscope's /ingest and Parca's WriteRaw against loopback servers; losses counted, never blocking."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from fleet_support import ParcaServer, PyroscopeServer, free_port

from heapscope.errors import UsageError
from heapscope.fleet import push
from heapscope.fleet.pprof_source import build
from heapscope.fleet.push import Pusher, PushItem, parse_labels, parse_target
from heapscope.store.reader import open_profile

PPROF = gzip.compress(b"\x0a\x00")  # contents do not matter to the transport


def item(n: int = 0, data: bytes = PPROF) -> PushItem:
    return PushItem(data, 1_700_000_000_000_000_000 + n, 1_700_000_010_000_000_000 + n,
                    (("pid", "42"),), f"dump {n}")


# --- URLs and labels ------------------------------------------------------------------------


def test_targets() -> None:
    t = parse_target("pyroscope+http://127.0.0.1:4040/pyro/")
    assert (t.kind, t.host, t.port, t.tls, t.prefix) == ("pyroscope", "127.0.0.1", 4040, False, "/pyro")
    t = parse_target("parca+grpcs://[::1]")
    assert (t.kind, t.host, t.port, t.tls) == ("parca", "::1", 443, True)
    assert parse_target("parca+grpc://h").port == 7070 and parse_target("pyroscope+http://h").port == 4040


@pytest.mark.parametrize(("url", "message"), [
    ("127.0.0.1:4040", "no scheme"),
    ("http://127.0.0.1:4040", "unknown scheme 'http'"),
    ("pyroscope+http://", "no host"),
    ("pyroscope+http://h:99999", "Port out of range"),
    ("pyroscope+http://h:x", "Port could not be cast"),
    ("pyroscope+http://h?x=1", "a query or fragment is not allowed"),
    ("pyroscope+http://u:p@h", "credentials in the URL are not supported"),
    ("parca+grpc://h:7070/x", "a gRPC address has no path"),
    ("parca+grpc://h:0", "port 0"),
])
def test_malformed_urls_are_one_line(url: str, message: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_target(url)
    assert str(e.value).startswith(f"push URL {url!r}: ") and message in str(e.value) and "\n" not in str(e.value)


def test_labels() -> None:
    assert parse_labels(["service=api", "host.name=web-1"]) == {"service": "api", "host.name": "web-1"}
    for bad in ("service", "=x", "1a=b", "a=", "a=b,c", "a=b}"):
        with pytest.raises(UsageError, match="--label"):
            parse_labels([bad])


# --- Pyroscope ------------------------------------------------------------------------------


def test_pyroscope_request_shape(pyroscope: PyroscopeServer, timed_profile: Path) -> None:
    # GIVEN a real pprof of the known profile's dump
    with open_profile(timed_profile) as p:
        built = build(p, pid=100)
    pusher = Pusher(pyroscope.url, {"service": "api", "region": "eu"})
    # WHEN it is pushed
    assert pusher.submit(PushItem(built.data, built.start_unix_ns, built.end_unix_ns, (("pid", "100"),)))
    got = pyroscope.wait_for(1)[0]
    stats = pusher.close()
    # THEN the server got the documented request: app name with labels, times, the profile, the config
    assert got.labels == {"__app__": "api", "service": "api", "region": "eu", "pid": "100"}
    assert (int(got.query["from"]), int(got.query["until"])) == (1_700_000_000, 1_700_000_001)
    assert got.query["format"] == "pprof" and got.profile == built.data
    assert {t: c["aggregation"] for t, c in got.sample_type_config.items()} == {
        "inuse_space": "average", "inuse_objects": "average", "alloc_space": "sum", "alloc_objects": "sum"}
    assert (stats.sent, stats.failed, stats.dropped, stats.sent_bytes) == (1, 0, 0, len(built.data))
    assert pusher.summary().startswith(f"push to {pyroscope.url}: 1 of 1 profiles sent")


def test_retries_5xx_then_succeeds(pyroscope: PyroscopeServer) -> None:
    pyroscope.fail_first = [503, 500]
    pusher = Pusher(pyroscope.url, backoff=0.01)
    pusher.submit(item())
    pyroscope.wait_for(1)
    stats = pusher.close()
    assert (stats.sent, stats.retries, stats.failed, pyroscope.requests) == (1, 2, 0, 3)


def test_4xx_is_final(pyroscope: PyroscopeServer) -> None:
    pyroscope.fail_first = [400]
    pusher = Pusher(pyroscope.url, backoff=0.01)
    pusher.submit(item())
    stats = pusher.close(drain_timeout=20)
    assert (stats.sent, stats.failed, stats.retries, pyroscope.requests) == (0, 1, 0, 1)
    assert stats.last_error == "dump 0: HTTP 400 Bad Request: failing on purpose"
    assert pusher.summary().endswith("0 of 1 profiles sent (0.0 KiB); 1 failed (last error: dump 0: HTTP 400"
                                     " Bad Request: failing on purpose)")


def test_unreachable_server_is_counted() -> None:
    pusher = Pusher(f"pyroscope+http://127.0.0.1:{free_port()}", attempts=2, backoff=0.01)
    for n in range(3):
        pusher.submit(item(n))
    stats = pusher.close(drain_timeout=20)
    assert (stats.sent, stats.failed, stats.dropped) == (0, 3, 0)
    assert stats.retries == 1  # the first profile used its tries; the server was down for the next ones
    assert stats.last_error == "dump 2: connection refused"


def test_slow_server_times_out(pyroscope: PyroscopeServer) -> None:
    pyroscope.hold = threading.Event()  # every request waits until the test ends
    pusher = Pusher(pyroscope.url, attempts=1, timeout=0.3)
    pusher.submit(item())
    stats = pusher.close(drain_timeout=20)
    assert (stats.sent, stats.failed) == (0, 1)
    assert stats.last_error == "dump 0: no answer within 0.3 s"


def test_submit_never_blocks_and_counts_drops(pyroscope: PyroscopeServer) -> None:
    # GIVEN a server that does not answer until released, and a queue of 2
    pyroscope.hold = threading.Event()
    pusher = Pusher(pyroscope.url, queue_size=2, timeout=30)
    # WHEN 6 profiles are submitted
    t0 = time.monotonic()
    accepted = [pusher.submit(item(n)) for n in range(6)]
    elapsed = time.monotonic() - t0
    # THEN at most one is in flight and two queued; the rest are dropped at once
    assert accepted.count(False) >= 3 and elapsed < 5
    pyroscope.hold.set()
    stats = pusher.close(drain_timeout=20)
    assert stats.sent + stats.dropped == 6 and stats.sent == accepted.count(True)
    assert stats.dropped == accepted.count(False)


def test_close_gives_up_after_drain_timeout(pyroscope: PyroscopeServer) -> None:
    pyroscope.hold = threading.Event()
    pusher = Pusher(pyroscope.url, queue_size=5, timeout=30)
    for n in range(3):
        pusher.submit(item(n))
    t0 = time.monotonic()
    stats = pusher.close(drain_timeout=0.2)
    # close returns at the deadline: the request in flight waits no longer than it (failed, or
    # abandoned and dropped when it is still in flight), queued ones are dropped
    assert time.monotonic() - t0 < 5
    assert stats.sent == 0 and stats.dropped + stats.failed == 3 and stats.failed <= 1
    pyroscope.hold.set()
    assert pyroscope.wait_for(1) and stats.sent == 0  # the late answer changes no counter


def test_sender_bug_is_counted_not_raised() -> None:
    class Broken:
        timeout = 1.0

        def send(self, item: PushItem, timeout: float) -> None:
            raise RuntimeError("oops")

        def close(self) -> None:
            pass

    pusher = Pusher("pyroscope+http://127.0.0.1:1", sender=Broken())
    pusher.submit(item())
    stats = pusher.close()
    assert (stats.failed, stats.last_error) == (1, "dump 0: RuntimeError: oops")


# --- Parca ----------------------------------------------------------------------------------


def test_parca_write_raw(parca: ParcaServer, timed_profile: Path) -> None:
    with open_profile(timed_profile) as p:
        built = build(p)
    pusher = Pusher(parca.url, {"service": "api"})
    pusher.submit(PushItem(built.data, built.start_unix_ns, built.end_unix_ns))
    got = parca.wait_for(1)[0]
    stats = pusher.close()
    assert got.labels == {"__name__": "memory", "service": "api"} and got.profile == built.data
    assert stats.sent == 1


def test_parca_retryable_and_final_codes(pb2: ModuleType) -> None:
    import grpc

    server = ParcaServer(pb2, fail_first=[grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INVALID_ARGUMENT])
    try:
        pusher = Pusher(server.url, backoff=0.01)
        pusher.submit(item(1))
        stats = pusher.close(drain_timeout=20)
    finally:
        server.close()
    assert (stats.sent, stats.failed, stats.retries) == (0, 1, 1)
    assert stats.last_error == "dump 1: gRPC INVALID_ARGUMENT: failing on purpose"


def test_parca_unreachable_and_deadline(pb2: ModuleType) -> None:
    pusher = Pusher(f"parca+grpc://127.0.0.1:{free_port()}", attempts=1, timeout=2)
    pusher.submit(item())
    stats = pusher.close(drain_timeout=20)
    assert stats.failed == 1 and stats.last_error.startswith("dump 0: gRPC UNAVAILABLE")
    server = ParcaServer(pb2)
    server.hold = threading.Event()
    try:
        pusher = Pusher(server.url, attempts=1, timeout=0.3)
        pusher.submit(item())
        stats = pusher.close(drain_timeout=20)
    finally:
        server.close()
    assert stats.last_error == "dump 0: no answer within 0.3 s"


def test_sample_type_config_is_json() -> None:
    assert json.loads(json.dumps(push.SAMPLE_TYPE_CONFIG))["inuse_space"]["units"] == "bytes"
