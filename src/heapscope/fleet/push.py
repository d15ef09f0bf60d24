"""Push profiles to Pyroscope (HTTP /ingest) or Parca (gRPC WriteRaw), never in the recording's way.

    pyroscope+http://HOST:PORT[/PREFIX]   POST PREFIX/ingest?name=APP{labels}&from=&until=&format=pprof,
    pyroscope+https://...                   multipart: `profile` (gzip pprof) + `sample_type_config` (JSON)
    parca+grpc://HOST:PORT                parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw,
    parca+grpcs://HOST:PORT                 one series {__name__="memory", labels...} with the pprof
    otlp+http[s]://HOST:PORT[/PREFIX]     an OpenTelemetry collector: OTLP profiles (heapscope.fleet.otlp)
    otlp+grpc[s]://HOST:PORT

Pyroscope's request is the one its server documents for pprof with a sample
type configuration (docs/sources/.../about-server-api in grafana/pyroscope):
in-use types are averaged over time, alloc types summed. NB: heapscope's alloc
values are totals since the process started, as in Go's heap profile; a sum
of alloc_space over several pushed dumps counts an allocation once per dump,
so read alloc types at one point in time. The app name is the `service_name`
label, else `service`, else "heapscope"; the other labels go in the braces.

Pusher: `submit()` puts a profile on a bounded queue and returns at once
(False, and `dropped` counted, when the queue is full); one worker thread sends
them in order, retrying connection failures, timeouts, HTTP 429/5xx and the
retryable gRPC codes with exponential backoff; other 4xx and gRPC errors are
final. `close(drain_timeout)` gives what is still queued that long, then counts
the rest as dropped; `deadline` (a time of `clock`) ends it all earlier: no
request waits past it, whatever its own timeout. Nothing here raises into the caller after construction:
a server that is down costs the recording a counted, reported loss.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol
from urllib.parse import quote, urlencode, urlsplit

from heapscope.errors import UsageError
from heapscope.fleet.items import PushError, PushItem, PushTarget, grpc_channel, grpc_failure, post
from heapscope.records import Record
from heapscope.units import format_in

SCHEMES = ("pyroscope+http", "pyroscope+https", "parca+grpc", "parca+grpcs", "otlp+http", "otlp+https", "otlp+grpc",
           "otlp+grpcs")
# Default ports: Pyroscope's and Parca's, and OTLP's (4318 HTTP, 4317 gRPC).
_PORTS = {"https": 443, "grpcs": 443, "http": 4040, "grpc": 7070, "otlp+http": 4318, "otlp+https": 4318,
          "otlp+grpc": 4317, "otlp+grpcs": 4317}
PARCA_NAME = "memory"  # Parca's __name__ for heap profiles (parca-agent, Go's /debug/pprof/heap scrapes)

# Pyroscope's sample type configuration for the four Go heap sample types.
SAMPLE_TYPE_CONFIG = {
    "inuse_space": {"units": "bytes", "aggregation": "average", "sampled": False},
    "inuse_objects": {"units": "objects", "aggregation": "average", "sampled": False},
    "alloc_space": {"units": "bytes", "aggregation": "sum", "sampled": False},
    "alloc_objects": {"units": "objects", "aggregation": "sum", "sampled": False},
}

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_RETRY_GRPC = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL",
                         "UNKNOWN"})


class PushStats(Record):
    """What became of the profiles handed to a Pusher."""

    submitted: int = 0
    sent: int = 0
    sent_bytes: int = 0
    failed: int = 0  # given up: a final error, or retries used up
    dropped: int = 0  # never sent: queue full, or still queued at close
    retries: int = 0
    last_error: str = ""


def parse_target(url: str) -> PushTarget:
    """Parse a push URL; one UsageError line naming the problem when it is malformed."""
    want = "pyroscope+http://HOST:PORT, parca+grpc://HOST:PORT or otlp+http://HOST:PORT"
    scheme, sep, _rest = url.partition("://")
    if not sep:
        raise UsageError(f"push URL {url!r}: no scheme (expected {want})")
    if scheme not in SCHEMES:
        raise UsageError(f"push URL {url!r}: unknown scheme {scheme!r} (one of: {', '.join(SCHEMES)})")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UsageError(f"push URL {url!r}: {e}") from e
    host = parts.hostname or ""
    if not host:
        raise UsageError(f"push URL {url!r}: no host (expected {want})")
    if parts.query or parts.fragment:
        raise UsageError(f"push URL {url!r}: a query or fragment is not allowed")
    if parts.username or parts.password:
        raise UsageError(f"push URL {url!r}: credentials in the URL are not supported")
    kind, _, transport = scheme.partition("+")
    tls = transport in ("https", "grpcs")
    if transport.startswith("grpc") and parts.path not in ("", "/"):
        raise UsageError(f"push URL {url!r}: a gRPC address has no path")
    if port is None:
        port = _PORTS.get(scheme, _PORTS[transport])
    if port == 0:
        raise UsageError(f"push URL {url!r}: port 0")
    if kind == "otlp":
        kind = "otlp-grpc" if transport.startswith("grpc") else "otlp-http"
    return PushTarget(url=url, kind=kind, host=host, port=port, tls=tls, prefix=parts.path.rstrip("/"))


def parse_labels(items: Sequence[str]) -> dict[str, str]:
    """`k=v` strings -> dict; UsageError for a malformed one. Values may not hold `,{}=\"`."""
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not _LABEL_NAME.match(k):
            raise UsageError(f"--label {item!r}: expected NAME=VALUE with NAME like service or host_name")
        if not v or any(c in v for c in ',{}="\n'):
            raise UsageError(f"--label {item!r}: the value must be non-empty, without , {{ }} = or quotes")
        out[k] = v
    return out


class Sender(Protocol):
    def send(self, item: PushItem, timeout: float) -> None:
        """Send one profile, waiting at most `timeout` seconds; raises PushError."""

    def close(self) -> None: ...


class PyroscopeSender:
    """POST /ingest with a multipart body, over http.client (one connection per request)."""

    def __init__(self, target: PushTarget, labels: dict[str, str], timeout: float) -> None:
        self.target, self.timeout = target, timeout
        labels = dict(labels)
        self.app = labels.get("service_name") or labels.get("service") or "heapscope"
        labels.pop("service_name", None)
        self.labels = labels

    def request(self, item: PushItem) -> tuple[str, bytes, str]:
        """(path with query, body, content type) for `item`."""
        labels = {**self.labels, **dict(item.labels)}
        name = self.app + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
        start = item.start_unix_ns // 1_000_000_000
        until = max(start + 1, -(-item.end_unix_ns // 1_000_000_000))
        query = urlencode({"name": name, "from": start, "until": until, "format": "pprof",
                           "spyName": "heapscope"}, quote_via=quote)
        boundary = f"heapscope-{uuid.uuid4().hex}"
        body = b"".join((
            _part(boundary, "profile", "profile.pprof", "application/octet-stream", item.pprof),
            _part(boundary, "sample_type_config", "sample_type_config.json", "application/json",
                  json.dumps(SAMPLE_TYPE_CONFIG, sort_keys=True).encode()),
            f"--{boundary}--\r\n".encode(),
        ))
        return f"{self.target.prefix}/ingest?{query}", body, f"multipart/form-data; boundary={boundary}"

    def send(self, item: PushItem, timeout: float) -> None:
        path, body, content_type = self.request(item)
        status, reason, answer = post(self.target, path, body, {"Content-Type": content_type}, timeout, 4096)
        if 200 <= status < 300:
            return
        text = answer.decode("utf-8", "replace").strip().splitlines()
        detail = f": {text[0][:200]}" if text else ""
        raise PushError(f"HTTP {status} {reason}{detail}", retry=status == 429 or status >= 500)

    def close(self) -> None:
        pass


class ParcaSender:
    """ProfileStoreService/WriteRaw over one gRPC channel (grpcio)."""

    def __init__(self, target: PushTarget, labels: dict[str, str], timeout: float) -> None:
        try:
            import grpc
        except ModuleNotFoundError as e:
            raise UsageError("pushing to Parca needs grpcio and protobuf: pip install 'heapscope[fleet]'") from e
        from heapscope.fleet import _parca

        self._grpc, self._parca = grpc, _parca
        self.target, self.timeout = target, timeout
        self.labels = {**labels, "__name__": PARCA_NAME}
        self.channel = grpc_channel(grpc, target)
        self.call = self.channel.unary_unary(
            _parca.WRITE_RAW, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=_parca.WriteRawResponse.FromString)

    def send(self, item: PushItem, timeout: float) -> None:
        req = self._parca.write_raw_request(item.pprof, {**self.labels, **dict(item.labels)})
        try:
            self.call(req, timeout=timeout)
        except self._grpc.RpcError as e:
            raise grpc_failure(e, timeout, _RETRY_GRPC) from e

    def close(self) -> None:
        self.channel.close()


def make_sender(target: PushTarget, labels: dict[str, str], timeout: float) -> Sender:
    if target.kind == "parca":
        return ParcaSender(target, labels, timeout)
    if target.kind in ("otlp-http", "otlp-grpc"):
        from heapscope.fleet import otlp

        return otlp.OtlpGrpcSender(target, labels, timeout) if target.kind == "otlp-grpc" else otlp.OtlpHttpSender(
            target, labels, timeout)
    return PyroscopeSender(target, labels, timeout)


class Pusher:
    """A bounded queue and one worker thread that sends with retries. Counters in `stats`."""

    def __init__(self, target: PushTarget | str, labels: dict[str, str] | None = None, *,
                 queue_size: int = 16, attempts: int = 4, backoff: float = 0.5, max_backoff: float = 8.0,
                 timeout: float = 10.0, sender: Sender | None = None,
                 clock: Callable[[], float] = time.monotonic, deadline: float | None = None) -> None:
        self.target = parse_target(target) if isinstance(target, str) else target
        self.sender = sender or make_sender(self.target, dict(labels or {}), timeout)
        self.timeout = timeout  # of one request, at most: none waits past the deadline
        self.queue_size, self.attempts = max(1, queue_size), max(1, attempts)
        self.backoff, self.max_backoff = backoff, max_backoff
        self.stats = PushStats()
        self._clock = clock
        self._queue: deque[PushItem | Callable[[], list[PushItem]]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf") if deadline is None else deadline
        self._busy = False
        self._down = False  # the last profile failed for want of a server
        self._abandoned = False  # close() returned while a request was in flight
        self._thread = threading.Thread(target=self._run, name="heapscope-push", daemon=True)
        self._thread.start()

    def submit(self, item: PushItem | Callable[[], list[PushItem]]) -> bool:
        """Queue `item` without waiting; False (counted as dropped) when the queue is full or closed.

        `item` may be a function that makes the items, called on the worker
        thread: building pprof from a profile then costs the caller nothing.
        """
        with self._cond:
            self.stats.submitted += 1
            if self._closing or len(self._queue) >= self.queue_size:
                self.stats.dropped += 1
                self.stats.last_error = self.stats.last_error or "queue full"
                return False
            self._queue.append(item)
            self._cond.notify_all()
            return True

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + int(self._busy)

    def close(self, drain_timeout: float = 5.0) -> PushStats:
        """Send what is queued for at most `drain_timeout` seconds, then stop; returns the counters."""
        with self._cond:
            self._closing = True
            self._deadline = min(self._deadline, self._clock() + max(0.0, drain_timeout))
            self._cond.notify_all()
        self._thread.join(timeout=drain_timeout + 0.5)
        with self._cond:
            self.stats.dropped += len(self._queue)
            self._queue.clear()
            if self._thread.is_alive():
                # A request still in flight is left to its own timeout on the
                # daemon worker; it counts as dropped whatever becomes of it.
                self._abandoned = True
                self.stats.dropped += int(self._busy)
                return self.stats
        self.sender.close()
        return self.stats

    def summary(self) -> str:
        """One line: what was pushed where, and what was lost and why."""
        s = self.stats
        line = f"push to {self.target.url}: {s.sent} of {s.submitted} profiles sent ({format_in(s.sent_bytes, 'KiB')})"
        lost = []
        if s.failed:
            lost.append(f"{s.failed} failed")
        if s.dropped:
            lost.append(f"{s.dropped} dropped")
        if lost:
            line += f"; {', '.join(lost)} (last error: {s.last_error or 'none'})"
        if s.retries:
            line += f"; {s.retries} retries"
        return line

    # --- the worker --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue or self._clock() >= self._deadline:
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                if isinstance(item, PushItem):
                    self._deliver(item)
                else:
                    self._make_and_deliver(item)
            finally:
                with self._cond:
                    self._busy = False

    def _make_and_deliver(self, make: Callable[[], list[PushItem]]) -> None:
        try:
            items = make()
        except Exception as e:  # a profile that cannot be read is a lost push, not a dead worker
            with self._cond:
                self.stats.failed += 1
                self.stats.last_error = f"building the profile: {e}"
            return
        with self._cond:
            self.stats.submitted += len(items) - 1  # the function was counted as one profile
        for it in items:
            self._deliver(it)

    def _deliver(self, item: PushItem) -> None:
        # While the server is known to be down (the last profile used up its
        # tries), each profile gets one try: a dead server must not make the
        # queue back up behind long backoff series.
        attempts = 1 if self._down else self.attempts
        for attempt in range(attempts):
            left = self._deadline - self._clock()
            if left <= 0:  # the deadline passed between tries: this profile is not sent
                with self._cond:
                    if not self._abandoned:
                        self.stats.dropped += 1
                return
            try:
                self.sender.send(item, min(self.timeout, left))
            except PushError as e:
                error = e
            except Exception as e:  # a bug in a sender must not kill the worker silently
                error = PushError(f"{type(e).__name__}: {e}", retry=False)
            else:
                with self._cond:
                    if self._abandoned:
                        return
                    self.stats.sent += 1
                    self.stats.sent_bytes += len(item.pprof)
                self._down = False
                return
            with self._cond:
                if self._abandoned:
                    return
                self.stats.last_error = f"{item.what}: {error}"
            if not error.retry:
                break
            if attempt + 1 == attempts:
                self._down = True
                break
            delay = min(self.max_backoff, self.backoff * 2 ** attempt) * (0.5 + random.random() / 2)
            if not self._pause(delay):
                break
            with self._cond:
                self.stats.retries += 1
        with self._cond:
            if not self._abandoned:
                self.stats.failed += 1

    def _pause(self, delay: float) -> bool:
        """Wait `delay` seconds unless the drain deadline comes first; False when it did."""
        end = self._clock() + delay
        with self._cond:
            while True:
                now = self._clock()
                if now >= self._deadline:
                    return False
                if now >= end:
                    return True
                self._cond.wait(timeout=min(end, self._deadline) - now)


def _part(boundary: str, name: str, filename: str, content_type: str, data: bytes) -> bytes:
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: {content_type}\r\n\r\n")
    return head.encode() + data + b"\r\n"




__all__ = ["PushError", "PushItem", "PushStats", "PushTarget", "Pusher", "make_sender", "parse_labels",
           "parse_target"]
