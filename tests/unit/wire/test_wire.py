"""wire.h and codec.py describe the same bytes: sizes, offsets, constants."""

from __future__ import annotations

import json
import mmap
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
import wire_support as ws

from heapscope.wire import codec, heapnames

WIRE_H = Path(__file__).parents[3] / "src" / "heapscope" / "wire" / "wire.h"

STRUCTS = {
    "hs_hello": codec.HELLO,
    "hs_config": codec.CONFIG,
    "hs_malloc": codec.MALLOC,
    "hs_free": codec.FREE,
    "hs_stack": codec.STACK,
    "hs_module": codec.MODULE,
    "hs_heap": codec.HEAP,
    "hs_heap_malloc": codec.HEAP_MALLOC,
    "hs_heap_free": codec.HEAP_FREE,
    "hs_pystack": codec.PYSTACK,
    "hs_pyframe": codec.PYFRAME,
    "hs_pycode": codec.PYCODE,
    "hs_pyinfo": codec.PYINFO,
    "hs_labelset": codec.LABELSET,
}
CONSTANTS = {
    "HS_WIRE_MAGIC": codec.WIRE_MAGIC,
    "HS_WIRE_VERSION": codec.WIRE_VERSION,
    "HS_TOKEN_SIZE": codec.TOKEN_SIZE,
    "HS_META_SIZE": codec.META_SIZE,
    "HS_BUILD_ID_MAX": codec.BUILD_ID_MAX,
    "HS_HEAP_NAME_SIZE": codec.HEAP_NAME_SIZE,
    "HS_MAX_FRAMES": codec.MAX_FRAMES,
    "HS_REC_PAD": codec.RecordType.PAD,
    "HS_REC_MALLOC": codec.RecordType.MALLOC,
    "HS_REC_FREE": codec.RecordType.FREE,
    "HS_REC_STACK": codec.RecordType.STACK,
    "HS_REC_MODULE": codec.RecordType.MODULE,
    "HS_REC_HEAP": codec.RecordType.HEAP,
    "HS_RING_MIN_SIZE": codec.RING_MIN_SIZE,
    "HS_RING_MAX_SIZE": codec.RING_MAX_SIZE,
    "HS_REC_HEAP_MALLOC": codec.RecordType.HEAP_MALLOC,
    "HS_REC_HEAP_FREE": codec.RecordType.HEAP_FREE,
    "HS_FIRST_CUSTOM_HEAP": codec.FIRST_CUSTOM_HEAP,
    "HS_MAX_CUSTOM_HEAPS": codec.MAX_CUSTOM_HEAPS,
    "HS_PY_HEAP_ID": codec.PY_HEAP_ID,
    "HS_MALLOC_HEAP_ID": heapnames.MALLOC_HEAP_ID,
    "HS_CFG_BLOCK_CLIENT": codec.CFG_BLOCK_CLIENT,
    "HS_CFG_MMAP_FILES": codec.CFG_MMAP_FILES,
    "HS_MMAP_HEAP_ID": heapnames.MMAP_HEAP_ID,
    "HS_BRK_HEAP_ID": heapnames.BRK_HEAP_ID,
    "HS_CFG_TSC": codec.CFG_TSC,
    "HS_STACK_TRUNCATED": codec.STACK_TRUNCATED,
    "HS_STACK_PYTHON": codec.STACK_PYTHON,
    "HS_MAX_PYFRAMES": codec.MAX_PYFRAMES,
    "HS_REC_PYCODE": codec.RecordType.PYCODE,
    "HS_REC_PYINFO": codec.RecordType.PYINFO,
    "HS_REC_LABELSET": codec.RecordType.LABELSET,
    "HS_MAX_LABEL_SETS": codec.MAX_LABEL_SETS,
    "HS_LABEL_SET_OVERFLOW": codec.LABEL_SET_OVERFLOW,
    "HS_LABEL_KEY_MAX": codec.LABEL_KEY_MAX,
    "HS_LABEL_VALUE_MAX": codec.LABEL_VALUE_MAX,
    "HS_LABEL_TEXT_MAX": codec.LABEL_TEXT_MAX,
    "HS_UNWINDER_FP": codec.Unwinder.FP,
    "HS_UNWINDER_CFA": codec.Unwinder.CFA,
    "HS_CLIENT_DISABLED": codec.ClientState.DISABLED,
    "HS_CLIENT_EXITING": codec.ClientState.EXITING,
    "HS_ERR_FORKED": codec.ClientError.FORKED,
    "HS_ERR_OUT_OF_MEMORY": codec.ClientError.OUT_OF_MEMORY,
    "HS_ERR_SOCKET_LOST": codec.ClientError.SOCKET_LOST,
    "HS_ERR_WAIT_TIMEOUT": codec.ClientError.WAIT_TIMEOUT,
}
#: The heaps heapscope names itself: one definition in wire.h, mirrored once in heapnames.py.
NAMES = {
    "HS_MALLOC_HEAP_NAME": heapnames.MALLOC_HEAP_NAME,
    "HS_PY_HEAP_NAME": heapnames.PY_HEAP_NAME,
    "HS_MMAP_HEAP_NAME": heapnames.MMAP_HEAP_NAME,
    "HS_BRK_HEAP_NAME": heapnames.BRK_HEAP_NAME,
    "HS_ALL_HEAPS_NAME": heapnames.ALL_HEAPS_NAME,
}


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Sizes, offsets and constants as the C compiler sees them."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler: the package cannot have been built either")
    lines = [f'  printf("\\"sizeof {s}\\": %zu,\\n", sizeof(struct {s}));' for s in STRUCTS]
    lines.append('  printf("\\"sizeof hs_ring_meta\\": %zu,\\n", sizeof(struct hs_ring_meta));')
    lines += [f'  printf("\\"meta {f}\\": %zu,\\n", offsetof(struct hs_ring_meta, {f}));'
              for f in codec.META_FIELDS]
    lines += [f'  printf("\\"const {c}\\": %llu,\\n", (unsigned long long)({c}));' for c in CONSTANTS]
    lines += [f'  printf("\\"name {n}\\": \\"%s\\",\\n", {n});' for n in NAMES]
    lines += [f'  printf("\\"malloc {f}\\": %zu,\\n", offsetof(struct hs_malloc, {f}));' for f in codec.MALLOC_FIELDS]
    src = ("#include <stdio.h>\n#include <stddef.h>\n#include \"wire.h\"\nint main(void) {\n"
           '  printf("{");\n' + "\n".join(lines) + '\n  printf("\\"end\\": 0}");\n  return 0;\n}\n')
    d = tmp_path_factory.mktemp("wire")
    (d / "layout.c").write_text(src)
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(WIRE_H.parent), "-o", str(d / "layout"),
                    str(d / "layout.c")], check=True, timeout=60)
    out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True, timeout=10).stdout
    layout: dict[str, int] = json.loads(out)
    return layout


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_struct_sizes_match(c_layout: dict[str, Any], name: str) -> None:
    assert STRUCTS[name].size == c_layout[f"sizeof {name}"]


