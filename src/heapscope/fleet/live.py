"""Serving and pushing while `record` runs: its options, and one object for the session to hold.

How a recording wires it (heapscope.recording.Recording.with_fleet, called
by `record` and `live` when --serve or --push is given):

    live.add_arguments(parser)                               # --serve, --serve-remote, --push, --label
    fleet = live.Live.from_args(args, snapshot=recording.fresh_snapshot)   # before the target starts
    ... after each committed continuous dump:  fleet.dumped(output)       # returns at once
    ... at the end, profile written:           fleet.dumped(output); for line in fleet.close(): say(line)

`snapshot` returns a Snapshot (profile path, dump) taken for the request; the
server calls it on its own threads. `dumped()` only queues a function for the
push worker, which opens the profile and builds each process's new dumps
there, so a slow or dead server never touches the recording loop.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, issue 13)
if TYPE_CHECKING:  # imported where used: `record` without --serve/--push never loads http or ssl
    import argparse
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from heapscope.fleet.push import Pusher, PushItem
    from heapscope.fleet.serve import PprofServer, Snapshot


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--serve", metavar="ADDR",
                   help="answer Go's /debug/pprof/heap and /allocs on ADDR (e.g. 127.0.0.1:6060) while recording,"
                        " for go tool pprof or a Parca scrape")
    p.add_argument("--serve-remote", action="store_true",
                   help="allow --serve on an address that is not loopback (anyone who reaches it reads the profile)")
    p.add_argument("--serve-open", action="store_true",
                   help="serve without a token (by default --serve makes one, or takes $HEAPSCOPE_SERVE_TOKEN, and"
                        " answers only under http://ADDR/TOKEN/debug/pprof/: loopback is every local user)")
    p.add_argument("--push", action="append", default=[], metavar="URL",
                   help="send each dump to pyroscope+http://HOST:PORT or parca+grpc://HOST:PORT (repeatable);"
                        " a server that is down costs the recording nothing but counted losses")
    p.add_argument("--label", action="append", default=[], metavar="K=V",
                   help="a label of every pushed profile (repeatable), e.g. service=api")


class Live:
    """The server and the pushers of one recording."""

    def __init__(self, snapshot: Callable[[], Snapshot], serve: str | None = None, *,
                 allow_remote: bool = False, push: Sequence[str] = (), labels: dict[str, str] | None = None,
                 queue_size: int = 16, serve_open: bool = False) -> None:
        self.pushers: list[Pusher] = []
        if push:  # imported only when used: it is read before the target starts (http.client, ssl, grpc)
            import socket

            from heapscope.fleet.push import Pusher, parse_target

            targets = [parse_target(u) for u in push]  # every URL checked before anything starts
            labels = {"host": socket.gethostname(), **(labels or {})}
            self.pushers = [Pusher(t, labels, queue_size=queue_size) for t in targets]
        self.server: PprofServer | None = None
        if serve:
            import os
            import secrets

            from heapscope.fleet.serve import PprofServer

            token = None if serve_open else os.environ.get("HEAPSCOPE_SERVE_TOKEN") or secrets.token_urlsafe(16)
            plain = (token or "").replace("-", "").replace("_", "").replace(".", "")
            if token is not None and not (plain.isascii() and plain.isalnum()):
                from heapscope.errors import UsageError

                raise UsageError("HEAPSCOPE_SERVE_TOKEN: use letters, digits, '-', '_' and '.' only (it is a URL path)")
            self.server = PprofServer(snapshot, serve, allow_remote=allow_remote, token=token)
        self._pushed: dict[int, int] = {}  # pid -> number of its dumps already queued
        import threading  # here: `record` reads add_arguments before its target starts (issue 13)

        self._lock = threading.Lock()

    @classmethod
    def from_args(cls, args: argparse.Namespace, snapshot: Callable[[], Snapshot]) -> Live:
        labels: dict[str, str] = {}
        if args.label:
            from heapscope.fleet.push import parse_labels

            labels = parse_labels(args.label)
        return cls(snapshot, args.serve, allow_remote=args.serve_remote, push=args.push, labels=labels,
                   serve_open=getattr(args, "serve_open", False))

    def dumped(self, path: Path) -> None:
        """A dump was committed to `path`: queue each process's new dumps on every pusher."""
        for pusher in self.pushers:
            pusher.submit(lambda: self._new_items(path))

    def _new_items(self, path: Path) -> list[PushItem]:
        from heapscope.fleet import pprof_source
        from heapscope.fleet.push import PushItem
        from heapscope.store.reader import open_profile
        from heapscope.store.select import select_heap

        items: list[PushItem] = []
        with open_profile(path) as profile:
            select_heap(profile, None)  # custom heaps: the default heap only (store/select.py), nothing twice
            for p in profile.processes():
                dumps = profile.dumps(p.info.upid)
                with self._lock:
                    done = self._pushed.get(p.info.pid, 0)
                    self._pushed[p.info.pid] = len(dumps)
                for n in range(done + 1, len(dumps) + 1):
                    built = pprof_source.build(profile, pid=p.info.pid, dump=n)
                    labels: tuple[tuple[str, str], ...] = (("pid", str(p.info.pid)),)
                    # While the process runs its executable is not stored yet (heapscope_process
                    # is written when it ends): its name stands in.
                    exe = p.info.exe or p.info.name
                    if exe:
                        labels += (("executable", exe.rsplit("/", 1)[-1]),)
                    items.append(PushItem(built.data, built.start_unix_ns, built.end_unix_ns, labels,
                                          f"dump {n} of pid {p.info.pid}"))
        return items

    def close(self, drain_timeout: float = 5.0) -> list[str]:
        """Stop serving, give the pushers `drain_timeout` seconds in all; one summary line each."""
        lines = []
        if self.server is not None:
            self.server.close()
            s = self.server
            lines.append(f"served {s.requests} requests on {s.url}" + (f" ({s.errors} refused)" if s.errors else ""))
        for pusher in self.pushers:
            pusher.close(drain_timeout / max(1, len(self.pushers)))
            lines.append(pusher.summary())
        return lines
