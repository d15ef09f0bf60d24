"""A small write buffer: exporters append pieces, the sink writes them out in 256 KiB blocks."""

from __future__ import annotations

from typing import BinaryIO

_BLOCK = 256 * 1024


class Sink:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.buf = bytearray()
        self.written = 0

    def write(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) >= _BLOCK:
            self.flush()

    def text(self, s: str) -> None:
        self.write(s.encode("utf-8", "surrogateescape"))

    def flush(self) -> None:
        if self.buf:
            self.out.write(self.buf)
            self.written += len(self.buf)
            self.buf = bytearray()
