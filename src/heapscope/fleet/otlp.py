"""Push to an OpenTelemetry collector: OTLP profiles over HTTP or gRPC.

    otlp+http://HOST:PORT[/PREFIX]   POST PREFIX/v1development/profiles, an ExportProfilesServiceRequest
    otlp+https://...                   (protobuf, gzip-encoded), default port 4318
    otlp+grpc://HOST:PORT            opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export,
    otlp+grpcs://HOST:PORT             default port 4317

One request per dump of a process: the four Profiles heapscope.export.otlp
writes for that state, the process's attributes on its Resource. The push
labels (--label) are added to the Resource too, with `host` and `service`
spelled as the semantic conventions do (host.name, service.name).

Retries follow the OTLP specification (docs/specification.md of
opentelemetry-proto): HTTP 429, 502, 503 and 504 and the gRPC codes
CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE and
DATA_LOSS are retried; any other failure, and a partial success that
rejected profiles, is final.
"""

from __future__ import annotations

import gzip
from typing import Any

from heapscope.errors import UsageError
from heapscope.export import otlp
from heapscope.export._common import wall_clock
from heapscope.fleet.items import PushError, PushItem, PushTarget, grpc_channel, grpc_failure, post
from heapscope.store.reader import Process, Profile

PATH = "/v1development/profiles"
_RETRY_HTTP = frozenset({429, 502, 503, 504})
_RETRY_GRPC = frozenset({"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"})
#: Push labels that have a semantic-convention name of their own.
_SEMCONV = {"host": "host.name", "service": "service.name", "service_name": "service.name"}


def push_item(profile: Profile, p: Process, n: int) -> PushItem:
    """Dump `n` (1 = first) of process `p` as one encoded ExportProfilesServiceRequest (in the
    item's `pprof` field, the bytes the sender sends)."""
    data = otlp.build(profile, process=p, dump=n)
    _pb, _common, _resource, service = otlp.messages()
    req = service.ExportProfilesServiceRequest()  # ProfilesData's fields, under the collector's name
    req.resource_profiles.extend(data.resource_profiles)
    req.dictionary.CopyFrom(data.dictionary)
    d = profile.dumps(p.info.upid)[n - 1]
    to_unix = wall_clock(profile)
    return PushItem(req.SerializeToString(), to_unix(d.ts), to_unix(d.ts_end), (("pid", str(p.info.pid)),),
                    f"dump {n} of pid {p.info.pid}")


def _with_labels(body: bytes, labels: dict[str, str]) -> bytes:
    """The request `body` with `labels` as attributes of each Resource (a label the process's own
    attributes already name is left to those)."""
    if not labels:
        return body
    _pb, common, _resource, service = otlp.messages()
    req = service.ExportProfilesServiceRequest.FromString(body)
    for rp in req.resource_profiles:
        have = {a.key for a in rp.resource.attributes}
        for k, v in sorted(labels.items()):
            key = _SEMCONV.get(k, k)
            if key not in have:
                rp.resource.attributes.add(key=key, value=common.AnyValue(string_value=v))
                have.add(key)
    out: bytes = req.SerializeToString()
    return out


def _rejected(response: bytes, service: Any) -> str:
    """'' when the response accepted everything, else the partial-success message."""
    try:
        resp = service.ExportProfilesServiceResponse.FromString(response)
    except Exception:  # a 200 whose body is no response: the data was accepted
        return ""
    ps = resp.partial_success
    if ps.rejected_profiles > 0:
        return f"{ps.rejected_profiles} profiles rejected" + (f": {ps.error_message[:200]}" if ps.error_message else "")
    return ""


class OtlpHttpSender:
    """POST PREFIX/v1development/profiles over http.client (one connection per request)."""

    def __init__(self, target: PushTarget, labels: dict[str, str], timeout: float) -> None:
        self.service = otlp.messages()[3]
        self.target, self.labels, self.timeout = target, dict(labels), timeout

    def send(self, item: PushItem, timeout: float) -> None:
        body = gzip.compress(_with_labels(item.pprof, self.labels), compresslevel=6, mtime=0)
        # 4 MiB: the response limit the specification recommends.
        status, reason, answer = post(self.target, self.target.prefix + PATH, body, {
            "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}, timeout, 4 << 20)
        if 200 <= status < 300:
            rejected = _rejected(answer, self.service)
            if rejected:
                raise PushError(rejected, retry=False)
            return
        raise PushError(f"HTTP {status} {reason}{_detail(answer)}", retry=status in _RETRY_HTTP)

    def close(self) -> None:
        pass


class OtlpGrpcSender:
    """ProfilesService/Export over one gRPC channel (grpcio, the [fleet] extra)."""

    def __init__(self, target: PushTarget, labels: dict[str, str], timeout: float) -> None:
        try:
            import grpc
        except ModuleNotFoundError as e:
            raise UsageError("pushing OTLP over gRPC needs grpcio: pip install 'heapscope[fleet,otlp]'") from e
        self.service = otlp.messages()[3]
        self._grpc = grpc
        self.target, self.labels, self.timeout = target, dict(labels), timeout
        self.channel = grpc_channel(grpc, target)
        # The method's name as the package's own service descriptor spells it.
        method = self.service.DESCRIPTOR.services_by_name["ProfilesService"].methods_by_name["Export"]
        self.call = self.channel.unary_unary(
            f"/{method.containing_service.full_name}/{method.name}",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)

    def send(self, item: PushItem, timeout: float) -> None:
        try:
            answer = self.call(_with_labels(item.pprof, self.labels), timeout=timeout,
                               compression=self._grpc.Compression.Gzip)
        except self._grpc.RpcError as e:
            raise grpc_failure(e, timeout, _RETRY_GRPC) from e
        rejected = _rejected(answer, self.service)
        if rejected:
            raise PushError(rejected, retry=False)

    def close(self) -> None:
        self.channel.close()


def _detail(answer: bytes) -> str:
    """The first readable line of an error body (a google.rpc.Status in protobuf, or text)."""
    text = "".join(c for c in answer.decode("utf-8", "replace") if c.isprintable() or c == "\n").strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f": {lines[0][:200]}" if lines else ""
