"""A loopback debuginfod server for tests (symbolize/debuginfod.py's client).

Serves `/buildid/<id>/debuginfo` (or `/executable`) paths from a dict of
path -> bytes, 404 for anything else, and records every path asked for.
Used by tests/unit/symbolize/test_symbolize_debuginfod.py and
tests/integration/test_missing.py.
"""

from __future__ import annotations

import http.server
import threading


class DebuginfodServer:
    """Started on 127.0.0.1 at an ephemeral port (`url`); `close()` stops it."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.requests.append(self.path)
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
