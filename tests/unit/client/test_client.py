"""libheapscope.so end to end, against a minimal fake producer written here.

The fake producer plays the producer's part of wire.h: it listens on a unix
socket, checks the hello, answers with a config plus the ring memfd, and reads
the ring the way the real reader does (decode headers, follow PAD records,
zero what it consumed, advance read_pos). It is test code only.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from heapscope.wire import codec

CLIENT_SRC = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"


def family(macro: str = "HS_MALLOC_FAMILY") -> list[str]:
    """A hooked family as family.h writes it once: the malloc family, or the mapping calls
    (HS_MAP_FAMILY)."""
    text = (CLIENT_SRC / "family.h").read_text()
    body = text[text.index(f"#define {macro}(X)"):].split("\n\n")[0]
    names = re.findall(r"X\([^,]+,\s*(\w+)\s*,", body)
    assert names, body
    return names


def malloc_family() -> list[str]:
    """The hooked malloc family (HS_MALLOC_FAMILY)."""
    names = family()
    assert "malloc" in names and "free" in names, names
    return names


EXPORTED = {*malloc_family(), *family("HS_MAP_FAMILY"), "heapscope_attach",
            "heapscope_heap_register_v1", "heapscope_heap_alloc_v1", "heapscope_heap_free_v1",
            "heapscope_label_push_v1", "heapscope_label_pop_v1", "heapscope_label_python_v1", "heapscope_label_bind_v1",
            "_exit", "_Exit",
            "dlclose"}


@dataclass
class Ring:
    """The reader side of the shared ring, as the producer implements it."""

    shm: mmap.mmap
    size: int
    records: list[tuple[int, bytes]] = field(default_factory=list)

    def meta(self, name: str) -> int:
        return codec.read_meta(self.shm, name)

    def drain(self) -> int:
        """Consumes every published record; returns how many it read."""
        rp = self.meta("read_pos")
        wp = self.meta("write_pos")
        n = 0
        while rp < wp:
            off = rp & (self.size - 1)
            base = codec.META_SIZE + off
            (hdr,) = codec.HEADER.unpack_from(self.shm, base)
            if hdr == 0:
                break  # reserved, not yet written: stay FIFO
            size, rtype = hdr & 0xFFFFFFFF, hdr >> 32
            assert size >= 8 and size % 8 == 0 and off + size <= self.size, (off, size, rtype)
            if rtype != codec.RecordType.PAD:
                self.records.append((rtype, bytes(self.shm[base:base + size])))
            self.shm[base:base + size] = b"\0" * size
            rp += size
            n += 1
            codec.write_meta(self.shm, "read_pos", rp)
            wp = self.meta("write_pos")
        return n


class FakeProducer:
    """Accepts clients on a unix socket; the first valid one gets the ring."""

    def __init__(self, *, interval: int = 1, ring_size: int = 1 << 20,
                 flags: int = codec.CFG_BLOCK_CLIENT, unwinder: int = codec.Unwinder.AUTO,
                 max_frames: int = 64, seed: int = 1234) -> None:
        self.dir = tempfile.mkdtemp(prefix="hs-client-", dir="/tmp")  # short: sun_path
        self.path = os.path.join(self.dir, "sock")
        self.token = os.urandom(codec.TOKEN_SIZE)
        self.config = codec.Config(codec.Status.OK, interval, ring_size, seed, flags, unwinder,
                                   max_frames)
        self.memfd = os.memfd_create("hs-test-ring", os.MFD_CLOEXEC)
        os.ftruncate(self.memfd, codec.META_SIZE + ring_size)
        shm = mmap.mmap(self.memfd, codec.META_SIZE + ring_size, mmap.MAP_SHARED)
        codec.write_meta(shm, "magic", codec.WIRE_MAGIC)
        codec.write_meta(shm, "version", codec.WIRE_VERSION)
        codec.write_meta(shm, "ring_size", ring_size)
        self.ring = Ring(shm, ring_size)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.conns: list[socket.socket] = []
        self.hellos: list[codec.Hello] = []
        self.connected = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def env(self, lib: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "LD_PRELOAD": str(lib),
            codec.ENV_SOCKET: self.path,
            codec.ENV_TOKEN: self.token.hex(),
        })
        env.pop("HEAPSCOPE_DEBUG", None)
        return env

    def _accept_loop(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(10)
            data = b""
            while len(data) < codec.HELLO.size:
                chunk = conn.recv(codec.HELLO.size - len(data))
                if not chunk:
                    break
                data += chunk
            if len(data) < codec.HELLO.size:
                conn.close()
                continue
            hello = codec.Hello.unpack(data)
            self.hellos.append(hello)
            ok = (hello.magic == codec.WIRE_MAGIC and hello.version == codec.WIRE_VERSION
                  and hello.token == self.token and not self.connected.is_set())
            if ok:
                socket.send_fds(conn, [self.config.pack()], [self.memfd])
                self.connected.set()
            else:
                rejected = codec.Config(codec.Status.REJECTED, 1, self.config.ring_size, 0, 0, 0, 0)
                conn.sendall(rejected.pack())
            self.conns.append(conn)

    def close_clients(self) -> None:
        for c in self.conns:
            c.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.server.close()
        self.close_clients()
        os.close(self.memfd)
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, cmd: list[str], lib: Path, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        """Runs cmd under the client and reads the ring until it exits."""
        proc = subprocess.Popen(cmd, env=self.env(lib), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            assert time.monotonic() < deadline, "target did not finish"
            if self.ring.drain() == 0:
                time.sleep(0.0005)  # polling the ring, as the real reader does
        out, err = proc.communicate(timeout=10)
        self.ring.drain()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture
def producer_factory() -> Iterator[Callable[..., FakeProducer]]:
    made: list[FakeProducer] = []

    def make(**kw: int) -> FakeProducer:
        p = FakeProducer(**kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


Decoded = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[Any], list[Any], list[Any]]


def decode(records: list[tuple[int, bytes]]) -> Decoded:
    """(MALLOC fields, FREE fields, stacks, modules, heaps): the records of each kind, decoded."""
    mallocs: list[tuple[Any, ...]] = []
    frees: list[tuple[Any, ...]] = []
    stacks: list[Any] = []
    modules: list[Any] = []
    heaps: list[Any] = []
    for rtype, rec in records:
        body = rec[8:]
        if rtype == codec.RecordType.MALLOC:
            mallocs.append(codec.MALLOC.unpack_from(body))
        elif rtype == codec.RecordType.FREE:
            frees.append(codec.FREE.unpack_from(body))
        elif rtype == codec.RecordType.STACK:
            stacks.append(codec.decode_record(rec))
        elif rtype == codec.RecordType.MODULE:
            modules.append(codec.decode_record(rec))
        elif rtype == codec.RecordType.HEAP:
            heaps.append(codec.decode_record(rec))
        else:
            raise AssertionError(f"unknown record type {rtype}")
    return mallocs, frees, stacks, modules, heaps


def expected_workload_sizes(iters: int, threads: int = 4) -> Counter[int]:
    sizes: Counter[int] = Counter()
    for t in range(threads):
        for i in range(iters):
            k = t * iters + i
            sizes[20000 + k % 1000] += 1
            sizes[21000 + 2 * (k % 500)] += 1
            sizes[22000 + k % 1000] += 1
            sizes[23000 + k % 1000] += 1
            sizes[24000 + k % 1000] += 1
            sizes[25000 + 5 * (k % 200)] += 1
        for s in (26000 + t, 26112 + t * 128, 26200 + t, 26300 + t):
            sizes[s] += 1
    return sizes


# --------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_exports_only_the_malloc_family(client_lib: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    out = subprocess.run([nm, "-D", "--defined-only", str(client_lib)], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names == EXPORTED


def test_version_script_lists_the_family_of_family_h() -> None:
    text = (CLIENT_SRC / "preload.map").read_text()
    body = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    glob = body[body.index("global:") + len("global:"):body.index("local:")]
    assert {n.strip() for n in glob.split(";") if n.strip()} == EXPORTED


@pytest.mark.timeout(120)
def test_settings_are_read_with_secure_getenv(client_lib: Path) -> None:
    """A setuid target must not take the socket path or debug switch from its caller."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    out = subprocess.run([nm, "-D", "--undefined-only", str(client_lib)], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    imported = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    assert "secure_getenv" in imported
    assert "getenv" not in imported


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cmd", [["ls", "-lA"], ["sh", "-c", "echo hi; exit 3"]])
def test_dormant_without_socket_is_invisible(client_lib: Path, cmd: list[str], tmp_path: Path) -> None:
    # ls lists a folder of its own: `/` changed between the two runs while other tests wrote /tmp
    listed = tmp_path / "listed"
    listed.mkdir()
    for name in ("a", ".b", "c.txt"):
        (listed / name).write_text(name)
    if cmd[0] == "ls":
        cmd = [*cmd, str(listed)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEAPSCOPE_")}
    plain = subprocess.run(cmd, env=env, capture_output=True, timeout=30)
    env["LD_PRELOAD"] = str(client_lib)
    pre = subprocess.run(cmd, env=env, capture_output=True, timeout=30)
    assert (pre.returncode, pre.stdout, pre.stderr) == (plain.returncode, plain.stdout, plain.stderr)


@pytest.mark.timeout(120)
def test_dormant_workload_unchanged(client_lib: Path, build_program: Callable[..., Path]) -> None:
    exe = build_program("workload.c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEAPSCOPE_")}
    plain = subprocess.run([str(exe)], env=env, capture_output=True, timeout=30)
    env["LD_PRELOAD"] = str(client_lib)
    # An unreachable socket: the handshake fails and the client stays dormant, silently.
    env[codec.ENV_SOCKET] = "/nonexistent/heapscope.sock"
    env[codec.ENV_TOKEN] = "00" * 16
    pre = subprocess.run([str(exe)], env=env, capture_output=True, timeout=30)
    assert (pre.returncode, pre.stdout, pre.stderr) == (plain.returncode, plain.stdout, b"")


