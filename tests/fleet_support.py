"""Loopback servers for the fleet tests: what Pyroscope's /ingest and Parca's WriteRaw accept.

Each server checks the request shape its project documents (Pyroscope: the
server API page's `/ingest` with `format=pprof` and a multipart body of
`profile` + `sample_type_config`; Parca: ProfileStoreService/WriteRaw decoded
with classes protoc generates from src/heapscope/fleet/profilestore.proto), keeps
what it received, and can answer with given failure statuses first. Servers
bind 127.0.0.1 on a free port and are stopped by the fixture that made them.
"""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

PROTO = Path(__file__).resolve().parents[1] / "src" / "heapscope" / "fleet" / "profilestore.proto"
_NAME = re.compile(r"^(?P<app>[A-Za-z0-9_.\-]+)\{(?P<labels>[^{}]*)\}$")
GO_TYPES = ("alloc_objects", "alloc_space", "inuse_objects", "inuse_space")


@dataclass
class Received:
    """One accepted push."""

    labels: dict[str, str]
    profile: bytes
    query: dict[str, str] = field(default_factory=dict)
    sample_type_config: dict[str, dict[str, object]] = field(default_factory=dict)


class _Base:
    def __init__(self, fail_first: list[object] | None = None) -> None:
        self.received: list[Received] = []
        self.requests = 0
        self.fail_first = list(fail_first or [])
        self.hold: threading.Event | None = None  # when set: every request waits for it (a slow server)
        self.cond = threading.Condition()

    def wait_for(self, n: int, timeout: float = 20) -> list[Received]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.received) >= n, timeout=timeout), (
                f"{len(self.received)} of {n} profiles received")
            return list(self.received)

    def _next_failure(self) -> object | None:
        with self.cond:
            self.requests += 1
            return self.fail_first.pop(0) if self.fail_first else None

    def _keep(self, r: Received) -> None:
        with self.cond:
            self.received.append(r)
            self.cond.notify_all()


