"""The resolve in C (bookkeeping/resolver.h) against its Python reference (tests/reference_resolve.py).

Real data: a real program runs under the real client and the real producer
(in this test's process), and stops before its end. Every stack it sent, as
the process's Resolver keeps it, is then resolved both ways: by the producer
(in C) and by the Python reference given the same records (define_stack,
the same modules and code objects) with tables of its own.
Each stack must come out as the same frames, root first; so must the frame
and callsite tables, id for id, and the frames the splice put at the root.
The same holds when part of the stacks resolved while the program ran
(Producer.resolve_early), one module coming late, but for the ids, which
then follow another order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from reference_resolve import CallsiteTrie, ReferenceHeap

from heapscope.bookkeeping._native import Tracker, Trie
from heapscope.bookkeeping.frames import FrameTable, ProcessModules
from heapscope.model import Mapping
from heapscope.producer.config import RecordConfig
from heapscope.producer.process import ProcessState
from heapscope.producer.producer import Producer
from heapscope.session import client_library
from heapscope.store.writer import ProfileWriter
from heapscope.wire import codec

pytestmark = pytest.mark.timeout(120)

WAIT_FOR_THE_TEST = 1 << 62  # Producer.resolve_every_ns: no resolve while the program runs, the test's own

# Python frames of several depths, through a C extension (json), a generator, a class and a
# recursion: the splice puts each where its eval activation is. It stops (reads stdin) before
# its end, so that its stacks can be read while they wait in the producer.
PROGRAM = r"""
import json, sys

class Node:
    def __init__(self, depth):
        self.kids = [Node(depth - 1) for _ in range(2)] if depth else []
        self.blob = "x" * (depth * 40)

def tree(depth):
    return Node(depth)

def rows(n):
    for i in range(n):
        yield {"id": i, "name": f"row {i}", "tags": [str(t) for t in range(i % 7)]}

def deep(n):
    return deep(n - 1) if n else json.dumps(list(rows(400)))

