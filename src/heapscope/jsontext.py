"""Compact JSON text for the pages and exports that write a profile's data as JSON.

orjson writes it: a build's flamegraph page is ~40 MB of JSON, mostly numbers, which the
standard library's encoder took 0.9-1.6 s to write and orjson 0.17 s. What orjson refuses
(a name holding a lone surrogate: bytes of a file or symbol name that were not UTF-8; an
integer past 64 bits; a key that is not a string) is written by the standard library, as
before. Either way the text is JSON with no spaces; orjson writes non-ASCII as UTF-8 where the
standard library escaped it, which every reader of these files decodes alike.

May import: nothing of heapscope.
"""

from __future__ import annotations

import json

import orjson


def compact(value: object) -> bytes:
    """`value` as compact JSON, UTF-8."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":")).encode()
