"""The splice of Python frames into native stacks (bookkeeping/resolver.c, frames named by frames.py).

Each stack is kept by a real Resolver and resolved into a real Trie, as the
producer does; its callsite's path is read back root first.
"""

from __future__ import annotations

from types import ModuleType

from wire_support import encode_stack

from heapscope.bookkeeping.dump import ProcessHeap
from heapscope.bookkeeping.frames import UNKNOWN_CODE, FrameTable, ProcessModules, PyCode, PySplice
from heapscope.bookkeeping.pylines import LNOTAB, LineTable
from heapscope.wire.codec import PY_FRAME_ENTRY, ModuleRecord

EXE = ModuleRecord(0x400000, 0x401000, 0x402000, 0x1000, 0x1000, b"", "/usr/bin/python3")
LIBPY = ModuleRecord(0x7000000, 0x7001000, 0x7100000, 0x1000, 0x1000, b"", "/lib/libpython3.12.so")
EXT = ModuleRecord(0x7200000, 0x7201000, 0x7202000, 0x1000, 0x1000, b"", "/lib/_json.so")
EVAL_LO, EVAL_HI = 0x7050000, 0x7060000


def _setup() -> tuple[FrameTable, ProcessModules, PySplice]:
    table = FrameTable(("/usr/lib/python3/skipped/",))
    mods = ProcessModules()
    for m in (EXE, LIBPY, EXT):
        table.add_module(mods, m)
    splice = PySplice(eval_lo=EVAL_LO, eval_hi=EVAL_HI)
    # lnotab: one line per code object (no entries: every offset is the first line)
    for key, name, file, line in ((1, "main", "app.py", 30), (2, "build", "app.py", 16),
                                  (3, "cb", "app.py", 40), (4, "hidden", "/usr/lib/python3/skipped/x.py", 5)):
        splice.codes[key] = PyCode(name, file, LineTable.decode(LNOTAB, b"", line))
    return table, mods, splice


def _spliced(native: ModuleType, table: FrameTable, mods: ProcessModules, splice: PySplice,
             pcs: tuple[int, ...], py: tuple[tuple[int, int, int], ...]) -> list[int]:
    """The frames of one stack (pcs leaf first, py innermost first) as its resolve gives them, root first."""
    heap = ProcessHeap(native.Resolver(), modules=mods, python=splice)
    for key in splice.codes:
        heap.resolver.define_code(key)
    heap.resolver.keep(encode_stack(7, pcs, py=py))
    before = heap.frames_of(7, table)  # what a reader of the stack by id sees, before its resolve
    trie = native.Trie()
    heap.resolve(table, trie, native.Tracker(), final=True)
    parents = [(0, 0), *trie.paths_from(1)]
    node, path = heap.callsite(7), []
    while node:
        node, fid = parents[node]
        path.append(fid)
    assert before == path[::-1]
    return path[::-1]


def _names(table: FrameTable, path: list[int]) -> list[str]:
    by_id = {i: f for f, i in table.frames.ids.items()}
    out = []
    for fid in path:
        f = by_id[fid]
        out.append(f.name or f"{f.rel_pc:#x}")
    return out


def test_frames_go_to_their_activation_and_plumbing_is_hidden(native_mod: ModuleType) -> None:
    table, mods, splice = _setup()
    pcs = (
        0x7001100,  # leaf: PyList_Append in libpython, before any activation: kept
        EVAL_LO + 0x10,  # activation 1: runs build and main (3.11+: one activation, two frames)
        0x7002000,  # libpython plumbing above it: hidden
        0x401100,  # the python executable's main: kept
    )
    py = ((2, 10, 0), (1, 4, PY_FRAME_ENTRY))
    path = _spliced(native_mod, table, mods, splice, pcs, py)
    assert _names(table, path) == ["0x10ff", "main", "build", "0x10ff"]
    assert splice.unplaced == 0
    assert sorted((n, f, ln) for n, f, ln in table.python.values()) == [
        ("build", "app.py", 16), ("main", "app.py", 30)]


def test_extension_frames_stay_between_activations(native_mod: ModuleType) -> None:
    table, mods, splice = _setup()
    pcs = (EVAL_LO + 1, 0x7201100, EVAL_LO + 2, 0x7003000)
    py = ((3, 0, PY_FRAME_ENTRY), (1, 0, PY_FRAME_ENTRY))
    path = _spliced(native_mod, table, mods, splice, pcs, py)
    assert _names(table, path) == ["main", "0x10ff", "cb"]  # root first: main, the extension, cb


def test_leftover_frames_go_to_the_root_and_are_counted(native_mod: ModuleType) -> None:
    table, mods, splice = _setup()
    path = _spliced(native_mod, table, mods, splice, (0x401100,), ((2, 0, 0), (1, 0, PY_FRAME_ENTRY)))
    assert _names(table, path) == ["main", "build", "0x10ff"]
    assert splice.unplaced == 2


def test_unknown_code_and_skipped_files(native_mod: ModuleType) -> None:
    table, mods, splice = _setup()
    pcs = (EVAL_LO + 1, EVAL_LO + 2, EVAL_LO + 3)
    py = ((99, 0, PY_FRAME_ENTRY), (4, 0, PY_FRAME_ENTRY), (1, 0, PY_FRAME_ENTRY))
    path = _spliced(native_mod, table, mods, splice, pcs, py)
    assert _names(table, path) == ["main", "FILTERED", UNKNOWN_CODE]


def test_a_python_line_met_in_two_processes_is_one_frame() -> None:
    # GIVEN two processes whose code objects (keys of their own) are the same function, and a
    # third line of another function of the file
    table = FrameTable()
    first, second = PySplice(), PySplice()
    first.codes[11] = PyCode("load", "lib.py", LineTable.decode(LNOTAB, b"", 7))
    second.codes[52] = PyCode("load", "lib.py", LineTable.decode(LNOTAB, b"", 7))
    second.codes[53] = PyCode("save", "lib.py", LineTable.decode(LNOTAB, b"", 9))
    name_first = table.namer(ProcessModules(), {}, first, "")
    name_second = table.namer(ProcessModules(), {}, second, "")
    # WHEN each names its frames, at two instructions of the one line
    got = [name_first(1, 11, 0), name_first(1, 11, 4), name_second(1, 52, 2), name_second(1, 53, 0)]
    # THEN the line is one frame wherever it is met, the other function's its own, one file mapping
    assert got[0] == got[1] == got[2] != got[3]
    assert [(n, f, ln) for _, n, f, ln in table.take_new_python()] == [("load", "lib.py", 7), ("save", "lib.py", 9)]
    assert [m.name for m in table.mappings.ids] == ["lib.py"]
