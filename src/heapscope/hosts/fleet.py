"""Serving and pushing while `record` or `live` runs: their options, and the host that wires them.

    fleet.wire(recording, args)        # before the target starts: a bad address fails here

Their options (--serve, --serve-remote, --push, --label) are `record`'s and `live`'s
(cli/record.py, add_fleet_arguments): this module is imported only when one is given.

wire() builds a Live (server and pushers) whose server answers each scrape
with a fresh dump (Recording.fresh_dump, from the server's threads), queues
a push after each committed continuous dump (Recording.on_dump), and at the
end (Recording.on_close) stops the server, pushes the final dumps and gives
the pushers a bounded drain; their summary lines go to Recording.host_lines.

`dumped()` only queues a function for the push worker, which opens the
profile and builds each process's new dumps there, so a slow or dead server
never touches the recording loop.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:  # imported where used: `record` without --serve/--push never loads http or ssl
    import argparse
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from heapscope.fleet.push import Pusher, PushItem
    from heapscope.hosts.serve import PprofServer, Snapshot
    from heapscope.session import Recording


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

            from heapscope.hosts.serve import PprofServer

            token = None if serve_open else os.environ.get("HEAPSCOPE_SERVE_TOKEN") or secrets.token_urlsafe(16)
            plain = (token or "").replace("-", "").replace("_", "").replace(".", "")
            if token is not None and not (plain.isascii() and plain.isalnum()):
                from heapscope.errors import UsageError

                raise UsageError("HEAPSCOPE_SERVE_TOKEN: use letters, digits, '-', '_' and '.' only (it is a URL path)")
            self.server = PprofServer(snapshot, serve, allow_remote=allow_remote, token=token)
        self._pushed: dict[tuple[int, int], int] = {}  # (pusher, pid) -> number of its dumps already queued
        import threading  # here: `record` reads add_arguments before its target starts (start-up cost)

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
        from functools import partial

        for k, pusher in enumerate(self.pushers):
            pusher.submit(partial(self._new_items, path, k, pusher.target.kind))

    def _new_items(self, path: Path, pusher: int = 0, kind: str = "pyroscope") -> list[PushItem]:
        from heapscope.fleet import pprof_source
        from heapscope.fleet.push import PushItem
        from heapscope.store.reader import open_profile
        from heapscope.store.select import select_heap

        items: list[PushItem] = []
        with open_profile(path) as profile:
            select_heap(profile, None)  # custom heaps: the default heap only (store/select.py), nothing twice
            for p in profile.processes():
                dumps = profile.dumps(p.info.upid)
                with self._lock:  # each pusher sends every dump: counted per pusher
                    done = self._pushed.get((pusher, p.info.pid), 0)
                    self._pushed[(pusher, p.info.pid)] = len(dumps)
                for n in range(done + 1, len(dumps) + 1):
                    if kind.startswith("otlp"):
                        from heapscope.fleet.otlp import push_item
                        items.append(push_item(profile, p, n))
                        continue
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


def wire(rec: Recording, args: argparse.Namespace) -> Live:
    """--serve/--push/--label of `args` for `rec`: the server listens at once (a bad address fails
    here, before any target starts); pushes follow each continuous dump and the final ones."""
    from pathlib import Path

    from heapscope.hosts.serve import Snapshot

    output = Path(rec.output)

    def fresh_snapshot() -> Snapshot:
        """What the server serves: the profile after a fresh dump (its latest dumps)."""
        rec.fresh_dump()
        return Snapshot(output, None)

    fleet = Live.from_args(args, snapshot=fresh_snapshot)
    rec.on_dump.append(lambda _output: fleet.dumped(output))

    def end_fleet(complete: bool) -> list[str]:
        """Stop serving; push the final dumps (now symbolized); a bounded drain; one line each."""
        if fleet.server is not None:
            fleet.server.close()  # before the last push: no scrape may wait on a loop that is gone
        if complete:
            # Not contextlib.suppress: this module is read before the target's spawn (cli/record.py).
            try:  # noqa: SIM105
                fleet.dumped(output)
            except Exception:  # a pusher only queues; nothing of it may end the recording badly
                pass
        try:
            return fleet.close()
        except Exception as e:
            return [f"serving/pushing ended badly: {type(e).__name__}: {e}"]

    rec.on_close.append(end_fleet)
    if fleet.server is not None:
        rec.say(f"serving {fleet.server.url}heap and /allocs")
    return fleet