def test_meta_offsets_match(c_layout: dict[str, Any]) -> None:
    assert codec.META_STRUCT_SIZE == c_layout["sizeof hs_ring_meta"]
    for field, (offset, _) in codec.META_FIELDS.items():
        assert offset == c_layout[f"meta {field}"], field


def test_meta_ends_with_the_clients_exit_figures(c_layout: dict[str, Any]) -> None:
    """The meta's last fields, written by the client's last destructor, then the count of mapping
    calls it could not book, are mirrored: no field of the C struct lies past the codec's last one."""
    ends = {name: off + struct.calcsize(fmt) for name, (off, fmt) in codec.META_FIELDS.items()}
    assert max(ends.values()) == ends["direct_map_bytes"] == c_layout["sizeof hs_ring_meta"]
    assert ends["exit_ts"] == c_layout["meta direct_map_calls"]
    assert {"direct_map_calls", "direct_map_bytes"} <= set(codec.CLIENT_COUNTERS)
    assert ends["exit_peak_rss"] == c_layout["meta own_rss"] and ends["own_rss"] == c_layout["meta exit_ts"]
    assert {"exit_peak_rss", "own_rss", "exit_ts"} <= set(codec.CLIENT_COUNTERS)
    meta = mmap.mmap(-1, codec.META_SIZE)
    codec.write_meta(meta, "exit_peak_rss", 1 << 40)
    assert codec.read_meta(meta, "exit_peak_rss") == 1 << 40 and codec.read_meta(meta, "own_rss") == 0


