"""What a push sends and to where, and how one send fails: shared by the pushers of
push.py and the OpenTelemetry senders of otlp.py, which push.py picks by scheme.

May import: heapscope.errors, heapscope.records.
"""

from __future__ import annotations

from heapscope.errors import HeapscopeError
from heapscope.records import Record


class PushError(HeapscopeError):
    """One failed send; `retry` says whether trying again may help."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class PushTarget(Record, frozen=True):
    """Where to push: a parsed push URL."""

    url: str  # as given, for messages
    kind: str  # "pyroscope", "parca", "otlp-http" or "otlp-grpc"
    host: str
    port: int
    tls: bool
    prefix: str = ""  # Pyroscope only: path before /ingest


class PushItem(Record, frozen=True):
    """One profile to send."""

    pprof: bytes  # gzip pprof; for OTLP targets the encoded ExportProfilesServiceRequest
    start_unix_ns: int
    end_unix_ns: int
    labels: tuple[tuple[str, str], ...] = ()  # extra labels of this profile (pid, executable, ...)
    what: str = "profile"  # for messages: "dump 3 of pid 1234"
