"""Reading a Perfetto trace file: gunzipped on the way when it is gzipped, a packet at a time,
within an inflate budget (a decompression bomb is refused), each packet decoded with Perfetto's
own `TracePacket` message. importer/heapprofd.py gives the packets their meaning."""

from __future__ import annotations

import contextlib
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from heapscope.errors import ProfileError
from heapscope.units import format_in

GZIP_MAGIC = b"\x1f\x8b"
# Inflated bytes (a gzip file, compressed packets) may not pass this many times the file's own
# size, nor the floor for small files: a real trace compresses some 5-20 times, a decompression
# bomb a thousand times, and what is inflated is work and (for one packet) memory.
INFLATE_RATIO = 100
INFLATE_FLOOR = 64 << 20
_CHUNK = 1 << 20  # bytes read, or inflated, at a time


def trace_module() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2  # type: ignore[import-untyped]
    except ImportError as e:
        raise ProfileError(
            "reading Perfetto traces needs the `perfetto` and `protobuf` packages"
            f" (pip install perfetto): {e}") from e
    return perfetto_trace_pb2


class InflateBudget:
    """The inflated bytes one trace may give, shared by its gzip layer and its compressed packets."""

    def __init__(self, name: str, file_size: int) -> None:
        self.name, self.file_size = name, file_size
        self.limit = max(INFLATE_FLOOR, INFLATE_RATIO * file_size)
        self.used = 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise ProfileError(
                f"{self.name}: inflates to more than {_mib(self.limit)} ({INFLATE_RATIO} times the file's"
                f" {_mib(self.file_size)}, at least {_mib(INFLATE_FLOOR)}): refused as a decompression bomb")

    def inflate(self, data: bytes, wbits: int) -> bytes:
        """`data` inflated whole (one compressed packet), within the budget."""
        d = zlib.decompressobj(wbits)
        out = bytearray()
        while data:
            room = self.limit - self.used
            chunk = d.decompress(data, min(_CHUNK, max(1, room + 1)))
            self.take(len(chunk))
            out += chunk
            data = d.unconsumed_tail
        rest = d.flush()  # output still held back (at most a window's worth)
        self.take(len(rest))
        out += rest
        if not d.eof:
            raise EOFError("compressed data ends early")
        return bytes(out)


def _mib(n: int) -> str:
    return format_in(n, "MiB", sep=",")


class TraceInput:
    """A trace file read a chunk at a time, gunzipped on the way when it starts as gzip does:
    memory holds one chunk and the packet being read, never the whole file."""

    def __init__(self, f: BinaryIO, name: str, budget: InflateBudget, gzipped: bool) -> None:
        self.f, self.name, self.budget = f, name, budget
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
        self.buf = bytearray()
        self.pos = 0  # bytes of the (inflated) stream consumed so far
        self.eof = False
        self.flushed = False

    def _fill(self) -> bool:
        """Append more bytes to buf; False at the end of the stream."""
        if self.eof:
            return False
        if self.inflater is None:
            chunk = self.f.read(_CHUNK)
            if not chunk:
                self.eof = True
                return False
            self.buf += chunk
            return True
        while True:
            if self.inflater.unconsumed_tail:
                raw = self.inflater.unconsumed_tail
            else:
                raw = self.f.read(_CHUNK)
                if not raw:
                    held = b"" if self.flushed else self.inflater.flush()  # held back: a window at most
                    self.flushed = True
                    if held:
                        self.budget.take(len(held))
                        self.buf += held
                        return True
                    if not self.inflater.eof:
                        raise ProfileError(f"{self.name}: corrupt or truncated gzip file (compressed data ends early)")
                    self.eof = True
                    return False
            if self.inflater.eof:  # data after the gzip member: ignored, as gzip -d would warn and stop
                self.eof = True
                return False
            try:
                out = self.inflater.decompress(raw, _CHUNK)
            except zlib.error as e:
                raise ProfileError(f"{self.name}: corrupt or truncated gzip file ({e})") from e
            self.budget.take(len(out))
            if out:
                self.buf += out
                return True

    def read(self, n: int) -> bytes:
        """Exactly `n` bytes; ProfileError (truncated) when the stream ends first."""
        while len(self.buf) < n:
            if not self._fill():
                raise ProfileError(f"{self.name}: not a Perfetto trace, or a truncated one"
                                   f" (ends inside a packet at byte {self.pos + len(self.buf):,})")
        out = bytes(self.buf[:n])
        del self.buf[:n]
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            if not self.buf and not self._fill():
                raise ProfileError(f"{self.name}: not a Perfetto trace, or a truncated one (ends inside a field)")
            k = min(n, len(self.buf))
            del self.buf[:k]
            self.pos += k
            n -= k

    def at_end(self) -> bool:
        return not self.buf and not self._fill()

    def varint(self) -> int:
        n = shift = 0
        while True:
            if not self.buf and not self._fill():
                raise ProfileError(f"{self.name}: not a Perfetto trace, or a truncated one (ends inside a varint)")
            b = self.buf[0]
            del self.buf[:1]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7
            if shift >= 64:
                raise ProfileError(f"{self.name}: not a Perfetto trace (a varint of more than 10 bytes)")


def packet_bytes(stream: TraceInput) -> Iterator[bytes]:
    """The serialized TracePackets of a `Trace` (field 1, length-delimited), one at a time; other
    fields are skipped as protobuf would skip them."""
    while not stream.at_end():
        key = stream.varint()
        field_number, wire_type = key >> 3, key & 7
        if wire_type == 2:
            length = stream.varint()
            if field_number == 1:
                yield stream.read(length)
            else:
                stream.skip(length)
        elif wire_type == 0:
            stream.varint()
        elif wire_type in (1, 5):
            stream.skip(8 if wire_type == 1 else 4)
        else:
            raise ProfileError(f"{stream.name}: not a Perfetto trace (wire type {wire_type} at byte {stream.pos:,})")


@contextlib.contextmanager
def open_trace(path: str | os.PathLike[str]) -> Iterator[tuple[TraceInput, InflateBudget]]:
    """The trace file as a stream of (gunzipped) bytes and its inflate budget. Raises ProfileError."""
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError as e:
        raise ProfileError(f"{p}: no such file") from e
    except IsADirectoryError as e:
        raise ProfileError(f"{p}: is a directory, not a Perfetto trace") from e
    except OSError as e:
        raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ProfileError(f"{p}: is a directory, not a Perfetto trace")
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{p}: not a regular file, not a Perfetto trace")
        f = os.fdopen(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    with f:
        try:
            head = f.read(2)
            if not head:
                raise ProfileError(f"{p}: empty file, not a Perfetto trace")
            f.seek(0)
            budget = InflateBudget(str(p), st.st_size)
            yield TraceInput(f, str(p), budget, head == GZIP_MAGIC), budget
        except OSError as e:
            raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from e


def decode_packets(stream: TraceInput, name: str) -> Iterator[Any]:
    """Each TracePacket of the stream, decoded as it is read. Raises ProfileError."""
    pt = trace_module()
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    # Every Perfetto trace begins with field 1 (TracePacket), length-delimited: byte 0x0a.
    if stream.at_end() or stream.buf[0] != 0x0A:
        raise ProfileError(f"{name}: not a Perfetto trace")
    for data in packet_bytes(stream):
        try:
            yield pt.TracePacket.FromString(data)
        except DecodeError as e:
            raise ProfileError(f"{name}: not a Perfetto trace, or a truncated one ({e})") from e
        except RecursionError as e:
            raise ProfileError(f"{name}: not a Perfetto trace (nested too deeply)") from e