def test_malloc_offsets_match(c_layout: dict[str, Any]) -> None:
    """Each field of struct hs_malloc where the codec's format puts it (the thread id after ts)."""
    for i, field in enumerate(codec.MALLOC_FIELDS):
        offset = struct.calcsize("<" + codec.MALLOC.format[1:][:i])
        assert offset == c_layout[f"malloc {field}"], field
    assert len(codec.MALLOC_FIELDS) == len(codec.MALLOC.format) - 1
    assert (codec.HEADER.size + codec.MALLOC.size) % 8 == 0


def test_constants_match(c_layout: dict[str, Any]) -> None:
    for name, value in CONSTANTS.items():
        assert int(value) == c_layout[f"const {name}"], name


def test_heap_names_match(c_layout: dict[str, Any]) -> None:
    for name, value in NAMES.items():
        assert c_layout[f"name {name}"] == value, name
    assert heapnames.RESERVED == set(NAMES.values())
    assert codec.PY_HEAP_NAME == heapnames.PY_HEAP_NAME


def test_records_round_trip() -> None:
    stack = ws.encode_stack(0xABC, [0x401000, 0x402000], truncated=True)
    assert len(stack) % 8 == 0
    assert codec.decode_record(stack) == codec.StackRecord(0xABC, (0x401000, 0x402000), True)
    mod = codec.ModuleRecord(0x1000, 0x2000, 0x3000, 0x1000, 0x1000, bytes(range(20)), "/usr/bin/x")
    assert codec.decode_record(ws.encode_module(mod)) == mod
    assert codec.decode_record(ws.encode_heap(1, 4096, "libc.malloc")) == codec.HeapRecord(1, 4096, "libc.malloc")


def test_python_records_round_trip() -> None:
    py = ((0x1111, 42, codec.PY_FRAME_ENTRY), (0x2222, -1, 0))
    stack = ws.encode_stack(7, [0x401000], py=py, py_flags=codec.PY_WALK_TRUNCATED)
    assert codec.decode_record(stack) == codec.StackRecord(7, (0x401000,), False, py, codec.PY_WALK_TRUNCATED, True)
    code = codec.PyCodeRecord(0x1111, 16, 3, 0, "App.build_users", "/tmp/app\udcff.py", b"\x80\x01\x02")
    assert codec.decode_record(ws.encode_pycode(code)) == code
    info = codec.PyInfoRecord(0x1000, 0x2000, 0x30C00F0, codec.PY_STATE_SUPPORTED,
                              "python frames: CPython 3.12 (layout known)", True)
    assert codec.decode_record(ws.encode_pyinfo(info)) == info


def test_label_set_records_round_trip() -> None:
    pairs = (("route", "/search"), ("tenant", "acme\u00e9"))
    assert codec.decode_record(ws.encode_labelset(3, pairs)) == codec.LabelSetRecord(3, pairs)
    rec = ws.encode_heap_malloc(112, 1, 0x1000, 64, 64, 9, 5, label_set=3)
    assert codec.decode_record(rec) == codec.HeapMallocRecord(112, 1, 0x1000, 64, 64, 9, 5, 3)


@pytest.mark.parametrize("bad", [ws.encode_labelset(0, ()), ws.encode_labelset(codec.MAX_LABEL_SETS + 1, ()),
                                 ws._record(codec.RecordType.LABELSET, codec.LABELSET.pack(1, 2, 4, 0) + b"a\0b\0")])
def test_malformed_label_sets_raise(bad: bytes) -> None:
    with pytest.raises(codec.MalformedRecord):
        codec.decode_record(bad)


@pytest.mark.parametrize("record", [
    b"",
    ws.encode_stack(1, [1], py=((1, 2, 3), (4, 5, 6)))[:-16],  # py_depth says 2, one present
    ws.encode_pycode(codec.PyCodeRecord(1, 1, 3, 0, "f", "x.py", b"1234567890"))[:-16],
    ws.encode_stack(1, [1, 2, 3])[:-8],  # depth says 3, two pcs present
    ws.encode_module(codec.ModuleRecord(0, 0, 0, 0, 0, b"", "x"))[:40],
    ws.encode_malloc(1, 2, 3, 4, 5, 6, 7),  # a hot record is not for Python
])
def test_malformed_records_raise(record: bytes) -> None:
    with pytest.raises(codec.MalformedRecord):
        codec.decode_record(record)
