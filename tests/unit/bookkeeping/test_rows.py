"""tracker.h and bookkeeping/rows.py describe the same rows: sizes, offsets, signedness."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess

import pytest
from native_ext import BOOKKEEPING_CORE, EXTENSIONS, FLAGS_FILE, SRC, build_flags

from heapscope.bookkeeping.rows import (
    DUMP_ROW,
    LT_FREED,
    LT_HEAPTRACK,
    LT_HELD,
    LT_SIZE,
    LT_UNKNOWN,
    OP_FREE,
    OP_MALLOC,
    PEAK_ROW,
    ROWS,
    unpack_rows,
)
from heapscope.model import LIFETIME_BOUNDS


def py_layout(s: struct.Struct) -> list[tuple[int, int, bool]]:
    """(offset, size, signed) of each field of a little-endian Struct without padding."""
    fmt, fields, off = s.format.lstrip("<"), [], 0
    count = ""
    for ch in fmt:
        if ch.isdigit():
            count += ch
            continue
        for _ in range(int(count or 1)):
            size = struct.calcsize("<" + ch)
            fields.append((off, size, ch.islower()))
            off += size
        count = ""
    return fields


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """Sizes, offsets and signedness of the row structs as the compiler sees them."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler: the package cannot have been built either")
    lines = []
    for name, (_s, fields) in ROWS.items():
        lines.append(f'  printf("\\"sizeof {name}\\": %zu,\\n", sizeof(struct {name}));')
        for f in fields:
            lines.append(f'  printf("\\"{name}.{f}\\": %zu,\\n", offsetof(struct {name}, {f}));')
            lines.append(f'  printf("\\"{name}.{f} size\\": %zu,\\n", sizeof(((struct {name} *)0)->{f}));')
            field_type = f"__typeof__(((struct {name} *)0)->{f})"
            lines.append(f'  printf("\\"{name}.{f} signed\\": %d,\\n", (int)(({field_type})-1 < 0));')
    for const in ("HS_OP_MALLOC", "HS_OP_FREE", "HS_LT_FREED", "HS_LT_HELD", "HS_LT_UNKNOWN", "HS_LT_SIZE",
                  "HS_LT_HEAPTRACK", "HS_LT_BOUNDS"):
        lines.append(f'  printf("\\"{const}\\": %u,\\n", (unsigned)({const}));')
    src = ("#include <stdio.h>\n#include <stddef.h>\n#include \"tracker_labels.h\"\nint main(void) {\n"
           '  printf("{");\n' + "\n".join(lines) + '\n  printf("\\"end\\": 0}");\n  return 0;\n}\n')
    d = tmp_path_factory.mktemp("rows")
    (d / "layout.c").write_text(src)
    subprocess.run([cc, *build_flags(), "-Werror", "-Wno-type-limits", "-I", str(SRC / "bookkeeping"),
                    "-o", str(d / "layout"), str(d / "layout.c")], check=True, timeout=60)
    out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True, timeout=10).stdout
    layout: dict[str, int] = json.loads(out)
    return layout


@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_layout_matches_the_compiler(c_layout: dict[str, int], name: str) -> None:
    s, fields = ROWS[name]
    assert s.size == c_layout[f"sizeof {name}"]
    layout = py_layout(s)
    assert len(layout) == len(fields)
    for (off, size, signed), f in zip(layout, fields, strict=True):
        assert (off, size, signed) == (c_layout[f"{name}.{f}"], c_layout[f"{name}.{f} size"],
                                       bool(c_layout[f"{name}.{f} signed"])), f


def test_stream_kinds_match(c_layout: dict[str, int]) -> None:
    assert (OP_MALLOC, OP_FREE) == (c_layout["HS_OP_MALLOC"], c_layout["HS_OP_FREE"])


def test_lifetime_kinds_match(c_layout: dict[str, int]) -> None:
    assert (LT_FREED, LT_HELD, LT_UNKNOWN, LT_SIZE, LT_HEAPTRACK) == tuple(
        c_layout[f"HS_LT_{k}"] for k in ("FREED", "HELD", "UNKNOWN", "SIZE", "HEAPTRACK"))
    assert len(LIFETIME_BOUNDS) == c_layout["HS_LT_BOUNDS"]


def test_the_c_sources_are_where_meson_builds_them() -> None:
    # The tests compile what meson.build compiles (native_ext.py): every C file of both folders
    # is in one list, and meson.build names it.
    meson = {d: (SRC / d / "meson.build").read_text() for d in ("bookkeeping", "producer")}
    listed = {p for sources in EXTENSIONS.values() for p in sources} | set(BOOKKEEPING_CORE)
    for d in ("bookkeeping", "producer"):
        for p in sorted((SRC / d).glob("*.c")):
            assert p in listed, p
            assert f"'{p.name}'" in meson[d], p.name
    assert "bookkeeping_core" in meson["producer"]
    assert "native.flags" in meson["bookkeeping"] and FLAGS_FILE.parent == SRC / "bookkeeping"


@pytest.mark.parametrize("row", [DUMP_ROW, PEAK_ROW], ids=["dump", "peak"])
def test_rows_unpack_flat_as_they_unpack_one_by_one(row: struct.Struct) -> None:
    # GIVEN rows with each field's extremes (u64 fields past 2^63, signed ones negative)
    signed = [c.islower() for c in row.format[1:].replace("7Q", "Q" * 7)]
    values = [[(-(1 << 63) if s else (1 << 64) - 1) if k % 2 else k + i for i, s in enumerate(signed)]
              for k in range(5)]
    data = b"".join(row.pack(*v) for v in values)
    # THEN the flat tuple is every row's values in order, and nothing for no row
    assert unpack_rows(row, data) == tuple(v for r in row.iter_unpack(data) for v in r)
    assert unpack_rows(row, data)[len(signed):2 * len(signed)] == tuple(values[1])
    assert unpack_rows(row, b"") == ()
    with pytest.raises(ValueError, match="not rows"):
        unpack_rows(row, data[:-1])
