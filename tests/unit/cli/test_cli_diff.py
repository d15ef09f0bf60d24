"""`heapscope diff`'s text: its table's headers sit over their columns."""

from __future__ import annotations

from types import SimpleNamespace

from heapscope.cli.diff import render
from heapscope.view.diff import Change


def test_headers_sit_over_their_columns() -> None:
    # GIVEN growths in functions of very different name lengths, in two libraries
    rows = [Change((("main", "app"), ("f", "libshort.so")), 0, 2048),
            Change((("main", "app"), ("a_much_longer_function_name", "libmuchlonger.so.6")), 0, 1024)]
    side = SimpleNamespace(label="x", self_values={})
    # WHEN the diff is rendered
    lines = render(side, side, rows, "space", 10).splitlines()
    head = next(line for line in lines if "change" in line)
    body = [line for line in lines if "main" in line]
    # THEN each column starts where its header does, on every row
    lib_at = head.index("file or library")
    callers_at = head.index("called from")
    assert [line.index("lib") for line in body] == [lib_at, lib_at]
    assert [line.index("main") for line in body] == [callers_at, callers_at]
    assert [line.index(fn) for line, fn in zip(body, ("f ", "a_much"), strict=True)] == [head.index("function")] * 2
