"""The producer loop: accept clients, drain their rings, dump their heaps.

Single-threaded: one `poll()` call accepts new clients, drains every ring through the C
ingest (whose MALLOC and FREE records go to the process's heap tracker, bookkeeping/tracker.h),
decodes the rare records, and ends the processes whose socket reached EOF (final drain, flush,
final dump with the process's peak). The caller runs it until the target exits, then calls
`finish()`.
"""

from __future__ import annotations

import _socket  # as producer/process.py
import contextlib
import itertools
import os
import select
import time
from collections.abc import Callable

from heapscope.bookkeeping._native import Tracker, Trie
from heapscope.bookkeeping.dump import UNDEFINED_STACK, ProcessHeap
from heapscope.bookkeeping.frames import FILTERED, FrameTable, unknown_code_mapping
from heapscope.bookkeeping.rows import DUMP_ROW, OP_MALLOC, STREAM_ROW, WINDOW_ROW, unpack_rows
from heapscope.heaps import valid_name as valid_heap_name
from heapscope.model import Frame, Mapping, ProcessFlags, Upid, is_jitdump_path
from heapscope.producer import listener as _listener
from heapscope.producer import procfs
from heapscope.producer._ingest import Ingest
from heapscope.producer.config import RecordConfig
from heapscope.producer.listener import Accepted, Listener
from heapscope.producer.process import (
    JOINT_HEAPS,
    CustomHeap,
    ProcessState,
    absolute_module,
    samples_so_far,
    window_trackers,
)
from heapscope.producer.stats import StatRow, client_error_name, custom_heap_stats, process_stats_rows, unwinder_name
from heapscope.producer.tsc import tsc_clock
from heapscope.records import Record
from heapscope.store.writer import ProfileWriter
from heapscope.wire import codec

RSS_EVERY_NS = 50_000_000  # VmHWM is read this often per process: the peak is gone with the process
# Stacks are resolved (and their callsites written) this often while the processes run, so that
# the end of a recording is left with the stacks of its last moments only.
RESOLVE_EVERY_NS = 100_000_000
DRAIN_BATCH = 1 << 18  # records per ring per poll: keeps the loop responsive
CALLSITES_PER_WRITE = 8192  # written at a time while the processes run, the rings drained between
# The session's socket and the handshake are producer/listener.py's (light imports: the target
# waits for the answer); these names stay here for their users.
HANDSHAKE_TIMEOUT_S = _listener.HANDSHAKE_TIMEOUT_S
OWNED_PREFIX = _listener.OWNED_PREFIX
OWNER_FILE = _listener.OWNER_FILE
take_ownership = _listener.take_ownership
_U64 = (1 << 64) - 1
_MODULE_TYPE = int(codec.RecordType.MODULE).to_bytes(4, "little")  # a record header's type half (wire.h)
_POLL_IN = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


class ProducerStats(Record, frozen=True):
    """The producer's figures at one moment: what a status line, a live view or an API reads."""

    samples: int = 0  # samples so far, every heap (samples_so_far)
    live_bytes: int = 0  # sampled bytes not yet freed, connected processes, malloc's heap
    running: int = 0  # processes connected now
    ended: int = 0  # processes that have ended


class NoProfile:
    """The writer of a producer that keeps no profile: every call does nothing."""

    def __getattr__(self, _name: str) -> Callable[..., None]:
        return _nothing


def _nothing(*_args: object) -> None:
    pass


