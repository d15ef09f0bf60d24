"""PprofServer: Go's net/http/pprof heap endpoints, answered from the profile being recorded.

    GET /debug/pprof/          a short index (text/html, as Go's)
    GET /debug/pprof/heap      in-use view (default sample type inuse_space) of a fresh dump
    GET /debug/pprof/allocs    the same profile with alloc_space as the default sample type
        ?pid=N                 only process N (404 with the pids present when absent)
        ?seconds=N             400: a delta profile over time is not offered (dumps are snapshots)
        ?debug=N (N != 0)      400: only the binary format is served
        ?gc=1                  accepted and ignored (there is no collector to run)
    GET/POST /debug/pprof/symbol   "num_symbols: 1" / no symbols: every frame heapscope could name
                               is named in the profile already; pprof asks this endpoint for the
                               others (google/pprof internal/symbolz) and fails when it is missing

Go answers /heap and /allocs with the same four sample types and only the
default differs (https://pkg.go.dev/net/http/pprof); `go tool pprof URL` and
Parca's scraper read them as they read a Go program's.

`snapshot` is called once per request, in the request's thread, and returns
the profile file and the dump to serve: a recording takes a dump and returns
when it is committed, so every answer is a consistent snapshot. It may raise
HeapscopeError (answered 503 with its line); anything else is a 500.

The server binds loopback addresses only unless `allow_remote=True`: a heap
profile shows a program's code paths and memory use, and anyone who can reach
the port can read them. Loopback is every local user, so with a `token` the
endpoints are served under /TOKEN/debug/pprof/ only (a path prefix, which
`go tool pprof` keeps for /symbol too) or to `Authorization: Bearer TOKEN`;
anything else is 403 and takes no dump. However many scrapes come, dumps are
taken one at a time and at most one per `min_dump_interval` seconds: a
request in between is served the last one.

Its thread waits on the listening socket and a wake-up socket together, so
`close()` returns at once: socketserver's serve_forever() looks for a
shutdown request only between waits of `poll_interval`, which would add up
to that long to the end of every `record --serve`.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import selectors
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from heapscope.errors import HeapscopeError, UsageError
from heapscope.records import Record

DEFAULT_ADDRESS = "127.0.0.1:6060"
_VIEW_OF = {"/debug/pprof/heap": "space", "/debug/pprof/allocs": "alloc_space"}
_INDEX = (b"<html><head><title>/debug/pprof/</title></head><body>\n"
          b"<p>heapscope: native heap of the recorded processes</p>\n"
          b"<a href=\"allocs\">allocs</a> all past allocations (default sample type alloc_space)<br>\n"
          b"<a href=\"heap\">heap</a> memory in use (default sample type inuse_space)<br>\n"
          b"<p>?pid=N picks one process</p>\n</body></html>\n")


class Snapshot(Record, frozen=True):
    """What to serve: a profile file and one of its dumps (1 = first, -1/None = the last)."""

    path: Path
    dump: int | None = None


def parse_address(text: str, *, allow_remote: bool = False) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (loopback) or `[v6]:PORT` -> (host, port). UsageError on anything else."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--serve {text!r}: expected HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    host = host.strip("[]") or "127.0.0.1"
    if not allow_remote and not is_loopback(host):
        raise UsageError(f"--serve {text!r}: {host} is not a loopback address; anyone who can reach it"
                         " could read the profile (pass --serve-remote to allow it)")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class PprofServer:
    """An HTTP server in a background thread; `close()` stops it. Also a context manager."""

    def __init__(self, snapshot: Callable[[], Snapshot], address: str | tuple[str, int] = DEFAULT_ADDRESS,
                 *, allow_remote: bool = False, request_timeout: float = 30.0, token: str | None = None,
                 min_dump_interval: float = 1.0) -> None:
        host, port = parse_address(address, allow_remote=allow_remote) if isinstance(address, str) else address
        if not allow_remote and not is_loopback(host):
            raise UsageError(f"--serve {host}:{port}: not a loopback address (pass --serve-remote to allow it)")
        self.snapshot = snapshot
        self.token = token or None
        self.min_dump_interval = min_dump_interval
        self.dumps = 0  # snapshots taken
        self._last: tuple[float, Snapshot] | None = None
        self._snapshot_lock = threading.Lock()
        self.requests = 0  # answered with 200
        self.errors = 0  # answered with an error status
        self._lock = threading.Lock()
        handler = _handler_class(self, request_timeout)
        server_class = _V6Server if ":" in host else _Server
        try:
            self._server = server_class((host, port), handler)
        except OSError as e:
            raise UsageError(f"--serve {host}:{port}: cannot listen: {e.strerror or e}") from e
        self._server.daemon_threads = True
        # handle_request() is called when a connection waits; it must never wait itself (a client
        # that gave up between the wake-up and accept() would hold the thread).
        self._server.timeout = 0
        self._server.socket.setblocking(False)
        self.host, self.port = str(self._server.server_address[0]), int(self._server.server_address[1])
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="heapscope-pprof-server", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/{self.token + '/' if self.token else ''}debug/pprof/"

    def fresh_snapshot(self) -> Snapshot:
        """`snapshot()`, one at a time and at most once per min_dump_interval: the requests that
        come meanwhile share the last one (waiting for it while it is being taken)."""
        with self._snapshot_lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.min_dump_interval:
                return self._last[1]
            snap = self.snapshot()
            self.dumps += 1
            self._last = (time.monotonic(), snap)
            return snap

    def authorized_path(self, path: str, authorization: str | None) -> str | None:
        """The path without its /TOKEN prefix when the request carries the token (or none is
        needed); None when it does not."""
        if self.token is None:
            return path
        prefix = f"/{self.token}/"
        if hmac.compare_digest(path[:len(prefix)].encode(), prefix.encode()):
            return path[len(prefix) - 1:]
        if authorization is not None and hmac.compare_digest(authorization.encode(), f"Bearer {self.token}".encode()):
            return path
        return None

    def count(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.requests += 1
            else:
                self.errors += 1

    def _serve(self) -> None:
        """Accept connections (each answered on its own thread) until close() writes to the wake-up socket."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._server.socket, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = sel.select()
                if any(key.fileobj is self._wake_r for key, _ in ready):
                    return
                self._server.handle_request()

    def close(self) -> None:
        """Stop accepting; returns at once (requests being answered finish on their own threads)."""
        if self._wake_w.fileno() >= 0:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")
        self._thread.join(timeout=5)
        self._server.server_close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> PprofServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    def server_bind(self) -> None:
        # HTTPServer.server_bind() also asks socket.getfqdn() for a server name nothing here uses:
        # a reverse DNS lookup, before the target starts, as long as the resolver takes.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class _V6Server(_Server):
    address_family = socket.AF_INET6