class PyroscopeServer(_Base):
    """POST /ingest?name=APP{k=v,...}&from=&until=&format=pprof, multipart profile + sample_type_config."""

    def __init__(self, fail_first: list[object] | None = None) -> None:
        super().__init__(fail_first)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if owner.hold is not None:
                    owner.hold.wait(timeout=30)
                status = owner._next_failure()
                if status is not None:
                    assert isinstance(status, int), status  # an HTTP status, for this server
                    self._answer(status, b"failing on purpose\n")
                    return
                problem, received = owner.check(self.path, self.headers.get("Content-Type", ""), body)
                if problem:
                    self._answer(400, problem.encode() + b"\n")
                    return
                assert received is not None
                owner._keep(received)
                self._answer(200, b"")

            def _answer(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"pyroscope+http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @staticmethod
    def check(path: str, content_type: str, body: bytes) -> tuple[str, Received | None]:
        url = urlsplit(path)
        if url.path != "/ingest":
            return f"{url.path}: not /ingest", None
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        for need in ("name", "from", "until"):
            if need not in q:
                return f"{need} missing", None
        if q.get("format") != "pprof":
            return "format is not pprof", None
        if not (q["from"].isdigit() and q["until"].isdigit() and int(q["from"]) <= int(q["until"])):
            return "from/until are not UNIX seconds in order", None
        m = _NAME.match(q["name"])
        if not m:
            return f"name {q['name']!r} is not APP{{k=v,...}}", None
        labels = dict(kv.split("=", 1) for kv in m["labels"].split(",") if kv)
        labels["__app__"] = m["app"]
        if not content_type.startswith("multipart/form-data"):
            return "not multipart/form-data", None
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        parts = {p.get_param("name", header="content-disposition"): _payload(p) for p in msg.iter_parts()}
        if "profile" not in parts:
            return "no profile part", None
        config = json.loads(parts.get("sample_type_config") or b"{}")
        for t in GO_TYPES:
            c = config.get(t)
            if not isinstance(c, dict) or c.get("aggregation") not in ("sum", "average") or not c.get("units"):
                return f"sample_type_config has no valid entry for {t}", None
        return "", Received(labels, parts["profile"], q, config)

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


def _payload(part: email.message.Message) -> bytes:
    """A form part's content, decoded (a non-multipart part's decoded payload is bytes)."""
    data = part.get_payload(decode=True)
    assert isinstance(data, bytes), type(data)
    return data


def parca_messages(out_dir: Path) -> ModuleType:
    """profilestore_pb2 generated by protoc (grpcio-tools) from the committed .proto."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={out_dir}", str(PROTO)])
    assert rc == 0, f"protoc failed on {PROTO}"
    spec = importlib.util.spec_from_file_location(f"profilestore_pb2_{os.getpid()}", out_dir / "profilestore_pb2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ParcaServer(_Base):
    """parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw; fail_first holds grpc.StatusCode values."""

    def __init__(self, pb2: ModuleType, fail_first: list[object] | None = None) -> None:
        import grpc

        super().__init__(fail_first)
        owner = self

        def write_raw(request: object, context: grpc.ServicerContext) -> object:
            if owner.hold is not None:
                owner.hold.wait(timeout=30)
            code = owner._next_failure()
            if code is not None:
                context.abort(code, "failing on purpose")
            for series in request.series:  # type: ignore[attr-defined]
                labels = {lb.name: lb.value for lb in series.labels.labels}
                for s in series.samples:
                    owner._keep(Received(labels, bytes(s.raw_profile)))
            return pb2.WriteRawResponse()

        handler = grpc.method_handlers_generic_handler("parca.profilestore.v1alpha1.ProfileStoreService", {
            "WriteRaw": grpc.unary_unary_rpc_method_handler(
                write_raw, request_deserializer=pb2.WriteRawRequest.FromString,
                response_serializer=pb2.WriteRawResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.url = f"parca+grpc://127.0.0.1:{self.port}"
        self.server.start()

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.stop(grace=None).wait(timeout=10)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- go tool pprof ------------------------------------------------------------------------


def go_missing() -> str | None:
    return None if shutil.which("go") else "go is not installed (apt-get install golang-go; .ci/run does)"


def go_pprof(args: list[str], tmp: Path, timeout: float = 120) -> str:
    env = dict(os.environ, GOCACHE=str(tmp / "gocache"), HOME=str(tmp), PPROF_TMPDIR=str(tmp))
    proc = subprocess.run(["go", "tool", "pprof", *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"go tool pprof {' '.join(args)}: rc {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def raw_totals(raw: str) -> dict[str, int]:
    """Totals per sample type of `go tool pprof -raw` output (types as its header names them)."""
    lines = raw.splitlines()
    try:
        start = lines.index("Samples:")
    except ValueError:
        return {}
    header = [t.split("/")[0] for t in lines[start + 1].replace("[dflt]", "").split()]
    sums = dict.fromkeys(header, 0)
    for line in lines[start + 2:]:
        if not line.startswith(" "):
            break
        m = re.match(r"^\s+((?:-?\d+\s+)*-?\d+):", line)
        if m:
            for t, v in zip(header, m.group(1).split(), strict=True):
                sums[t] += int(v)
    return sums


def iter_labels(raw: str) -> Iterator[str]:
    """The label lines of `go tool pprof -raw` samples, e.g. `pid:[1234]`."""
    for line in raw.splitlines():
        s = line.strip()
        if re.match(r"^[a-z_]+:\[.*\]$", s):
            yield s


__all__ = ["GO_TYPES", "ParcaServer", "PyroscopeServer", "Received", "free_port", "go_missing", "go_pprof",
           "iter_labels", "parca_messages", "raw_totals"]


# --- OpenTelemetry collectors -----------------------------------------------------------------

OTLP_INSTALL = "needs opentelemetry-proto: pip install '.[otlp]'"


class OtlpHttpServer(_Base):
    """POST /v1development/profiles with a protobuf ExportProfilesServiceRequest (gzip or not), as
    opentelemetry-proto's docs/specification.md describes OTLP/HTTP; `received` keeps each request
    decoded (Received.profile holds the decoded body, Received.labels the request's headers)."""

    def __init__(self, fail_first: list[object] | None = None, answer: bytes | None = None) -> None:
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as service

        super().__init__(fail_first)
        owner = self
        self.requests_decoded: list[Any] = []  # protobuf messages (no stubs)
        ok = answer if answer is not None else service.ExportProfilesServiceResponse().SerializeToString()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = owner._next_failure()
                if status is not None:
                    assert isinstance(status, int), status  # an HTTP status, for this server
                    self._answer(status, b"failing on purpose")
                    return
                if self.path != "/v1development/profiles":
                    self._answer(404, f"{self.path}: not /v1development/profiles".encode())
                    return
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self._answer(415, b"not application/x-protobuf")
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                try:
                    req = service.ExportProfilesServiceRequest.FromString(body)
                except Exception as e:  # noqa: BLE001 - a bad body is the client's bug, said in the answer
                    self._answer(400, f"undecodable: {e}".encode())
                    return
                owner.requests_decoded.append(req)
                owner._keep(Received(dict(self.headers.items()), body))
                self._answer(200, ok, "application/x-protobuf")

            def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"otlp+http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class OtlpGrpcServer(_Base):
    """opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export over gRPC, with the
    messages and service name of the opentelemetry-proto package; fail_first holds grpc.StatusCode values."""

    def __init__(self, fail_first: list[object] | None = None) -> None:
        import grpc
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as service

        super().__init__(fail_first)
        owner = self
        self.requests_decoded: list[Any] = []  # protobuf messages (no stubs)

        def export(request: object, context: grpc.ServicerContext) -> object:
            code = owner._next_failure()
            if code is not None:
                context.abort(code, "failing on purpose")
            owner.requests_decoded.append(request)
            owner._keep(Received({}, request.SerializeToString()))  # type: ignore[attr-defined]
            return service.ExportProfilesServiceResponse()

        name = service.DESCRIPTOR.services_by_name["ProfilesService"].full_name
        handler = grpc.method_handlers_generic_handler(name, {
            "Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=service.ExportProfilesServiceRequest.FromString,
                response_serializer=service.ExportProfilesServiceResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.url = f"otlp+grpc://127.0.0.1:{self.port}"
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None).wait(timeout=10)


def otlp_totals(data: object) -> dict[str, int]:
    """Summed values per sample type of a decoded ProfilesData or ExportProfilesServiceRequest."""
    d = data.dictionary  # type: ignore[attr-defined]
    out: dict[str, int] = {}
    for rp in data.resource_profiles:  # type: ignore[attr-defined]
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                t = d.string_table[prof.sample_type.type_strindex]
                out[t] = out.get(t, 0) + sum(sum(s.values) for s in prof.samples)
    return out
