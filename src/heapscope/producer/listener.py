"""The session's socket and the clients' handshake, with light imports only (start-up cost).

A started target waits in its client's constructor (client/connect.c,
the handshake) until the producer answers its hello with the config and the
ring's memfd. Everything `record` does before that answer is on the target's
path, so the answer needs nothing but this module: the private directory, the
listening socket, the checks of the hello, /proc read while the client waits,
a fresh ring and the reply (wire/handshake.py), from os, _socket, struct,
mmap and fcntl. The producer (producer.py), with the C ingest, the heap
trackers and the profile writer, adopts each answered client (`Accepted`):
at once when it exists, else when `record` has imported it while the target
ran. Until then the client's records wait in its ring (8 MiB by default: at
~1 M samples/s ~70 ms of them, far more than those imports; a fuller ring
makes a blocking client wait, a bounded wait that the ring's blocked_ns
counts, or a non-blocking one drop records, counted in dropped_records).
"""

from __future__ import annotations

import _socket
import errno
import fcntl
import os
import struct

from heapscope.producer.config import RecordConfig, name_matches
from heapscope.producer.tmpdir import make_private_dir, remove_dir
from heapscope.records import Record
from heapscope.wire import handshake as hs

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import mmap
    from collections.abc import Callable

    from heapscope.model import ProcessInfo, Upid
else:
    Upid = int  # model.py's NewType at run time, without importing model before the spawn

HANDSHAKE_TIMEOUT_S = 5.0
LISTEN_BACKLOG = 4096  # clients waiting to be accepted, at most
PEERCRED = struct.Struct("3i")
OWNED_PREFIX = "heapscope-"
OWNER_FILE = "owner.lock"
_FD = struct.Struct("i")


def _quiet(_msg: str) -> None:
    pass


class Accepted(Record):
    """A client answered with a ring, not yet taken over by the producer (Producer.adopt)."""

    conn: _socket.socket  # blocking: Producer.adopt makes it non-blocking
    info: ProcessInfo  # read from /proc while the client waited
    memfd: int
    shm: mmap.mmap
    ingest: object = None  # what `prepare` made before the answer (the producer's Ingest); None: made at adoption

    def close(self) -> None:
        """Let the client go (it runs on unprofiled): told to stop, its ring and socket closed."""
        hs.write_meta(self.shm, "shutting_down", 1)
        self.shm.close()
        os.close(self.memfd)
        self.conn.close()


