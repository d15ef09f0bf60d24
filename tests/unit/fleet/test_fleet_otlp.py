"""OTLP push targets and senders: URLs, the request each dump makes, partial successes, retries."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_support import OTLP_INSTALL, OtlpHttpServer, otlp_totals

from heapscope.fleet.push import Pusher, parse_target
from heapscope.store.reader import open_profile

service = pytest.importorskip("opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
                              reason=OTLP_INSTALL)

from heapscope.fleet.otlp import push_item  # noqa: E402


def test_targets() -> None:
    t = parse_target("otlp+http://127.0.0.1/collector/")
    assert (t.kind, t.host, t.port, t.tls, t.prefix) == ("otlp-http", "127.0.0.1", 4318, False, "/collector")
    t = parse_target("otlp+grpcs://[::1]")
    assert (t.kind, t.host, t.port, t.tls) == ("otlp-grpc", "::1", 4317, True)
    assert parse_target("otlp+https://h").port == 4318 and parse_target("otlp+grpc://h:9").port == 9
    with pytest.raises(Exception, match="a gRPC address has no path"):
        parse_target("otlp+grpc://h:4317/x")


def test_one_request_per_dump(timed_profile: Path) -> None:
    # GIVEN the known profile's process and its dumps
    with open_profile(timed_profile) as p:
        proc = next(q for q in p.processes() if p.dumps(q.info.upid))
        dumps = p.dumps(proc.info.upid)
        items = [push_item(p, proc, n) for n in range(1, len(dumps) + 1)]
    # THEN each is one process's four Profiles of that dump, at the dump's wall-clock time
    for item, d in zip(items, dumps, strict=True):
        req = service.ExportProfilesServiceRequest.FromString(item.pprof)
        (rp,) = req.resource_profiles
        assert {a.key: a.value.int_value for a in rp.resource.attributes}["process.pid"] == proc.info.pid
        assert len(rp.scope_profiles[0].profiles) == 4
        assert {q.time_unix_nano for q in rp.scope_profiles[0].profiles} == {item.end_unix_ns}
        assert item.end_unix_ns == 1_700_000_000_000_000_000 + d.ts_end
        assert set(otlp_totals(req)) <= {"alloc_space", "alloc_objects", "inuse_space", "inuse_objects"}


def test_a_partial_success_that_rejects_is_a_failure(timed_profile: Path) -> None:
    # GIVEN a collector that answers 200 with rejected_profiles
    answer = service.ExportProfilesServiceResponse()
    answer.partial_success.rejected_profiles = 4
    answer.partial_success.error_message = "too old"
    server = OtlpHttpServer(answer=answer.SerializeToString())
    try:
        with open_profile(timed_profile) as p:
            proc = next(q for q in p.processes() if p.dumps(q.info.upid))
            item = push_item(p, proc, 1)
        pusher = Pusher(server.url, {}, attempts=3, backoff=0.01)
        assert pusher.submit(item)
        stats = pusher.close(drain_timeout=20)
    finally:
        server.close()
    # THEN it is not retried (the specification forbids it) and counts as failed, saying why
    assert (stats.sent, stats.failed, stats.retries, server.requests) == (0, 1, 0, 1)
    assert stats.last_error.endswith("4 profiles rejected: too old")