# Long on purpose: it holds the handler class, whose methods close over the server that owns them.
def _handler_class(owner: PprofServer, request_timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "heapscope"
        timeout = request_timeout  # a client that stalls mid-request does not hold a thread forever

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
            pass  # the recording's terminal is not the place for an access log

        def _authorized(self) -> str | None:
            """The request's path, its token checked (403 answered, and None, without it)."""
            url = urlsplit(self.path)
            path = owner.authorized_path(url.path, self.headers.get("Authorization"))
            if path is None:
                self._error(HTTPStatus.FORBIDDEN, "this server needs its token: use the URL `record` printed"
                            " (http://HOST:PORT/TOKEN/debug/pprof/...) or Authorization: Bearer TOKEN")
            return path

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            authorized = self._authorized()
            if authorized is None:
                return
            url = urlsplit(self.path)._replace(path=authorized)
            query = parse_qs(url.query)
            path = url.path.rstrip("/") or "/"
            if path == "/debug/pprof":
                self._send(HTTPStatus.OK, _INDEX, "text/html; charset=utf-8")
                return
            if path == "/debug/pprof/symbol":
                self._send(HTTPStatus.OK, b"num_symbols: 1\n", "text/plain; charset=utf-8")
                return
            view = _VIEW_OF.get(path)
            if view is None:
                self._error(HTTPStatus.NOT_FOUND, f"{url.path}: not served (heapscope serves"
                            " /debug/pprof/heap and /debug/pprof/allocs)")
                return
            if "seconds" in query:
                self._error(HTTPStatus.BAD_REQUEST, "seconds: delta profiles over an interval are not offered;"
                            " fetch without seconds= for the heap at a fresh dump")
                return
            debug = query.get("debug", ["0"])[-1]
            if debug not in ("", "0"):
                self._error(HTTPStatus.BAD_REQUEST, f"debug={debug}: only the binary pprof format (debug=0) is served")
                return
            pid: int | None = None
            if "pid" in query:
                text = query["pid"][-1]
                if not text.isdigit():
                    self._error(HTTPStatus.BAD_REQUEST, f"pid={text!r}: not a process id")
                    return
                pid = int(text)
            self._profile(view, pid)

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            authorized = self._authorized()
            if authorized is None:
                return
            if authorized.rstrip("/") != "/debug/pprof/symbol":
                self._error(HTTPStatus.NOT_FOUND, f"{authorized}: POST is only for /debug/pprof/symbol")
                return
            length = self.headers.get("Content-Length", "0")
            self.rfile.read(min(int(length) if length.isdigit() else 0, 1 << 20))
            self._send(HTTPStatus.OK, b"", "text/plain; charset=utf-8")  # no further names to give

        def _profile(self, view: str, pid: int | None) -> None:
            from heapscope.fleet import pprof_source
            from heapscope.store.reader import open_profile

            try:
                snap = owner.fresh_snapshot()
                with open_profile(snap.path) as profile:
                    from heapscope.store.select import select_heap
                    select_heap(profile, None)  # custom heaps: the default heap (store/select.py), nothing twice
                    if pid is not None and pid not in {p.info.pid for p in profile.processes()}:
                        present = ", ".join(str(p.info.pid) for p in profile.processes()) or "none"
                        self._error(HTTPStatus.NOT_FOUND, f"pid {pid}: not profiled (pids present: {present})")
                        return
                    body = pprof_source.build(profile, view=view, pid=pid, dump=snap.dump).data
            except HeapscopeError as e:
                self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(e))
                return
            except Exception as e:  # the server thread must answer, whatever went wrong
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")
                return
            self._send(HTTPStatus.OK, body, "application/octet-stream",
                       {"Content-Disposition": f'attachment; filename="{"heap" if view == "space" else "allocs"}"'})

        def _error(self, status: HTTPStatus, line: str) -> None:
            owner.count(False)
            self._send(status, (line + "\n").encode("utf-8", "replace"), "text/plain; charset=utf-8")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str,
                  headers: dict[str, str] | None = None) -> None:
            if status == HTTPStatus.OK:
                owner.count(True)
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Content-Type-Options", "nosniff")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client left; nothing to tell it

    return Handler