class Listener:
    """The session's private directory, its socket, and the handshake of every client."""

    def __init__(self, config: RecordConfig, log: Callable[[str], None] = _quiet) -> None:
        self.config = config
        self.log = log
        self.token = os.urandom(hs.TOKEN_SIZE)  # what secrets.token_bytes does, without its imports
        self.next_upid = 1
        self.rejected_clients = 0
        self.untargeted_clients = 0  # valid clients left dormant by -n
        self.no_descriptors = 0  # clients turned away: heapscope was out of file descriptors
        self.accepted: list[Accepted] = []  # answered, waiting for the producer
        # The next client's ring and its reader, made after an answer (make_ahead): the memfd,
        # its mapping and the producer's Ingest (None: made at adoption).
        self._ahead: tuple[int, mmap.mmap, object] | None = None
        self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # for _refuse_one
        # A private (0700) directory in the shared temp dir; the owner lock in
        # it tells a later run whether this one is still alive (session.py).
        self.directory = make_private_dir(OWNED_PREFIX)  # tempfile.mkdtemp, without tempfile's imports
        self._owner_fd = -1
        try:
            self._owner_fd = take_ownership(self.directory)
            self.socket_path = os.path.join(self.directory, "producer.sock")
            self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # close-on-exec, as socket.socket
            self.sock.bind(self.socket_path)
            # Room for a fork storm's clients to wait (the kernel caps it at net.core.somaxconn):
            # one that finds the queue full waits in connect, and past that wait's 10 s bound runs
            # on unprofiled, never seen here, so never counted.
            self.sock.listen(LISTEN_BACKLOG)
            self.sock.setblocking(False)
        except BaseException:
            self.remove()
            raise

    def warm(self) -> None:
        """Import what a handshake needs (mmap, select, /proc's reader): `record` calls this
        right after its target's spawn, while the target execs, before its hello comes."""
        import mmap  # noqa: F401
        import select  # noqa: F401

        from heapscope.producer import procfs  # noqa: F401

    def env(self) -> dict[str, str]:
        """Environment variables that make the client connect to this session."""
        return {hs.ENV_SOCKET: self.socket_path, hs.ENV_TOKEN: self.token.hex()}

    def fileno(self) -> int:
        """The listening socket's descriptor; -1 once closed."""
        return self.sock.fileno()

    def close(self) -> None:
        """No new clients from now on."""
        if self.sock.fileno() >= 0:
            self.sock.close()
        self._drop_ahead()

    def remove(self) -> None:
        """Stop listening and remove the session's directory; safe to call more than once."""
        sock = getattr(self, "sock", None)
        if sock is not None:
            self.close()
        else:
            self._drop_ahead()
        try:  # noqa: SIM105 (contextlib is ~3 ms of imports on the target's path)
            remove_dir(self.directory)
        except OSError:
            pass
        for fd in (self._owner_fd, self._spare_fd):
            if fd >= 0:
                try:  # noqa: SIM105
                    os.close(fd)
                except OSError:
                    pass
        self._owner_fd = self._spare_fd = -1

    def wait(self, timeout: float, also: int = -1) -> bool:
        """Wait up to `timeout` s for a client (or for `also`, a descriptor, to be readable); True when one is."""
        import select  # a C module: no Python imports

        poller = select.poll()
        if self.sock.fileno() < 0:
            return False
        poller.register(self.sock.fileno(), select.POLLIN)
        if also >= 0:
            poller.register(also, select.POLLIN)
        events = poller.poll(max(0, int(timeout * 1000 + 0.999)))
        return any(fd == self.sock.fileno() for fd, _ev in events)

    def accept(self, attach_pids: set[int] | frozenset[int] = frozenset(),
               prepare: Callable[[int], object] | None = None) -> int:
        """Answer every client waiting; each answered one goes to `accepted`. `prepare(memfd)`,
        when given, is called before the answer (the producer's Ingest: a failure rejects the
        client, which stays dormant). How many were answered with a ring."""
        answered = 0
        while self.sock.fileno() >= 0:
            try:
                fd, _addr = self.sock._accept()  # type: ignore[attr-defined]  # socket.socket.accept's core
            except (BlockingIOError, InterruptedError):
                return answered
            except OSError as e:
                # Out of descriptors: every client waiting is turned away now, not one a loop
                # round. At one a round, 600 processes at once on a busy machine waited past
                # their connect's 10 s bound and went dormant with nobody counting them.
                if e.errno in (errno.EMFILE, errno.ENFILE) and self._refuse_one():
                    continue
                return answered
            conn = _socket.socket(fileno=fd)
            try:
                got = self._handshake(conn, attach_pids, prepare)
            except OSError as e:
                # Out of descriptors for its ring (memfd_create): not profiled, and said.
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self.no_descriptors += 1
                else:
                    self.rejected_clients += 1
                self.log(f"client rejected: {e}")
                conn.close()
                continue
            except ValueError as e:
                self.rejected_clients += 1
                self.log(f"client rejected: {e}")
                conn.close()
                continue
            if got is not None:
                self.accepted.append(got)
                answered += 1
        return answered

    def make_ahead(self, prepare: Callable[[int], object] | None = None) -> None:
        """Make the next client's ring (and, with `prepare`, its reader) now, so that its answer
        waits on neither: called once a process tree shows (a second client answered), after
        the answers, while the answered clients run their start. A failure (out of descriptors
        or memory) is left to that handshake to meet, count and say."""
        if self._ahead is not None or self.sock.fileno() < 0 or self.next_upid <= 2:
            return
        try:
            memfd, shm = create_ring(self.config.shmem_size)
        except OSError:
            return
        try:
            ingest = prepare(memfd) if prepare is not None else None
        except Exception:  # noqa: BLE001 (the handshake that needs a ring meets it again and says it)
            shm.close()
            os.close(memfd)
            return
        self._ahead = (memfd, shm, ingest)

    def _ring(self, prepare: Callable[[int], object] | None) -> tuple[int, mmap.mmap, object]:
        """The ring of the client being answered, and its reader: the ones made ahead, else new."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and (ahead[2] is not None or prepare is None):
            return ahead
        memfd, shm = ahead[:2] if ahead is not None else create_ring(self.config.shmem_size)
        try:
            return memfd, shm, prepare(memfd) if prepare is not None else None
        except Exception:
            shm.close()
            os.close(memfd)
            raise

    def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        memfd, shm, ingest = ahead
        close = getattr(ingest, "close", None)
        if close is not None:
            close()
        shm.close()
        os.close(memfd)

    def take(self) -> list[Accepted]:
        """The clients answered since the last call, for the producer."""
        got, self.accepted = self.accepted, []
        return got

    def _refuse_one(self) -> bool:
        """Out of descriptors: free the spare one to take the waiting client and
        close it at once (its client goes dormant, the process runs on
        unprofiled), rather than leave it pending and the loop spinning. True
        when a client was turned away and the spare is back (another may wait)."""
        if self._spare_fd >= 0:
            os.close(self._spare_fd)
            self._spare_fd = -1
        refused = False
        try:
            fd, _addr = self.sock._accept()  # type: ignore[attr-defined]  # socket.socket.accept's core
            os.close(fd)
            self.no_descriptors += 1
            self.log("client refused: heapscope is out of file descriptors")
            refused = True
        except OSError:
            pass
        try:
            self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        return refused

    def _handshake(self, conn: _socket.socket, attach_pids: set[int] | frozenset[int],
                   prepare: Callable[[int], object] | None) -> Accepted | None:
        conn.settimeout(HANDSHAKE_TIMEOUT_S)
        data = _recv_exactly(conn, hs.HELLO.size)
        magic, version, pid, ppid, _, token, start_ts = hs.HELLO.unpack(data)
        peer_pid, peer_uid, _ = PEERCRED.unpack(
            conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, PEERCRED.size))
        cfg = self.config
        problem = None
        if magic != hs.WIRE_MAGIC or version != hs.WIRE_VERSION:
            problem = f"wire version {version} (expected {hs.WIRE_VERSION})"
        elif not _same_token(token, self.token):
            problem = "unknown session"
        elif pid != peer_pid:
            problem = f"pid {pid} does not match the socket's peer {peer_pid}"
        elif cfg.names and pid not in attach_pids:
            from heapscope.producer import procfs

            args = procfs.cmdline_args(pid)
            exe = procfs.exe_path(pid, args)
            if not name_matches(cfg.names, exe, args):
                # A valid client that -n does not pick: dormant, and no error.
                conn.sendall(hs.config_reply(hs.STATUS_NOT_TARGETED))
                conn.close()
                self.untargeted_clients += 1
                self.log(f"pid {pid} ({os.path.basename(exe)}) not targeted by -n: dormant")
                return None
        if problem:
            conn.sendall(hs.config_reply(hs.STATUS_REJECTED))
            raise ValueError(problem)

        # Read /proc now: the client waits for our answer; after it, a short
        # program may be gone before we look.
        from heapscope.producer import procfs  # imported by warm()

        upid = Upid(self.next_upid)
        info = procfs.process_info(upid, pid, ppid, peer_uid, start_ts)
        memfd, shm, ingest = self._ring(prepare)
        seed = int.from_bytes(os.urandom(8), "little") if cfg.seed is None else (cfg.seed + upid - 1) & (2**64 - 1)
        from heapscope.producer.tsc import tsc_clock

        flags = ((hs.CFG_BLOCK_CLIENT if cfg.block_client else 0) | (hs.CFG_MMAP_FILES if cfg.mmap_files else 0)
                 | (hs.CFG_TSC if tsc_clock() else 0))
        reply = hs.config_reply(hs.STATUS_OK, cfg.interval, cfg.shmem_size, seed, flags, int(cfg.unwinder),
                                cfg.max_frames)
        try:
            conn.sendmsg([reply], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _FD.pack(memfd))])
        except OSError:
            close = getattr(ingest, "close", None)
            if close is not None:
                close()
            shm.close()
            os.close(memfd)
            raise
        conn.setblocking(False)
        self.next_upid += 1
        return Accepted(conn, info, memfd, shm, ingest)


def create_ring(ring_size: int) -> tuple[int, mmap.mmap]:
    """A fresh shared-memory ring: memfd + mapping with the meta header written."""
    import mmap  # imported by Listener.warm()

    fd = os.memfd_create("heapscope-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, hs.META_SIZE + ring_size)
        # The client is untrusted: a ring it could shrink would fault the producer.
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        shm = mmap.mmap(fd, hs.META_SIZE + ring_size, mmap.MAP_SHARED)
    except OSError:
        os.close(fd)
        raise
    hs.write_meta(shm, "magic", hs.WIRE_MAGIC)
    hs.write_meta(shm, "version", hs.WIRE_VERSION)
    hs.write_meta(shm, "ring_size", ring_size)
    return fd, shm


def take_ownership(directory: str | os.PathLike[str]) -> int:
    """Lock `directory` as this live process's own: an flock on a file inside,
    taken before the file gets its final name (so the name never exists
    unlocked) and released by the kernel when this process dies, however."""
    tmp = os.path.join(directory, OWNER_FILE + ".new")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{os.getpid()}\n".encode())
    os.rename(tmp, os.path.join(directory, OWNER_FILE))
    return fd


def _same_token(a: bytes, b: bytes) -> bool:
    """Equal tokens, in a time that does not depend on where they differ (as secrets.compare_digest;
    that module's imports (hmac, OpenSSL, random) cost every `record` several ms)."""
    diff = len(a) ^ len(b)
    for x, y in zip(a, b, strict=False):  # unequal lengths already set diff
        diff |= x ^ y
    return diff == 0


def _recv_exactly(conn: _socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed during the handshake")
        buf += chunk
    return bytes(buf)