@pytest.mark.timeout(180)
def test_thread_id_costs_no_system_call_per_sample(client_lib: Path, build_program: Callable[..., Path],
                                                   producer_factory: Callable[..., FakeProducer]) -> None:
    """Each thread asks the kernel its id once (then it is cached in its TLS), not once per sample."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    exe = build_program("workload.c", "-DITERS=300")
    prod = producer_factory(interval=1, ring_size=1 << 16)
    env = prod.env(client_lib)
    lib = env.pop("LD_PRELOAD")  # the client goes into the program, not into strace
    log = Path(prod.dir) / "strace.log"
    proc = subprocess.Popen([strace, "-f", "-qq", "-e", "trace=gettid", "-o", str(log), "-E", f"LD_PRELOAD={lib}",
                             str(exe)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while proc.poll() is None:
        assert time.monotonic() < deadline, "target did not finish"
        if prod.ring.drain() == 0:
            time.sleep(0.0005)  # polling the ring, as the real reader does
    proc.communicate(timeout=10)
    prod.ring.drain()
    assert proc.returncode == 0
    mallocs, *_ = decode(prod.ring.records)
    assert len(mallocs) > 7000 and len({m[6] for m in mallocs}) == 5  # 4 x 300 x 6 and more; 4 workers and main
    calls = [line for line in log.read_text().splitlines() if "gettid(" in line]
    assert 5 <= len(calls) <= 10, calls  # the 5 threads' first samples (and the client's start-up)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("unwinder", [codec.Unwinder.AUTO, codec.Unwinder.FP,
                                      codec.Unwinder.NONE])
def test_interval_one_records_everything(client_lib: Path, build_program: Callable[..., Path],
                                         producer_factory: Callable[..., FakeProducer], unwinder: int) -> None:
    iters = 300
    exe = build_program("workload.c", f"-DITERS={iters}")
    prod = producer_factory(interval=1, ring_size=1 << 16, unwinder=unwinder)
    res = prod.run([str(exe)], client_lib)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"workload done {iters}".encode())
    assert res.stderr == b""
    ring = prod.ring
    assert ring.meta("read_pos") == ring.meta("write_pos")
    # profiled to its end: its last destructor said so before shutting the socket down
    assert ring.meta("client_state") == codec.ClientState.EXITING
    assert ring.meta("client_error") == codec.ClientError.NONE
    assert ring.meta("dropped_records") == 0
    if unwinder != codec.Unwinder.AUTO:
        assert ring.meta("unwinder") == unwinder
    else:
        assert ring.meta("unwinder") in (codec.Unwinder.LIBUNWIND, codec.Unwinder.CFA, codec.Unwinder.FP)
    assert len(prod.hellos) == 1 and prod.hellos[0].pid > 0

    mallocs, frees, stacks, modules, heaps = decode(ring.records)
    assert [(h.heap_id, h.name, h.interval) for h in heaps] == [(1, "libc.malloc", 1)]

    # Sequence numbers: exactly 1..N over mallocs and frees, no gap, no repeat.
    seqs = sorted([m[0] for m in mallocs] + [f[0] for f in frees])
    assert seqs == list(range(1, len(seqs) + 1))

    # Every allocation of the program, once, with its size (exact at interval 1).
    ours = [m for m in mallocs if 20000 <= m[3] < 27000]
    assert Counter(m[3] for m in ours) == expected_workload_sizes(iters)
    assert all(m[2] == m[3] for m in mallocs)  # sample_size == alloc_size

    # Thread ids: worker t's own sizes carry one tid, its own (none is main's, which is the pid).
    tids = [{m[6] for m in ours if m[3] in (26000 + t, 26112 + t * 128, 26200 + t, 26300 + t)} for t in range(4)]
    assert all(len(t) == 1 for t in tids), tids
    assert len(set.union(*tids)) == 4 and not set.union(*tids) & {0, prod.hellos[0].pid}
    assert {m[6] for m in ours} == set.union(*tids)
    assert all(m[7] == 0 for m in mallocs)  # reserved

    # Replay in sequence order: every free hits a live sampled address, and the
    # program freed everything it allocated in the recognizable ranges.
    ops = sorted([(m[0], "m", m[1], m[3]) for m in mallocs] + [(f[0], "f", f[1], 0) for f in frees])
    live: dict[int, int] = {}
    for _, kind, addr, size in ops:
        if kind == "m":
            assert addr not in live, "malloc of a live address"
            live[addr] = size
        else:
            assert addr in live, "free of an address that is not live"
            del live[addr]
    assert not [s for s in live.values() if 20000 <= s < 27000]

    # Stacks: each defined once, every malloc's stack defined.
    ids = [s.stack_id for s in stacks]
    assert len(ids) == len(set(ids))
    assert 0 not in ids
    assert {m[4] for m in mallocs} <= set(ids)

    # Modules: the program itself, with its build id; the leaf of our
    # allocations is in the program (the caller of malloc, not the client).
    prog = [m for m in modules if m.path == str(exe)]
    assert len(prog) == 1, [m.path for m in modules]
    assert len(prog[0].build_id) == 20
    assert prog[0].start < prog[0].end
    assert any("libc.so" in m.path for m in modules)
    by_id = {s.stack_id: s for s in stacks}
    # The client strips its own frames: no stack starts inside it.
    ours_lib = [m for m in modules if m.path == str(client_lib)]
    assert len(ours_lib) == 1
    assert not [s for s in stacks if s.pcs and ours_lib[0].start <= s.pcs[0] < ours_lib[0].end]
    if unwinder == codec.Unwinder.NONE:
        assert {len(s.pcs) for s in stacks} == {1}
    for m in ours:
        pcs = by_id[m[4]].pcs
        assert pcs, "empty stack"
        assert prog[0].start <= pcs[0] < prog[0].end or "libc.so" in _module_of(modules, pcs[0])
    # The "operator new" wrapper is a frame of its own: its allocations have
    # a leaf different from the direct mallocs of the same thread.
    leaves = {by_id[m[4]].pcs[0] for m in ours}
    assert len(leaves) >= 6


def _module_of(modules: list[codec.ModuleRecord], pc: int) -> str:
    for m in modules:
        if m.start <= pc < m.end:
            return m.path
    return "?"


@pytest.mark.timeout(180)
def test_sampled_interval_estimate(client_lib: Path, build_program: Callable[..., Path],
                                   producer_factory: Callable[..., FakeProducer]) -> None:
    iters = 2000
    exe = build_program("workload.c", f"-DITERS={iters}")
    prod = producer_factory(interval=4096, ring_size=1 << 20)
    res = prod.run([str(exe)], client_lib)
    assert res.returncode == 0, res.stderr
    mallocs, frees, *_ = decode(prod.ring.records)
    seqs = sorted([m[0] for m in mallocs] + [f[0] for f in frees])
    assert seqs == list(range(1, len(seqs) + 1))
    truth = sum(s * n for s, n in expected_workload_sizes(iters).items())
    estimate = sum(m[2] for m in mallocs if 20000 <= m[3] < 27000)
    # All these sizes are >= the interval: recorded exactly.
    assert estimate == truth


@pytest.mark.timeout(120)
def test_fork_without_exec_does_not_hang(client_lib: Path, build_program: Callable[..., Path],
                                         producer_factory: Callable[..., FakeProducer]) -> None:
    exe = build_program("fork_threads.c")
    prod = producer_factory(interval=512, ring_size=1 << 16)
    res = prod.run([str(exe)], client_lib, timeout=90)
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"forks ok 20\n"
    assert res.stderr == b""
    # the parent profiled to its end (forked children never disabled it)
    assert prod.ring.meta("client_state") == codec.ClientState.EXITING
    assert len(prod.hellos) == 1  # children without exec never connect


@pytest.mark.timeout(120)
def test_producer_gone_while_ring_full(client_lib: Path, build_program: Callable[..., Path],
                                       producer_factory: Callable[..., FakeProducer]) -> None:
    exe = build_program("workload.c", "-DITERS=2000")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEAPSCOPE_")}
    plain = subprocess.run([str(exe)], env=env, capture_output=True, timeout=30)
    prod = producer_factory(interval=1, ring_size=1 << 13)
    # The wait's own bound (10 s) far away: under load it ran out before the test closed the
    # socket (WAIT_TIMEOUT, not the PRODUCER_GONE this test is about)
    proc = subprocess.Popen([str(exe)], env=dict(prod.env(client_lib), HEAPSCOPE_MAX_WAIT_MS="600000"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Never read: wait until the client blocks on a full ring, then go away.
    deadline = time.monotonic() + 30
    while prod.ring.meta("blocked_ns") == 0:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.001)
    prod.close_clients()
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (plain.returncode, plain.stdout, b"")
    assert prod.ring.meta("client_state") == codec.ClientState.DISABLED
    assert prod.ring.meta("client_error") == codec.ClientError.PRODUCER_GONE


@pytest.mark.timeout(120)
def test_sampled_free_keeps_errno_through_a_ring_wait(client_lib: Path, build_program: Callable[..., Path],
                                                      producer_factory: Callable[..., FakeProducer]) -> None:
    """A free of a sampled address keeps the program's errno, also when its FREE record waits
    for ring space (the wait's recv and nanosleep set errno) and ends in a disable with a debug
    line: the free path leaves errno to the ring wait and hs_debug (record.c,
    record_free_slow)."""
    exe = build_program("errno_free.c")
    # First with room for everything: how many bytes come before the first 100-byte MALLOC
    # (the handshake's records and the mallocs' STACK).
    big = producer_factory(interval=1, ring_size=1 << 20)
    res = big.run([str(exe), "16"], client_lib)
    assert res.returncode == 0 and res.stdout == b"errno changed by 0 of 16 frees\n"
    head = 0
    for rtype, rec in big.ring.records:
        if rtype == codec.RecordType.MALLOC and codec.MALLOC.unpack_from(rec[8:])[3] == 100:
            break
        head += len(rec)
    # Then a ring that holds the n MALLOCs (64 bytes each) with 1 KiB to spare, not the FREEs
    # (24 bytes each) too: it fills up during the frees, and nothing reads it.
    ring_size = 1 << 16
    n = (ring_size - head - 1024) // 64
    assert 100 < n <= 4096, head
    prod = producer_factory(interval=1, ring_size=ring_size)
    env = dict(prod.env(client_lib), HEAPSCOPE_DEBUG="1")
    proc = subprocess.Popen([str(exe), str(n)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while prod.ring.meta("blocked_ns") < 5_000_000:  # some liveness checks into the wait
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.001)
    prod.close_clients()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out == f"errno changed by 0 of {n} frees\n".encode()
    assert b"client disabled" in err
    prod.ring.drain()
    mallocs, frees, *_ = decode(prod.ring.records)
    assert sum(1 for m in mallocs if m[3] == 100) == n  # every malloc was written ...
    assert 0 < len(frees) < n  # ... and the wait was a free's
    assert prod.ring.meta("client_error") == codec.ClientError.PRODUCER_GONE


@pytest.mark.timeout(120)
def test_shutting_down_disables(client_lib: Path, build_program: Callable[..., Path], producer_factory: Callable[...,
                                FakeProducer]) -> None:
    exe = build_program("workload.c", "-DITERS=300")
    prod = producer_factory(interval=1, ring_size=1 << 16)
    codec.write_meta(prod.ring.shm, "shutting_down", 1)
    res = prod.run([str(exe)], client_lib)
    assert res.returncode == 0 and res.stderr == b""
    assert prod.ring.meta("client_state") == codec.ClientState.DISABLED
    assert prod.ring.meta("client_error") in (codec.ClientError.SHUTTING_DOWN,)


@pytest.mark.timeout(120)
def test_drop_mode_counts_and_keeps_sequence(client_lib: Path, build_program: Callable[..., Path],
                                             producer_factory: Callable[..., FakeProducer]) -> None:
    exe = build_program("workload.c", "-DITERS=2000")
    prod = producer_factory(interval=1, ring_size=1 << 13, flags=0)
    proc = subprocess.Popen([str(exe)], env=prod.env(client_lib), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)  # nobody reads: the ring fills, records drop
    assert proc.returncode == 0 and err == b""
    prod.ring.drain()
    assert prod.ring.meta("dropped_records") > 0
    assert prod.ring.meta("client_state") == codec.ClientState.EXITING  # dropping, never disabled
    mallocs, frees, *_ = decode(prod.ring.records)
    seqs = sorted([m[0] for m in mallocs] + [f[0] for f in frees])
    assert seqs == list(range(1, len(seqs) + 1))  # a dropped record takes no number
    # A dropped malloc's address is not tracked, so its free is never sent.
    ops = sorted([(m[0], 1, m[1]) for m in mallocs] + [(f[0], 0, f[1]) for f in frees])
    live: set[int] = set()
    for _, is_malloc, addr in ops:
        if is_malloc:
            live.add(addr)
        else:
            assert addr in live
            live.discard(addr)


@pytest.mark.timeout(120)
def test_rejected_handshake_stays_dormant(client_lib: Path, build_program: Callable[..., Path],
                                          producer_factory: Callable[..., FakeProducer]) -> None:
    exe = build_program("workload.c", "-DITERS=50")
    prod = producer_factory()
    env = prod.env(client_lib)
    env[codec.ENV_TOKEN] = "ff" * 16  # wrong token: the fake producer rejects it
    res = subprocess.run([str(exe)], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0 and res.stderr == b""
    assert prod.ring.meta("write_pos") == 0


@pytest.mark.timeout(120)
def test_dlopen_after_start_sends_the_new_module(client_lib: Path, build_program: Callable[..., Path],
                                                 producer_factory: Callable[..., FakeProducer]) -> None:
    plugin = build_program("plugin.c", "-shared", "-fPIC")
    exe = build_program("dlopen_prog.c", "-ldl")
    prod = producer_factory(interval=1, ring_size=1 << 16)
    res = prod.run([str(exe), str(plugin)], client_lib)
    assert res.returncode == 0 and res.stdout == b"plugin done\n", res.stderr
    mallocs, frees, stacks, modules, _ = decode(prod.ring.records)
    plug = [m for m in modules if m.path == str(plugin)]
    assert len(plug) == 1 and plug[0].build_id
    assert prod.ring.meta("module_rescans") >= 1
    by_id = {s.stack_id: s for s in stacks}
    ours = [m for m in mallocs if 31000 <= m[3] < 31100]
    assert len(ours) == 100
    assert all(plug[0].start <= by_id[m[4]].pcs[0] < plug[0].end for m in ours)
    # The module record comes before the first stack that needs it.
    kinds = [(t, codec.decode_record(r)) for t, r in prod.ring.records
             if t in (codec.RecordType.MODULE, codec.RecordType.STACK)]
    first_mod = next(i for i, (t, r) in enumerate(kinds)
                     if isinstance(r, codec.ModuleRecord) and r.path == str(plugin))
    first_stack = next(i for i, (t, r) in enumerate(kinds)
                       if isinstance(r, codec.StackRecord) and r.pcs
                       and plug[0].start <= r.pcs[0] < plug[0].end)
    assert first_mod < first_stack


def test_a_module_found_within_a_millisecond_of_another_is_sent_while_the_program_runs(
        client_lib: Path, build_program: Callable[..., Path], producer_factory: Callable[..., FakeProducer]) -> None:
    # GIVEN a program that loads a library and allocates from it, then at once a second one from
    # which it allocates 1000 times in one stack (the second rescan waits out its millisecond),
    # and 20 ms later allocates once from main, in a stack all of whose modules are known
    first = build_program("plugin.c", "-shared", "-fPIC")
    second = build_program("plugin.c", "-shared", "-fPIC", "-DSECOND")
    exe = build_program("dlopen_pair.c", "-ldl")
    prod = producer_factory(interval=1, ring_size=1 << 20)
    res = prod.run([str(exe), str(first), str(second)], client_lib)
    assert res.returncode == 0 and res.stdout == b"pair done\n", res.stderr
    # THEN the second library's module record comes before that last allocation: a later
    # sample did the waiting rescan (it came only at the exit's flush, after everything: a
    # live reader such as the pytest plugin named its frames [unknown]+0x...)
    records = prod.ring.records
    module = next(i for i, (t, r) in enumerate(records)
                  if t == codec.RecordType.MODULE and getattr(codec.decode_record(r), "path", None) == str(second))
    marker = next(i for i, (t, r) in enumerate(records)
                  if t == codec.RecordType.MALLOC and codec.MALLOC.unpack_from(r[8:])[3] == 31337)
    assert module < marker, (module, marker, len(records))


@pytest.mark.timeout(60)
def test_debug_lines_only_when_asked(client_lib: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEAPSCOPE_")}
    env.update({"LD_PRELOAD": str(client_lib), codec.ENV_SOCKET: "/nonexistent/s",
                codec.ENV_TOKEN: "00" * 16})
    quiet = subprocess.run(["true"], env=env, capture_output=True, timeout=30)
    assert quiet.stderr == b""
    env["HEAPSCOPE_DEBUG"] = "1"
    loud = subprocess.run(["true"], env=env, capture_output=True, timeout=30)
    lines = loud.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heapscope: cannot connect")


@pytest.mark.timeout(120)
def test_operator_new_is_the_leaf(client_lib: Path, build_dir: Path, producer_factory: Callable[...,
                                  FakeProducer]) -> None:
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = build_dir / "new_delete"
    subprocess.run([cxx, "-O2", "-fno-omit-frame-pointer", "-o", str(exe),
                    str(Path(__file__).with_name("new_delete.cc"))], check=True, timeout=120)
    prod = producer_factory(interval=1, ring_size=1 << 16)
    res = prod.run([str(exe)], client_lib)
    assert res.returncode == 0 and res.stdout == b"new done\n", res.stderr
    mallocs, frees, stacks, modules, _ = decode(prod.ring.records)
    by_id = {s.stack_id: s for s in stacks}
    blobs = [m for m in mallocs if m[3] == 32000]
    assert len(blobs) == 50
    freed = {f[1] for f in frees}
    assert all(m[1] in freed for m in blobs)
    prog = next(m for m in modules if m.path == str(exe))
    for m in blobs:
        pcs = by_id[m[4]].pcs
        assert "libstdc++" in _module_of(modules, pcs[0])  # operator new
        assert prog.start <= pcs[1] < prog.end  # make() or main()
