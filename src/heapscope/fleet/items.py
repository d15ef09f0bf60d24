"""What a push sends and to where, and how one send fails: shared by the pushers of
push.py and the OpenTelemetry senders of otlp.py, which push.py picks by scheme.

May import: heapscope.errors, heapscope.records.
"""

from __future__ import annotations

from heapscope.errors import HeapscopeError
from heapscope.records import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from typing import Any


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


def post(target: PushTarget, path: str, body: bytes, headers: dict[str, str], timeout: float,
         read_limit: int) -> tuple[int, str, bytes]:
    """One POST of `body` to `target`'s host over a connection of its own: (status, reason, the
    answer's first `read_limit` bytes). What fails before an answer is a PushError saying whether
    to try again: a timeout or a network error may pass, a TLS failure will not."""
    import http.client
    import ssl

    conn: http.client.HTTPConnection
    if target.tls:
        conn = http.client.HTTPSConnection(target.host, target.port, timeout=timeout,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={**headers, "User-Agent": "heapscope"})
        resp = conn.getresponse()
        return resp.status, resp.reason, resp.read(read_limit)
    except TimeoutError as e:
        raise PushError(f"no answer within {timeout:.3g} s", retry=True) from e
    except ssl.SSLError as e:
        raise PushError(f"TLS: {e.reason or e}", retry=False) from e
    except (OSError, http.client.HTTPException) as e:
        raise PushError(_network_error(e), retry=True) from e
    finally:
        conn.close()


def _network_error(e: BaseException) -> str:
    import socket

    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve host ({e.strerror or e})"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def grpc_channel(grpc: Any, target: PushTarget) -> Any:
    """A gRPC channel to `target` (grpcio passed in: it is an optional import)."""
    address = f"[{target.host}]:{target.port}" if ":" in target.host else f"{target.host}:{target.port}"
    if target.tls:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials())
    return grpc.insecure_channel(address)


def grpc_failure(e: Any, timeout: float, retry_codes: frozenset[str]) -> PushError:
    """A failed gRPC call (a grpc.RpcError) as a PushError; `retry_codes`: the status codes the
    receiving protocol says may pass."""
    code = e.code() if hasattr(e, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    details = (e.details() if hasattr(e, "details") else "") or ""
    if name == "DEADLINE_EXCEEDED":
        msg = f"no answer within {timeout:.3g} s"
    else:
        msg = f"gRPC {name}" + (f": {details.splitlines()[0][:200]}" if details else "")
    return PushError(msg, retry=name in retry_codes)