class Producer:
    """Owns the listening socket, the per-process states and the bookkeeping."""

    def __init__(self, writer: ProfileWriter | None, config: RecordConfig,
                 log: Callable[[str], None] = lambda _msg: None, listener: Listener | None = None) -> None:
        """`writer` None: no profile is kept (the pytest plugin without --heapscope-output, which
        reads the trackers' figures and a few stacks by id): nothing is written, no stack is
        resolved (FrameTable.discard) and a dump books nothing. `listener`: the session's, when
        the target was started before the producer existed (`record`,): the clients it
        answered meanwhile are adopted by the first poll()."""
        self.keep = writer is not None
        self.writer: ProfileWriter | NoProfile = writer if writer is not None else NoProfile()
        self.config = config
        self.log = log
        self.frames = FrameTable(config.skip_symbol_prefixes)
        self.frames.discard = not self.keep
        self.trie = Trie()  # bookkeeping/trie.h: the processes' resolvers add to it
        self.processes: dict[int, ProcessState] = {}  # by socket fd
        self.ended: list[ProcessState] = []
        # pids whose process ended by exiting (its socket closed in its last destructor, or
        # the pidfd of one that had lost its socket), not by the session's end: such a
        # process may still be in its exit path, so /proc does not yet say it is gone
        self.exited_pids: set[int] = set()
        self.sockets_lost = 0  # processes that closed heapscope's socket and were followed to their exit
        # Called with (path, build id hex) for every module announced (record's early symbolization).
        self.on_module: Callable[[str, str], None] | None = None
        # Called with (pid, uid, its jitdump file or None) as a process with frames in no loaded
        # object ends, after its final dump: its perf map is read then, before its pid can be
        # another process's.
        self.on_process_end: Callable[[int, int, str | None], None] | None = None
        self.jitdumps: dict[Upid, str] = {}  # the jitdump file a process mapped (client/modules.c)
        self.session_ending = False  # the target exited: what ends now ends with the session
        self.target_pids: set[int] = set()  # their own exit ends the session, so it is no disconnect
        self.attach_pids: set[int] = set()  # -p: attached while running (from_startup = false)
        # The exact peak RSS (bytes) of a target pid the caller started, once reaped, else 0
        # (heapscope/launch.py, Child.poll and Child.peak_rss): asked when the process ends.
        self.exit_peak: Callable[[int], int] | None = None
        self.newest_upid: dict[int, Upid] = {}  # pid -> its latest process (an exec connects anew)
        self.guardrail = ""  # which guardrail was hit, if any
        self._resolved_ns = time.monotonic_ns()  # the last resolve_early()
        self.resolve_every_ns = RESOLVE_EVERY_NS
        self.listener = Listener(config, log) if listener is None else listener
        self.token = self.listener.token
        self.socket_path = self.listener.socket_path

    # The listener counts the clients it turned away.
    @property
    def next_upid(self) -> int:
        return self.listener.next_upid

    @next_upid.setter
    def next_upid(self, value: int) -> None:
        self.listener.next_upid = value

    @property
    def rejected_clients(self) -> int:
        return self.listener.rejected_clients

    @property
    def untargeted_clients(self) -> int:
        return self.listener.untargeted_clients

    @property
    def no_descriptors(self) -> int:
        return self.listener.no_descriptors

    def client_env(self) -> dict[str, str]:
        """Environment variables that make the client connect to this producer."""
        return self.listener.env()

    # -- the loop ------------------------------------------------------------

    def poll(self, timeout: float, wake: _socket.socket | None = None, watch: tuple[int, ...] = ()) -> int:
        """One round: accept, drain, end. Returns how much was drained (ring bytes; 0: nothing).

        `wake`, when given, also ends the wait when it becomes readable (the
        caller's signal.set_wakeup_fd socket); the caller empties it. So do
        the descriptors in `watch` (the caller's own, read by the caller).
        """
        # poll(), not select(): a session may hold far more than 1024 descriptors.
        poller = select.poll()
        watched: dict[int, int] = {}  # polled fd -> key in self.processes
        for fd, q in self.processes.items():
            watched[fd if q.exit_fd is None else q.exit_fd] = fd
        for fd in watched:
            poller.register(fd, _POLL_IN)
        listening = self.listener.fileno()
        if listening >= 0:
            poller.register(listening, _POLL_IN)
        if wake is not None:
            poller.register(wake.fileno(), _POLL_IN)
        for fd in watch:
            poller.register(fd, _POLL_IN)
        try:
            events = poller.poll(max(0, int(timeout * 1000 + 0.999)))
        except InterruptedError:
            events = []
        # A hang-up seen now happened before this: it is the process's end, not the time its
        # final drain is done, after a client accepted below (a shell's next command) has started.
        polled = time.monotonic_ns()
        ready = {watched.get(fd, fd) for fd, _ev in events}
        readable = [q.sock for fd, q in self.processes.items() if fd in ready]
        if (listening >= 0 and listening in ready) or self.listener.accepted:
            self._accept_all()
        now = time.monotonic_ns()
        drained = self._drain_all()
        self._read_rss_due()
        if now - self._resolved_ns >= self.resolve_every_ns and not self.frames.discard:
            self._resolved_ns = now
            self.resolve_early()
        for s in readable:
            ended = self.processes.get(s.fileno())
            if ended is None:
                continue
            if ended.exit_fd is not None:  # the pidfd of a process that lost its socket: it exited
                self._end(ended, reason="exit", disconnected=False, at=polled)
            elif self._peer_closed(ended.sock):
                if not self.session_ending and self._watch_exit(ended):
                    continue
                ends_session = self.session_ending or ended.info.pid in self.target_pids
                self._end(ended, reason="exit", disconnected=not ends_session, at=polled)
        return drained

    def stop_accepting(self) -> None:
        """The session is ending: no new clients, and exits from now on are not disconnects."""
        self.session_ending = True
        self.listener.close()

    def finish(self) -> None:
        """End every process still connected (the session is over)."""
        self.stop_accepting()
        try:
            for p in list(self.processes.values()):
                p.request_shutdown()
                # Exited if its client noted so or its pid is gone: only its EOF was late (the
                # client's pin, client/connect.c, or a child holding the socket); all it wrote is read.
                self._end(p, "exit" if p.meta("exit_ts") or procfs.has_exited(p.info.pid) else "end", False)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Let every client go without another dump (after an internal error, or
        at the very end): each is told to stop, so it never waits on a ring nobody
        drains, and runs on unprofiled. Safe to call more than once."""
        self.stop_accepting()
        for fd, p in list(self.processes.items()):
            with contextlib.suppress(Exception):
                p.request_shutdown()
            with contextlib.suppress(Exception):
                p.close()
            del self.processes[fd]
        for accepted in self.listener.take():  # answered, never adopted (an error came first)
            with contextlib.suppress(Exception):
                accepted.close()
        self.listener.remove()

    # -- the facade: what a session and its hosts read -------------------------

    def stats(self) -> ProducerStats:
        """The figures so far, over every process and every heap (samples_so_far)."""
        samples = sum(samples_so_far(p) for p in self.ended)
        live = 0
        for p in self.processes.values():
            samples += samples_so_far(p)
            live += p.ingest.stats()["current_unfreed"]
        return ProducerStats(samples, live, len(self.processes), len(self.ended))

    def running(self) -> list[ProcessState]:
        """The processes connected now (read on the session loop's thread only)."""
        return list(self.processes.values())

    def process_of(self, pid: int) -> ProcessState | None:
        """The connected process of `pid`; None when none is."""
        return next((q for q in self.processes.values() if q.info.pid == pid), None)

    def catch_up(self, p: ProcessState, resolve: bool) -> None:
        """Every record `p`'s ring holds handled; with `resolve`, its stacks given callsites."""
        while self._drain(p, limit=0):
            pass
        if resolve:
            p.heap.resolve(self.frames, self.trie, p.ingest.tracker)

    def stack_frame_ids(self, p: ProcessState, stack_id: int) -> list[int] | None:
        """The frame ids of a stack not resolved yet, innermost first (interned as a dump
        would); None when the stack has not been received."""
        path = p.heap.frames_of(stack_id, self.frames)
        return None if path is None else [int(i) for i in reversed(path)]

    def window(self, p: ProcessState, restart: bool, keep_peak: bool) -> tuple[int, int]:
        """(peak, leak) of `p` since its window began, over malloc's heap and, for a Python
        program, python.pymalloc: disjoint heaps (client/pymem.c books a request once), so the
        figures add up; their trackers share one peak (share_peak), so the window's peak is the
        moment their sum was highest. `restart`: a new window begins after this; with
        `keep_peak`, a closing window that holds the process's peak is resolved first, so that
        the profile keeps its rows. Call catch_up first for figures as of now."""
        trackers = window_trackers(p)
        # One window per peak: trackers sharing a peak (Tracker.share_peak) have one window.
        groups = {t.peak_group: t for t in trackers}
        stats = [t.stats() for t in groups.values()]
        peak = sum(st["window_peak"] - st["window_base"] for st in stats)
        leak = sum(st["joint_unfreed"] - st["window_base"] for st in stats)
        if restart:
            if keep_peak and any(0 < st["window_peak"] >= st["peak_unfreed"] for st in stats):
                p.heap.resolve(self.frames, self.trie, p.ingest.tracker)
                for tracker in trackers[1:]:
                    self.bind_callsites(p, tracker)
            for tracker in groups.values():
                tracker.new_window()
        return peak, leak

    @staticmethod
    def window_rows(p: ProcessState) -> list[tuple[int, ...]]:
        """The rows of `p`'s window by callsite or stack (bookkeeping/rows.py, WINDOW_ROW), as of
        now; a bucket in both heaps is one row, their figures summed."""
        trackers = window_trackers(p)
        if len(trackers) == 1:
            return list(WINDOW_ROW.iter_unpack(trackers[0].window()))
        merged: dict[tuple[int, int], list[int]] = {}
        for tracker in trackers:
            for row in WINDOW_ROW.iter_unpack(tracker.window()):
                have = merged.get((row[0], row[1]))
                if have is None:
                    merged[(row[0], row[1])] = list(row)
                else:
                    for i in range(2, len(row)):
                        have[i] += row[i]
        return [tuple(r) for r in merged.values()]

    @staticmethod
    def totals(p: ProcessState) -> tuple[list[tuple[int, bytes]], bytes | None]:
        """`p`'s totals as of the records drained so far, every heap's (malloc's, Python's and
        the custom ones, as the report shows them): per heap, its sampling interval (for the
        estimated counts) and its rows (tracker.h hs_tracker_totals: TOTALS_ROW per callsite,
        or per stack while its callsite is not known); and malloc's per thread (THREAD_ROW, at
        malloc's interval) when its tracker keeps threads, else None (the other heaps'
        trackers keep none). Read, never changed."""
        tracker = p.ingest.tracker
        heaps = [(p.flags.sampling_interval_bytes, tracker.totals()),
                 *((h.interval, h.tracker.totals()) for h in p.custom_heaps.values())]
        return heaps, tracker.threads() if tracker.keeps_threads else None

    def stack_keys(self, p: ProcessState, stack_id: int) -> tuple[tuple[str, int, str], ...] | None:
        """A stack without Python frames not resolved yet, leaf first, as (module path, offset in
        it, fixed name or "") the way FrameTable.frames_of would name its frames, without
        interning anything; None when no such stack waits."""
        pcs = p.heap.pending_pcs(stack_id)
        if pcs is None:
            return None
        mods = p.heap.modules
        skip = self.frames.skip_prefixes
        out: list[tuple[str, int, str]] = []
        for pc in pcs:
            addr = pc - 1
            i = mods.find(addr)
            if i is None:  # as FrameTable names it: the process's own unknown code, for its perf map
                out.append((mods.unknown.name, addr, ""))
                continue
            m = mods.modules[i]
            if skip and m.path.startswith(skip):
                key = (m.path, 0, FILTERED)
                if out and out[-1] == key:
                    continue
                out.append(key)
            else:
                out.append((m.path, addr - m.base, ""))
        return tuple(out) or (("[no frames]", 0, ""),)

    def callsite_paths(self, first: int) -> list[tuple[int, int]]:
        """(parent callsite or 0, frame id) of every callsite from id `first` on, in id order."""
        return self.trie.paths_from(first) if len(self.trie) >= first else []

    def frames_since(self, n: int) -> list[Frame]:
        """The frames interned after the first `n` (ids are dense from 1, in order)."""
        ids = self.frames.frames.ids
        return list(itertools.islice(ids, n, None)) if len(ids) > n else []  # islice walks from the start

    def mappings_since(self, n: int) -> list[Mapping]:
        """The mappings interned after the first `n`."""
        ids = self.frames.mappings.ids
        return list(itertools.islice(ids, n, None)) if len(ids) > n else []

    # -- clients -------------------------------------------------------------

    def _accept_all(self) -> None:
        # Those answered before the producer existed first: the first opens the profile's database,
        # before new clients can take the descriptors left (heapscope/launch.py keeps a few free).
        for accepted in self.listener.take():
            self.adopt(accepted)
        if self.listener.fileno() >= 0 and self.listener.accept(self.attach_pids, prepare=self._prepare):
            for accepted in self.listener.take():
                self.adopt(accepted)
            self.listener.make_ahead(self._prepare)  # a process tree's next client: no ring to make first

    def _prepare(self, memfd: int) -> Ingest:
        """The ring reader of a client about to be answered (a failure rejects the client)."""
        cfg = self.config
        return Ingest(memfd, cfg.shmem_size, stream=cfg.stream_allocations, dump_at_max=cfg.dump_at_max,
                      threads=cfg.threads, tsc=tsc_clock())  # the listener's answer said the same

    def adopt(self, accepted: Accepted) -> None:
        """Take over a client the listener answered (now, or before the producer existed)."""
        info = accepted.info
        ingest = accepted.ingest
        if not isinstance(ingest, Ingest):
            try:
                ingest = self._prepare(accepted.memfd)
            except Exception as e:  # answered already: told to stop, it runs on unprofiled
                self.listener.rejected_clients += 1
                self.log(f"client rejected: {e}")
                accepted.close()
                return
        conn = _socket.socket(fileno=accepted.conn.detach())
        conn.setblocking(False)
        info.parent_upid = self._upid_of(info.ppid)
        p = ProcessState(info=info, sock=conn, memfd=accepted.memfd, shm=accepted.shm, ingest=ingest,
                         heap=ProcessHeap(ingest.resolver))
        p.heap.modules.unknown = unknown_code_mapping(info.pid)  # its JIT code, named by its own perf map
        cfg = self.config
        p.flags.sampling_interval_bytes = p.flags.orig_sampling_interval_bytes = cfg.interval
        p.flags.from_startup = info.pid not in self.attach_pids
        p.last_dump_ts = info.start_ts
        self.processes[conn.fileno()] = p
        self.newest_upid[info.pid] = max(info.upid, self.newest_upid.get(info.pid, info.upid))
        # Its peak RSS so far, before the first drain: the records a client wrote before the
        # producer existed (`record`'s early start, listener.py) can take that drain a while,
        # and a short program may be gone by its end (or have exec'd another).
        self._read_rss(p, time.monotonic_ns(), check_exe=True)
        self.writer.add_process(info)  # committed with what comes next: its end rewrites it anyway
        self.log(f"pid {info.pid} ({info.name}) connected as upid {info.upid}")

    def _upid_of(self, pid: int) -> Upid | None:
        for p in reversed([*self.ended, *self.processes.values()]):
            if p.info.pid == pid:
                return p.info.upid
        return None

    def _watch_exit(self, p: ProcessState) -> bool:
        """The socket of `p` closed: if the process runs on (it closed the descriptor
        itself, as daemons do), watch its exit through a pidfd and keep reading its
        ring, which it still shares. False when it is gone (or no pidfd can be had),
        or when its client no longer profiles (nothing more can come)."""
        if p.meta("client_state") != codec.ClientState.ACTIVE:
            return False
        try:
            pidfd = os.pidfd_open(p.info.pid)
        except OSError:
            return False
        if procfs.has_exited(p.info.pid):
            os.close(pidfd)
            return False
        p.exit_fd = pidfd
        self.sockets_lost += 1
        self.log(f"pid {p.info.pid} closed its heapscope socket; its ring is read until it exits")
        return True

    @staticmethod
    def _peer_closed(sock: _socket.socket) -> bool:
        try:
            return sock.recv(64, _socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def _read_rss_due(self) -> None:
        """VmHWM of each process not read for RSS_EVERY_NS."""
        now = time.monotonic_ns()
        for p in list(self.processes.values()):
            if now - p.rss_read_ns >= RSS_EVERY_NS:
                self._read_rss(p, now)

    def _read_rss(self, p: ProcessState, now: int, check_exe: bool = False) -> None:
        """The process's peak RSS so far (VmHWM): read while it runs, since the kernel drops it
        before the socket's EOF tells us of the exit. Not once its pid exec'd another program
        (`sh -c 'exec prog'` gave sh prog's peak): a newer process of the pid connected, or, for
        one whose socket closed (exit_fd) or `check_exe`, its executable is another."""
        p.rss_read_ns = now
        pid = p.info.pid
        if self.newest_upid.get(pid) != p.info.upid or (
                (check_exe or p.exit_fd is not None) and procfs.exe_path(pid, []) != p.info.exe):
            return
        p.peak_rss = max(p.peak_rss, procfs.status_field(pid, "VmHWM") * 1024)

    # -- records -------------------------------------------------------------

    def _drain(self, p: ProcessState, limit: int = DRAIN_BATCH) -> int:
        """Drain up to `limit` records of `p`'s ring (0: all); how many ring bytes that consumed.

        Measured by the ring's read position, not by Ingest.stats(): that builds
        a dict of every counter, ~15 us, twice a call, hundreds of calls a second.
        """
        before = codec.read_meta(p.shm, "read_pos")
        now = time.monotonic_ns()
        module = True
        while module:  # a drain stops before a STACK after a MODULE (Ingest.drain): on past it
            module = False
            for rec in p.ingest.drain(now, limit):
                module = module or rec[4:8] == _MODULE_TYPE
                self._handle_record(p, rec, now)
        for h in p.custom_heaps.values():
            h.tracker.expire(now)
        if self.config.stream_allocations:
            chunk = p.ingest.tracker.take_stream()
            if chunk:
                p.stream.append(chunk)
        return (codec.read_meta(p.shm, "read_pos") - before) & _U64

    def _handle_record(self, p: ProcessState, rec: bytes, now: int) -> None:
        try:
            r = codec.decode_record(rec)
        except codec.MalformedRecord:
            p.stats.malformed_records += 1
            return
        if isinstance(r, codec.PyCodeRecord):
            p.stats.python_codes += 1
            p.heap.define_code(r.code_key, r.name, r.file, r.line_format, r.table, r.first_line)
        elif isinstance(r, codec.PyInfoRecord):
            p.python_status = r.status
            p.python_state = r.state
            p.python_pymem = r.pymem
            p.heap.python.eval_lo, p.heap.python.eval_hi = r.eval_lo, r.eval_hi
        elif isinstance(r, codec.ModuleRecord):
            if is_jitdump_path(r.path):  # names for its JIT code, not code
                self.jitdumps[p.info.upid] = r.path
                return
            p.stats.modules += 1
            # A name without '/' names no file (linux-vdso.so.1: client/modules.c, collect).
            if "/" in r.path and not r.path.startswith(("/", "[")):
                r = absolute_module(p.info.pid, r)
            gone = p.heap.modules.overlapped(r)
            if gone:  # loaded where an unloaded object was: the stacks so far are that one's
                p.stats.modules_replaced += 1
                p.heap.replace_modules(gone, self.frames, self.trie, p.ingest.tracker)
            self.frames.add_module(p.heap.modules, r)
            if self.on_module is not None:
                self.on_module(r.path, r.build_id.hex())
        elif isinstance(r, codec.HeapMallocRecord):
            h = self._custom_heap(p, r.heap_id)
            if h is not None:
                h.samples += 1
                h.tracker.malloc(r.seq, r.addr, r.alloc_size, r.sample_size, r.stack_id, p.ingest.ns_of(r.ts), now, 0,
                                 r.label_set)
        elif isinstance(r, codec.HeapFreeRecord):
            h = self._custom_heap(p, r.heap_id)
            if h is not None:
                h.frees += 1
                h.tracker.free(r.seq, r.addr, now, p.ingest.ns_of(r.ts))
        elif isinstance(r, codec.LabelSetRecord):
            p.labels.add(r)
        elif isinstance(r, codec.StackRecord):  # not handed over: the ring reader keeps each in C (Ingest.resolver)
            p.stats.malformed_records += 1
        elif r.heap_id >= codec.FIRST_CUSTOM_HEAP:
            self._add_custom_heap(p, r)
        else:
            p.heap_name = r.name or p.heap_name
            p.flags.sampling_interval_bytes = r.interval

    # -- custom heaps (wire.h, "Custom heaps") ---------------------------------

    def _add_custom_heap(self, p: ProcessState, r: codec.HeapRecord) -> None:
        """A heap the program registered: its own tracker, its own sequence."""
        python = r.heap_id == codec.PY_HEAP_ID and r.name == codec.PY_HEAP_NAME  # the client's own (pymem.c)
        builtin = python or codec.MAP_HEAPS.get(r.heap_id) == r.name  # and its mmap and brk heaps (maps.c)
        if (r.heap_id in p.custom_heaps or (r.heap_id >= codec.FIRST_CUSTOM_HEAP + codec.MAX_CUSTOM_HEAPS
                                            and not builtin)
                or not (builtin or valid_heap_name(r.name)) or r.interval < 1
                or any(h.name == r.name for h in p.custom_heaps.values())):
            p.stats.malformed_records += 1
            return
        p.custom_heaps[r.heap_id] = CustomHeap(
            r.heap_id, r.name, r.interval, Tracker(dump_at_max=self.config.dump_at_max))
        if builtin:
            # Disjoint from malloc's heap, their sum is the program's memory: one peak for all,
            # the moment that sum is largest (tracker.h, "One peak for several heaps").
            p.custom_heaps[r.heap_id].tracker.share_peak(p.ingest.tracker)
        if python:  # as busy as malloc's: its records stay in C (ingest_core.h)
            p.ingest.route(r.heap_id, p.custom_heaps[r.heap_id].tracker)
        self.log(f"pid {p.info.pid}: custom heap {r.name} (interval {r.interval})")

    @staticmethod
    def _custom_heap(p: ProcessState, heap_id: int) -> CustomHeap | None:
        h = p.custom_heaps.get(heap_id)
        if h is None:  # the client announces a heap before any of its records
            p.stats.malformed_records += 1
        return h

    def _custom_heap_rows(self, p: ProcessState, final: bool) -> list[tuple[CustomHeap, tuple[int, ...]]]:
        """The dump rows of each custom heap, flat (ProcessHeap.dump_values). Called after the
        malloc heap's dump_values, whose resolve gave every stack received so far its callsite
        (stack ids are shared by all the heaps of a process)."""
        out = []
        for h in p.custom_heaps.values():
            if final:
                h.tracker.flush()
            self.bind_callsites(p, h.tracker, final)
            out.append((h, unpack_rows(DUMP_ROW, h.tracker.dump())))
        return out

    def bind_callsites(self, p: ProcessState, tracker: Tracker, final: bool = False) -> None:
        """Give a custom heap's tracker the callsites the malloc heap's resolve found for
        its stacks (stack ids are shared by every heap of a process); `final`: a stack
        never received is booked under UNDEFINED_STACK."""
        left = p.heap.resolver.bind(tracker)  # in C: a Python heap's tracker has a stack per sample
        if final and left:
            stray = self.trie.callsite([self.frames.special(UNDEFINED_STACK)])
            for stack_id in left:
                tracker.set_callsite(stack_id, stray)

    # -- dumps ---------------------------------------------------------------

    def resolve_early(self) -> None:
        """Resolve what can be while the processes run (ProcessHeap.resolve_known) and write
        the frames and callsites that made: the end's dump then has few left to do. Committed
        here, while the target runs: left to the final dump's commit, a compiler's ~100k
        callsites (4 MiB) were written to the log and checkpointed into the file after its
        exit (10 of the 23 ms of CPU its final dump took; benchmarks/end_split.py). Without
        fsyncs (store/writer.py, synchronous=OFF) a commit costs the pages it writes. The rings
        are drained between the steps: a Python program's took 80-180 ms, and a full ring blocks."""
        for p in list(self.processes.values()):
            p.heap.resolve_known(self.frames, self.trie, p.ingest.tracker)
            for h in p.custom_heaps.values():  # Python's heap: its stacks' callsites, as a dump gives them
                self.bind_callsites(p, h.tracker)
            # Between two processes too: a Pool's four Python processes took ~80 ms here, and a
            # worker killed by terminate() keeps the last VmHWM read before its peak
            self._read_rss_due()
            self._drain_all()
        if self._write_tables(between=self._drain_all):
            self.writer.commit()

    def _drain_all(self) -> int:
        """_drain every process's ring: the ring bytes consumed."""
        return sum(self._drain(p) for p in list(self.processes.values()))

    def _write_tables(self, between: Callable[[], object] = _nothing) -> bool:
        """Write the mappings, frames and callsites interned since the last call, `between()` after
        each CALLSITES_PER_WRITE callsites but the last; False when none."""
        w = self.writer
        new = (self.frames.mappings.take_new(), self.frames.frames.take_new(), self.frames.take_new_python(),
               self.trie.take_new_flat())
        adders: tuple[Callable[..., None], ...] = (w.add_mappings, w.add_frames, w.add_python_symbols)
        for rows, add in zip(new[:3], adders, strict=True):
            if rows:  # a short process's final dump has new mappings only: no empty executemany
                add(rows)
        step = CALLSITES_PER_WRITE * 4
        for at in range(0, len(new[3]), step):
            if at:
                between()
            w.add_callsites_flat(new[3][at:at + step])
        return any(new)

    def dump(self, p: ProcessState, reason: str, final: bool = False, commit: bool = True) -> None:
        """Write one dump of `p`: the change of every callsite since the last one.

        With dump_at_max the tracker's rows are the state at the peak
        (heapprofd's self_max), so SUM(size) up to this dump is the peak. The
        final dump also writes the process's peak (heapscope_peak_allocation) and its
        lifetimes and sizes (heapscope_callsite_lifetime, heapscope_callsite_size).
        `commit` False: the caller commits (and says it), with rows of its own (_end).
        """
        if not self.keep:
            return  # nothing to write; the trackers' figures stay as they are
        heap: ProcessHeap = p.heap
        tracker = p.ingest.tracker
        rows = heap.dump_values(tracker, self.frames, self.trie, final)
        custom = self._custom_heap_rows(p, final) if p.custom_heaps else []
        w = self.writer
        self._write_tables()
        ts = max(time.monotonic_ns(), p.last_dump_ts + 1)
        # libc.malloc's heap, then each heap carried as a custom one
        for name, t, heap_rows in ((p.heap_name, tracker, rows), *((h.name, h.tracker, r) for h, r in custom)):
            w.add_dump_values(p.info.upid, p.last_dump_ts, ts, reason, heap_rows, name)
            if final:
                peak = heap.peak_values(t)
                if peak:
                    w.add_peak_values(p.info.upid, t.stats()["peak_ts"], name, peak)
                w.add_memory(p.info.upid, name, *heap.memory_values(t))
                w.add_lifetime_values(p.info.upid, name, *heap.lifetime_values(t))
            p.labels.write(w, p.info.upid, p.last_dump_ts, ts, name, t, final)
        p.last_dump_ts = ts
        if p.stream:
            w.add_stream(self._stream_rows(p))
        if commit:
            w.commit()
            # Said once it is in the file (a test that fills the disk after it relies on that).
            self.log(f"dump {heap.dumps} ({reason}) of pid {p.info.pid}: {heap.unreleased} bytes unreleased")

    def dump_all(self, reason: str) -> None:
        """A consistent dump of every process: each ring is drained first."""
        for p in list(self.processes.values()):
            while self._drain(p, limit=0):
                pass
            self.dump(p, reason)

    def hit_guardrail(self, what: str) -> None:
        """A producer guardrail was hit: final dumps, then the targets run on unprofiled."""
        self.guardrail = what
        self.stop_accepting()
        for p in list(self.processes.values()):
            p.flags.hit_guardrail = True
            p.request_shutdown()
            self._end(p, reason="guardrail", disconnected=False)

    def reject_concurrent(self, pid: int) -> None:
        """-p PID that another session profiles: recorded, not attached."""
        upid = Upid(self.next_upid)
        self.next_upid += 1
        args = procfs.cmdline_args(pid)
        info = procfs.process_info(upid, pid, procfs.ppid(pid), procfs.uid(pid))
        info.cmdline = procfs.join_args(args)
        info.end_ts = info.start_ts
        flags = ProcessFlags(from_startup=False, rejected_concurrent=True)
        self.writer.add_process(info)
        self.writer.set_process_flags(info, flags)
        self.writer.commit()

    def _stream_rows(self, p: ProcessState) -> list[tuple[int, int, str, int, int, int, int, int | None]]:
        upid, callsite = p.info.upid, p.heap.callsite
        rows: list[tuple[int, int, str, int, int, int, int, int | None]] = []
        for chunk in p.stream:
            for kind, seq, addr, size, sample, stack, ts in STREAM_ROW.iter_unpack(chunk):
                rows.append((upid, seq, "malloc" if kind == OP_MALLOC else "free", ts, addr, size, sample,
                             callsite(stack) if stack else None))
        p.stream.clear()
        return rows

    def _end(self, p: ProcessState, reason: str, disconnected: bool, at: int | None = None) -> None:
        """Final drain, flush of pending operations, final dump, stats; `at`: when its exit was
        seen (the end_ts), default now."""
        if not p.meta("exit_peak_rss"):  # else its client read VmHWM at its very end (_end_rss)
            self._read_rss(p, time.monotonic_ns())  # often too late (the memory is gone), sometimes not
        while self._drain(p, limit=0):
            pass
        p.ingest.tracker.flush()
        self._drain(p, limit=0)  # take the stream of what flush applied
        seen = time.monotonic_ns() if at is None else at
        # The client's own clock at its exit when it noted one: the producer sees an exit only
        # later, and a process started meanwhile (a shell's next command) did not run with this one.
        told = p.meta("exit_ts")
        p.info.end_ts = max(p.info.start_ts, told if 0 < told <= seen else seen)
        if reason == "exit":
            self.exited_pids.add(p.info.pid)
        p.flags.disconnected = disconnected
        self._end_rss(p)
        p.flags.client_error = client_error_name(p.meta("client_error"))
        p.flags.unwinder = unwinder_name(p.meta("unwinder"), p.meta("client_state"))
        st = p.ingest.stats()
        p.stats.stacks += st["held_stacks"]  # kept in C by the process's resolver: never decoded here
        p.flags.buffer_corrupted = bool(st["corrupt"])
        p.flags.buffer_overran = p.meta("dropped_records") > 0
        self.dump(p, reason, final=True, commit=False)  # one commit for it and the rows below
        if self.on_process_end is not None and p.heap.modules.unknown in self.frames.mappings.ids:
            try:
                self.on_process_end(p.info.pid, p.info.uid, self.jitdumps.get(p.info.upid))
            except Exception as e:  # names for its JIT frames are a bonus; its data is not
                self.log(f"pid {p.info.pid}: its perf map was not read: {e}")
        py = p.custom_heaps.get(codec.PY_HEAP_ID)
        if py is not None:
            routed_mallocs, routed_frees = p.ingest.routed(codec.PY_HEAP_ID)
            py.samples += routed_mallocs
            py.frees += routed_frees
        # Python's heap and the mmap and brk heaps are disjoint from malloc's (client/pymem.c books a
        # request once, client/maps.c not malloc's own mappings), so the memory seen is all of them:
        # their joint peak (st's already: the trackers share it).
        joint = [h.tracker.stats() for h in p.custom_heaps.values() if h.heap_id in JOINT_HEAPS]
        if joint:
            st = {**st, "sampled_bytes": st.get("sampled_bytes", 0) + sum(j.get("sampled_bytes", 0) for j in joint)}
        self.writer.add_process(p.info)
        self.writer.set_process_flags(p.info, p.flags)
        self.writer.add_stats(process_stats_rows(p, st) + p.labels.stats_rows(p.info.upid))
        if p.custom_heaps or not p.flags.from_startup:
            self.writer.add_stats(custom_heap_stats(p))
        self.writer.commit()
        if self.keep:
            self.log(f"dump {p.heap.dumps} ({reason}) of pid {p.info.pid}: {p.heap.unreleased} bytes unreleased")
        p.final_stats = st
        p.final_meta = {name: p.meta(name) for name in codec.CLIENT_COUNTERS}
        del self.processes[p.sock.fileno()]
        p.close()
        self.ended.append(p)

    def _end_rss(self, p: ProcessState) -> None:
        """The process's peak RSS at its end, never below what was polled: VmHWM as its client read
        it at its end (wire.h, exit_peak_rss: its last destructor or _exit); without that (a signal),
        for a target the caller started, its wait's. That covers all the images of the pid (exec): only its latest
        process here takes it. And heapscope's own resident bytes then (own_rss)."""
        peak = _plausible(p.meta("exit_peak_rss"))
        pid = p.info.pid
        if not peak and self.exit_peak is not None and pid in self.target_pids and \
                self.newest_upid.get(pid) == p.info.upid:
            peak = self.exit_peak(pid)
        p.peak_rss = max(p.peak_rss, peak)
        p.own_rss = _plausible(p.meta("own_rss"))

    def global_stats(self) -> list[StatRow]:
        rows: list[StatRow] = [
            ("rejected_clients", None, "error", "producer", self.rejected_clients,
             "connections refused: unknown session, version or pid"),
            ("untargeted_clients", None, "info", "producer", self.untargeted_clients,
             "processes left dormant: not picked by -n"),
            ("sockets_lost", None, "info", "producer", self.sockets_lost,
             "processes that closed heapscope's socket: their rings were read until they exited"),
            ("clients_without_descriptors", None, "data_loss", "producer", self.no_descriptors,
             "processes not profiled: heapscope was out of file descriptors"),
        ]
        if self.guardrail:
            rows.append(("hit_guardrail", None, "data_loss", "producer", 1,
                         f"profiling stopped early: {self.guardrail}"))
        return rows


def _plausible(nbytes: int) -> int:
    """A byte count the client wrote to the meta (the target can write anything there): 0 past 2^48."""
    return nbytes if nbytes < 1 << 48 else 0

