"""jsontext.compact: orjson's text where it can write the value, the standard library's where it
cannot, and the flamegraph page carries either."""

from __future__ import annotations

import base64
import gzip
import json
import re

from heapscope.jsontext import compact
from heapscope.view.flamegraph import render_html


def _stdlib(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def test_a_pages_data_is_the_standard_librarys_text() -> None:
    """ASCII names, integers of every size a profile holds, nesting: the same bytes."""
    value = {"mode": "profile", "strings": ["all", "main", "libc.so.6", 'a "quoted" \\ name\n'],
             "processes": [{"depth": [0, 1, 2, 2], "self": {"space": [1, 4096, 3, -(2**63), 2**64 - 1]},
                            "t0": None, "kept": True}]}
    assert compact(value) == _stdlib(value)


def test_what_orjson_refuses_is_written_as_before() -> None:
    """A name whose bytes were not UTF-8 (a lone surrogate, as os.fsdecode gives it), an integer
    past 64 bits, a key that is not a string: the standard library's text, readable back."""
    for value in ({"name": "lib\udcffx.so"}, [2**64, -(2**63) - 1], {1: "one"}):
        text = compact(value)
        assert text == _stdlib(value), value
        json.loads(text)


def test_non_ascii_names_are_utf8_and_read_back_the_same() -> None:
    value = {"strings": ["größe", "日本語", "emoji \U0001f525"]}
    text = compact(value)
    assert json.loads(text.decode("utf-8")) == value


def test_the_page_carries_a_name_that_was_not_utf8() -> None:
    data: dict[str, object] = {"mode": "profile", "title": "t", "views": [], "strings": ["f\udc80"], "processes": []}
    page = render_html(data)
    packed = re.search(r'<script id="hs-data" type="text/plain">([^<]*)</script>', page)
    assert packed is not None
    assert json.loads(gzip.decompress(base64.b64decode(packed.group(1)))) == data
    page.encode("utf-8")  # what the page's writer does: no surrogate got into the HTML
