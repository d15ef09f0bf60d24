"""Per-process dump glue (bookkeeping/dump.py): stacks -> callsites -> tracker rows.

Driven with a real Tracker, Trie and Resolver (bookkeeping/_native) and real
frame tables: the stacks, kept by the Resolver as the ring reader keeps them,
are those of a small process with an interpreter, an extension and Python
code objects (as test_splice.py).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from wire_support import encode_stack

from heapscope.bookkeeping.dump import ProcessHeap
from heapscope.bookkeeping.frames import UNKNOWN_CODE, FrameTable, ProcessModules
from heapscope.bookkeeping.pylines import LOCATIONS
from heapscope.bookkeeping.rows import WINDOW_ROW
from heapscope.wire.codec import PY_FRAME_ENTRY, ModuleRecord

pytestmark = pytest.mark.timeout(60)

EXE = ModuleRecord(0x400000, 0x401000, 0x402000, 0x1000, 0x1000, b"", "/usr/bin/python3")
LIBPY = ModuleRecord(0x7000000, 0x7001000, 0x7100000, 0x1000, 0x1000, b"", "/lib/libpython3.12.so")
EVAL_LO, EVAL_HI = 0x7050000, 0x7060000
NATIVE, PYTHON = 0x51, 0x52  # stack ids
A, B, C = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000


def _define_stack(heap: ProcessHeap, stack_id: int, pcs: tuple[int, ...],
                  py: tuple[tuple[int, int, int], ...] | None = None) -> None:
    """A STACK record of the process, kept as the ring reader keeps it."""
    heap.resolver.keep(encode_stack(stack_id, pcs, py=py))


def _process(native: ModuleType, discard: bool) -> tuple[ProcessHeap, FrameTable, Any]:
    frames = FrameTable()
    frames.discard = discard
    heap = ProcessHeap(native.Resolver())
    for m in (EXE, LIBPY):
        frames.add_module(heap.modules, m)
    heap.python.eval_lo, heap.python.eval_hi = EVAL_LO, EVAL_HI
    # 3.11 location table of `build` at line 16: one entry, kind 13 (line delta only, +0), 2 code units
    heap.define_code(1, "build", "app.py", LOCATIONS, bytes([(13 << 3) | 1, 0]), 16)
    _define_stack(heap, NATIVE, (0x401100, 0x401200))
    _define_stack(heap, PYTHON, (0x7001100, EVAL_LO + 0x10, 0x401100), ((1, 2, PY_FRAME_ENTRY),))
    return heap, frames, native.Trie()


def _names(frames: FrameTable, trie: Any, callsite: int | None) -> list[str]:
    """Frame names of a callsite, root first (the rel pc of a native frame)."""
    by_id = {i: f for f, i in frames.frames.ids.items()}
    parents = [(0, 0), *trie.paths_from(1)]
    out: list[str] = []
    assert callsite is not None
    node = callsite
    while node:
        node, fid = parents[node]
        f = by_id[fid]
        out.append(f.name or f"{f.rel_pc:#x}")
    return out[::-1]


def test_stacks_resolve_to_spliced_callsites(native_mod: ModuleType, make_heap: Any) -> None:
    heap, frames, trie = _process(native_mod, discard=False)
    h = make_heap()
    h.malloc(1, A, 100, NATIVE)
    h.malloc(2, B, 30, PYTHON)
    rows = heap.dump_rows(h.t, frames, trie, final=True)
    by_name = {tuple(_names(frames, trie, cs)): size for cs, _count, size, _real in rows}
    assert by_name == {("0x11ff", "0x10ff"): 100, ("0x10ff", "build", "0x10ff"): 30}
    assert list(frames.python.values()) == [("build", "app.py", 16)]


def test_a_profile_not_kept_resolves_no_stack(native_mod: ModuleType, make_heap: Any) -> None:
    # GIVEN the pytest plugin's case: only the windows are read, the profile is thrown away
    heap, frames, trie = _process(native_mod, discard=True)
    h = make_heap()
    h.t.new_window()
    h.malloc(1, A, 100, NATIVE)
    h.malloc(2, B, 30, PYTHON)
    h.malloc(3, C, 7, 0x99)  # a stack whose definition never came
    # WHEN the recording resolves and dumps during the run
    heap.resolve(frames, trie, h.t)
    assert heap.dump_rows(h.t, frames, trie, final=False) == []
    # THEN no stack was spliced: the window names each by its stack id, and no frame was interned
    assert sorted(row[1] for row in WINDOW_ROW.iter_unpack(h.t.window())) == [NATIVE, PYTHON, 0x99]
    assert len(trie) == 0 and not frames.python
    # (no final dump follows: a producer that keeps no profile makes none, test_pytest_plugin.py)


def test_a_bad_line_table_is_found_when_a_frame_needs_it(native_mod: ModuleType, make_heap: Any) -> None:
    # GIVEN a code object whose line table is of a format no CPython has
    heap, frames, trie = _process(native_mod, discard=False)
    heap.define_code(1, "build", "app.py", 77, b"\x01\x02", 16)
    h = make_heap()
    h.malloc(1, B, 30, PYTHON)
    # WHEN its stack is resolved THEN the frame is named without a line
    rows = heap.dump_rows(h.t, frames, trie, final=True)
    assert [_names(frames, trie, cs) for cs, *_ in rows] == [["0x10ff", "build", "0x10ff"]]
    assert list(frames.python.values()) == [("build", "app.py", None)]


def test_a_python_stack_waits_for_its_code_objects(native_mod: ModuleType, make_heap: Any) -> None:
    # GIVEN a stack naming code 2, whose record has not arrived (another thread sends it later),
    # and one naming code 0 (a frame whose code the client could not read: never sent)
    heap, frames, trie = _process(native_mod, discard=False)
    late, unreadable = 0x61, 0x62
    _define_stack(heap, late, (EVAL_LO + 0x10, 0x401100), ((2, 0, 0), (1, 2, PY_FRAME_ENTRY)))
    _define_stack(heap, unreadable, (EVAL_LO + 0x10, 0x401100), ((0, 0, PY_FRAME_ENTRY),))
    h = make_heap()
    h.malloc(1, A, 10, late)
    h.malloc(2, B, 20, unreadable)
    # WHEN resolved before code 2 arrives THEN only the stack naming code 0 gets its callsite
    heap.resolve(frames, trie, h.t)
    assert heap.resolver.waiting() == [late]
    assert all(heap.callsite(s) for s in (NATIVE, PYTHON, unreadable))
    assert _names(frames, trie, heap.callsite(unreadable)) == ["0x10ff", UNKNOWN_CODE]
    # AND once code 2 is defined, the waiting stack is spliced with its name and line
    heap.define_code(2, "leaf", "app.py", LOCATIONS, bytes([(13 << 3) | 1, 2]), 20)  # line 20 + 1
    heap.resolve(frames, trie, h.t)
    assert _names(frames, trie, heap.callsite(late)) == ["0x10ff", "build", "leaf"]
    assert ("leaf", "app.py", 21) in frames.python.values()


def test_a_code_object_that_never_arrives_is_named_so_at_the_end(native_mod: ModuleType, make_heap: Any) -> None:
    heap, frames, trie = _process(native_mod, discard=False)
    _define_stack(heap, 0x63, (EVAL_LO + 0x10,), ((9, 0, PY_FRAME_ENTRY),))
    h = make_heap()
    h.malloc(1, A, 10, 0x63)
    assert heap.dump_rows(h.t, frames, trie, final=False) == []  # it waits for code 9
    assert heap.callsite(0x63) is None
    rows = heap.dump_rows(h.t, frames, trie, final=True)
    assert [(_names(frames, trie, cs), size) for cs, _count, size, _real in rows] == [([UNKNOWN_CODE], 10)]


PLUG_A = ModuleRecord(0x7200000, 0x7201000, 0x7202000, 0x1000, 0x1000, b"\xaa" * 20, "/opt/plugins/alpha.so")
PLUG_B = ModuleRecord(0x7200000, 0x7201000, 0x7202000, 0x1000, 0x1000, b"\xbb" * 20, "/opt/plugins/bravo.so")


def _mapping_names(frames: FrameTable, trie: Any, callsite: int) -> list[str]:
    """The mapping name of each frame of a callsite, root first."""
    by_id = {i: f for f, i in frames.frames.ids.items()}
    mappings = {i: m for m, i in frames.mappings.ids.items()}
    parents = [(0, 0), *trie.paths_from(1)]
    out: list[str] = []
    node = callsite
    while node:
        node, fid = parents[node]
        out.append(mappings[by_id[fid].mapping].name)
    return out[::-1]


def test_a_module_loaded_where_another_was_names_the_stacks_after_it(native_mod: ModuleType, make_heap: Any) -> None:
    # GIVEN a plugin whose stack was received and booked, its frame already named once
    heap, frames, trie = _process(native_mod, discard=False)
    frames.add_module(heap.modules, PLUG_A)
    h = make_heap()
    _define_stack(heap, 0x71, (0x7201100, 0x401100))
    h.malloc(1, A, 100, 0x71)
    heap.resolve_known(frames, trie, h.t)
    _define_stack(heap, 0x72, (0x7201100, 0x401200))
    h.malloc(2, B, 10, 0x72)
    # WHEN another plugin is announced at its addresses (unloaded, another loaded there)
    gone = heap.modules.overlapped(PLUG_B)
    assert gone == [PLUG_A]
    heap.replace_modules(gone, frames, trie, h.t)
    frames.add_module(heap.modules, PLUG_B)
    assert heap.modules.overlapped(PLUG_B) == [] and heap.modules.modules.count(PLUG_B) == 1
    # and a stack of the same pcs comes from it
    _define_stack(heap, 0x73, (0x7201100, 0x401100))
    h.malloc(3, C, 1000, 0x73)
    rows = heap.dump_rows(h.t, frames, trie, final=True)
    # THEN the stacks received before it are the first plugin's, those after it the second's
    by_size = {size: _mapping_names(frames, trie, cs)[-1] for cs, _count, size, _real in rows}
    assert by_size == {100: PLUG_A.path, 10: PLUG_A.path, 1000: PLUG_B.path}


def test_modules_overlapping_a_new_one_give_way() -> None:
    # GIVEN modules known at some addresses
    mods = ProcessModules()
    small = ModuleRecord(0x7200000, 0x7201000, 0x7202000, 0x1000, 0x1000, b"", "/a.so")
    after = ModuleRecord(0x7300000, 0x7301000, 0x7302000, 0x1000, 0x1000, b"", "/c.so")
    mods.add(small, 1)
    mods.add(after, 2)
    # WHEN a bigger one is announced over the first (another object loaded where it was)
    big = ModuleRecord(0x71ff000, 0x7200000, 0x7204000, 0x1000, 0x1000, b"", "/b.so")
    assert mods.overlapped(big) == [small]
    mods.add(big, 3)
    # THEN it alone covers those addresses; the others stay
    assert mods.modules == [big, after] and mods.mapping_ids == [3, 2]
    assert mods.find(0x7201800) == 0 and mods.find(0x7301800) == 1
    # and the same object announced again (a fork child's scan) replaces nothing
    assert mods.overlapped(big) == []


def test_a_modules_frames_are_interned_once_for_every_process_that_maps_it_alike() -> None:
    """A build's compilers (non-PIE cc1, each at the same addresses) meet the same frames:
    each (mapping, rel_pc) is interned once for the recording, without a Frame record made and
    hashed per process and pc (most of the resolver's Python time); skipped modules' pcs too.
    A library placed elsewhere is another mapping, its frames others."""
    frames = FrameTable(skip_prefixes=("/opt/skip/",))
    exe = ModuleRecord(0x400000, 0x401000, 0x500000, 0x1000, 0x1000, b"\x11" * 20, "/usr/lib/gcc/cc1")
    skipped = ModuleRecord(0x7200000, 0x7201000, 0x7202000, 0x1000, 0x1000, b"", "/opt/skip/libx.so")
    moved = ModuleRecord(0x5000000, 0x5001000, 0x5100000, 0x1000, 0x1000, b"\x11" * 20, "/usr/lib/gcc/cc1")
    first, second, third = ProcessModules(), ProcessModules(), ProcessModules()
    for mods, mod in ((first, exe), (first, skipped), (second, exe), (second, skipped), (third, moved)):
        frames.add_module(mods, mod)
    # WHEN two processes name a pc 0x2345 into the executable, and one into the skipped library
    a = frames._intern_pc(first, exe.base + 0x2345)
    b = frames._intern_pc(second, exe.base + 0x2345)
    c = frames._intern_pc(first, skipped.start + 0x10)
    d = frames._intern_pc(second, skipped.start + 0x20)
    # THEN each is one frame, at its rel_pc (pc - 1, inside the call), the skipped ones FILTERED
    assert a == b and c == d != a and c in frames.filtered
    new = dict(frames.frames.take_new())
    assert new[a].rel_pc == 0x2344 and new[c].name == "FILTERED" and len(new) == 2
    # AND a pc met again is the same frame, nothing new interned; elsewhere, another frame
    assert frames._intern_pc(second, exe.base + 0x2345) == a and frames.frames.take_new() == []
    e = frames._intern_pc(third, moved.base + 0x2345)
    assert e != a and dict(frames.frames.take_new())[e].rel_pc == 0x2344


def test_memory_sample_rows_take_their_callsite_from_the_resolver(native_mod: ModuleType, make_heap: Any) -> None:
    """memory_values' samples, made in C (Resolver.sample_values): a row the tracker gave a
    callsite keeps it, one of callsite 0 takes its stack's from the resolver, one whose stack has
    none is left out, a live one's free is None; as the plain loop over the rows made them."""
    from heapscope.bookkeeping.rows import NOT_FREED, SAMPLE_ROW

    heap, frames, trie = _process(native_mod, discard=False)
    h = make_heap()
    h.malloc(1, A, 100, NATIVE)
    h.malloc(2, B, 30, PYTHON)
    heap.dump_rows(h.t, frames, trie, final=True)
    native, python = heap.callsite(NATIVE), heap.callsite(PYTHON)
    assert native and python and native != python
    rows = [(7, 0x99, 10, 20, 64, 1), (0, NATIVE, 11, NOT_FREED, 128, 2), (0, PYTHON, 12, 30, 2**64 - 1, 4),
            (0, 0x77, 13, 40, 8, 1), (2**64 - 1, 0, 14, NOT_FREED, 8, 1)]
    data = b"".join(SAMPLE_ROW.pack(*r) for r in rows)
    plain: list[int | None] = []
    for callsite, stack, alloc_ts, free_ts, size, weight in SAMPLE_ROW.iter_unpack(data):
        cs = callsite or heap.callsite(stack)
        if cs:
            plain += (cs, alloc_ts, None if free_ts == NOT_FREED else free_ts, size, weight)
    got = heap.resolver.sample_values(data, NOT_FREED)
    assert got == plain
    assert got[5:10] == [native, 11, None, 128, 2] and len(got) == 4 * 5
    with pytest.raises(ValueError):
        heap.resolver.sample_values(data[:-1], NOT_FREED)
    # AND memory_values gives the tracker's own samples so
    _series, samples = heap.memory_values(h.t)
    assert sorted(samples[k] or 0 for k in range(0, len(samples), 5)) == sorted([native, python])