keep = [tree(9) for _ in range(6)] + [deep(k % 30) for k in range(60)]
print("ready", flush=True)
sys.stdin.readline()
"""

NATIVE = "import json, sys; keep = [json.dumps(list(range(k * 50))) for k in range(300)]; " \
    "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()"


@pytest.fixture
def producer(tmp_path: Path) -> Iterator[Producer]:
    writer = ProfileWriter(tmp_path / "p.db")
    p = Producer(writer, RecordConfig(interval=512, seed=7))
    p.resolve_every_ns = WAIT_FOR_THE_TEST
    yield p
    p.finish()
    writer.close()


def _stopped_target(producer: Producer, code: str, tmp_path: Path,
                    more_env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], ProcessState]:
    """`code` run by this interpreter under the client, once it said it is ready: every
    record it sent is drained (stacks kept, not resolved)."""
    env = dict(os.environ)
    env.update(more_env or {})
    env.update(producer.client_env())
    env["LD_PRELOAD"] = str(client_library())
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    said = b""
    deadline = time.monotonic() + 90
    while b"ready" not in said:
        assert time.monotonic() < deadline and proc.poll() is None, "the target did not get ready"
        producer.poll(0.05, watch=(proc.stdout.fileno(),))
        said += proc.stdout.read() or b""
    p = next(q for q in producer.processes.values() if q.info.pid == proc.pid)
    while producer._drain(p, limit=0):
        pass
    return proc, p


def _release(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def _python_path_of(producer: Producer, p: ProcessState) -> tuple[ReferenceHeap, FrameTable, CallsiteTrie, list[int]]:
    """The Python reference given what the producer received for `p`: each waiting stack's
    record (decoded from what the Resolver keeps), its modules and code objects."""
    frames = FrameTable(producer.frames.skip_prefixes)
    heap = ReferenceHeap()
    for m in p.heap.modules.modules:
        frames.add_module(heap.modules, m)
    heap.python.eval_lo, heap.python.eval_hi = p.heap.python.eval_lo, p.heap.python.eval_hi
    for key, code in p.heap.python.codes.items():
        heap.python.codes[key] = code
    ids = p.heap.resolver.waiting()  # in the order of the C path: define_stack gives the Python path's
    assert set(p.ingest.tracker.unresolved()) <= set(ids)
    for stack_id in ids:
        raw = p.heap.resolver.held_stack(stack_id)
        assert raw is not None, f"stack {stack_id} booked a sample and is not kept"
        rec = codec.decode_record(raw)
        assert isinstance(rec, codec.StackRecord)
        heap.define_stack(rec.stack_id, rec.pcs, rec.py if rec.python else None)
    return heap, frames, CallsiteTrie(), ids


def _frame_table(frames: FrameTable) -> list[tuple[Mapping, int, str]]:
    """The frames by id - 1, each as (its mapping, rel_pc, name): mapping ids differ between
    the tables (the producer's interned every module record as it came, re-sent ones too)."""
    maps = {i: m for m, i in frames.mappings.ids.items()}
    return [(maps[f.mapping], f.rel_pc, f.name) for f in frames.frames.ids]


def _frames_of(table: list[tuple[Mapping, int, str]], paths: list[tuple[int, int]],
               callsite: int) -> tuple[tuple[Mapping, int, str], ...]:
    """A callsite's frames, root first."""
    out = []
    node = callsite
    while node:
        node, fid = paths[node - 1]
        out.append(table[fid - 1])
    return tuple(reversed(out))


def _resolve_early_with_a_late_module(producer: Producer, p: ProcessState) -> None:
    """Resolve while the program runs, as if libc's module record had not come yet: the stacks
    with a libc frame wait (parked), and resolve once it came."""
    full = p.heap.modules
    libc = next(k for k, m in enumerate(full.modules) if "/libc.so" in m.path)
    partial = ProcessModules()
    for k, (m, mapping_id) in enumerate(zip(full.modules, full.mapping_ids, strict=True)):
        if k != libc:
            partial.add(m, mapping_id)
    p.heap.modules = partial
    try:
        producer.resolve_early()
        parked = p.heap.resolver.waiting()
        assert parked, "no stack waited for libc"
        assert all(p.heap.resolver.callsite(s) == 0 for s in parked)
        producer.resolve_early()  # no module came: they wait on
        assert p.heap.resolver.waiting() == parked
        partial.add(full.modules[libc], full.mapping_ids[libc])
        producer.resolve_early()  # it came: they resolve
        assert len(p.heap.resolver.waiting()) < len(parked)
    finally:
        p.heap.modules = full


def _compare(producer: Producer, p: ProcessState, early: bool = False) -> None:
    heap, frames, trie, ids = _python_path_of(producer, p)
    assert len(ids) > 20, "too few stacks to compare"
    # WHEN both resolve the same stacks (as the final dump does)
    ours = Tracker()
    heap.resolve(frames, trie, ours, final=True)
    if early:  # as while the program runs, then at its end
        _resolve_early_with_a_late_module(producer, p)
    p.heap.resolve(producer.frames, producer.trie, p.ingest.tracker, final=True)
    # THEN every stack has the same frames, root first
    assert p.heap.resolver.waiting() == [] and not p.ingest.tracker.unresolved()
    c_paths, py_paths = producer.trie.paths_from(1), trie.paths_from(1)
    c_frames, py_frames = _frame_table(producer.frames), _frame_table(frames)
    for stack_id in ids:
        c_cs, py_cs = p.heap.callsite(stack_id), heap.callsite(stack_id)
        assert c_cs is not None and py_cs is not None
        assert _frames_of(c_frames, c_paths, c_cs) == _frames_of(py_frames, py_paths, py_cs), stack_id
    assert p.heap.python.unplaced == heap.python.unplaced
    # AND a resolved stack's record is let go (only its callsite is kept)
    assert all(p.heap.resolver.held_stack(s) is None for s in ids)
    # AND the same tables, id for id, when all resolve at once: the C path interns in the
    # Python path's order; resolved in two steps, the same frames and callsites
    if early:
        assert sorted(c_frames, key=repr) == sorted(py_frames, key=repr)
        assert len(c_paths) == len(py_paths)
    else:
        assert c_paths == py_paths
        assert c_frames == py_frames


def test_python_stacks_resolve_in_c_as_in_python(producer: Producer, tmp_path: Path) -> None:
    proc, p = _stopped_target(producer, PROGRAM, tmp_path)
    try:
        assert p.heap.python.codes, "no Python code object arrived: the client did not walk Python frames"
        assert any(p.heap.resolver.held_stack(s) and codec.decode_record(p.heap.resolver.held_stack(s)).python  # type: ignore[union-attr, arg-type]
                   for s in p.ingest.tracker.unresolved())
        _compare(producer, p)
    finally:
        _release(proc)


def test_stacks_resolved_while_the_program_runs_resolve_as_at_its_end(producer: Producer, tmp_path: Path) -> None:
    proc, p = _stopped_target(producer, PROGRAM, tmp_path)
    try:
        _compare(producer, p, early=True)
    finally:
        _release(proc)


def test_native_stacks_resolve_in_c_as_in_python(tmp_path: Path) -> None:
    # Python frames off (an interpreter layout the client does not know: client/session.c), so the
    # client sends native stacks only; and the frames of libc's directory filtered
    writer = ProfileWriter(tmp_path / "n.db")
    producer = Producer(writer, RecordConfig(interval=256, seed=3, skip_symbol_prefixes=("/usr/lib/x86_64",
                                                                                        "/lib/x86_64")))
    producer.resolve_every_ns = WAIT_FOR_THE_TEST
    try:
        proc, p = _stopped_target(producer, NATIVE, tmp_path, {"HEAPSCOPE_TEST_PY_HEXVERSION": "0x01000000"})
        try:
            assert not p.heap.python.codes
            _compare(producer, p)
            assert producer.frames.filtered, "no frame was filtered: the prefix matched no module"
        finally:
            _release(proc)
    finally:
        producer.finish()
        writer.close()


def test_the_c_trie_gives_the_python_tries_ids() -> None:
    c, py = Trie(), CallsiteTrie()
    paths = [[1, 2, 3], [1, 2, 4], [1], [5, 2, 3], [1, 2, 3, 6], [7]]
    assert [c.callsite(f) for f in paths] == [py.callsite(f) for f in paths]  # type: ignore[arg-type]
    assert c.take_new() == py.take_new() and c.take_new() == []
    assert c.paths_from(3) == py.paths_from(3) and len(c) == len(py)
    # take_new_flat: the same rows, flattened, and taken once (either form takes them)
    more = [[1, 2, 8], [9], [9, 9]]
    assert [c.callsite(f) for f in more] == [py.callsite(f) for f in more]  # type: ignore[arg-type]
    flat = c.take_new_flat()
    assert flat == py.take_new_flat() == [10, 2, 2, 8, 11, 0, None, 9, 12, 1, 11, 9]
    assert c.take_new_flat() == [] and c.take_new() == []
    with pytest.raises(ValueError):
        c.callsite([])
