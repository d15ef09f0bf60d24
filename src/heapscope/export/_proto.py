"""A minimal protobuf wire-format encoder for the pprof and Perfetto exporters.

Why not the `protobuf` package: PyPI has no maintained package that ships
pprof's `profile_pb2` or Perfetto's trace protos as importable modules, we do
not generate code at build time, and message objects built through a
hand-made descriptor would have to hold a whole Profile in memory before
`SerializeToString()`, at about a microsecond per field. Both formats are a
sequence of top-level fields (repeated `Profile.sample`, `Trace.packet`), so
an encoder of varints and length-delimited fields lets the exporters write
each record as soon as it is known, in constant memory. Tests decode the
output with the real readers (go tool pprof, pprof-format, trace_processor).
"""

from __future__ import annotations

from collections.abc import Iterable

_VARINT, _LEN = 0, 2
LEN = _LEN  # the wire type of a length-delimited field, for keys made once
_U64 = (1 << 64) - 1


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def varint(n: int) -> bytes:
    """Base-128 varint of the value's low 64 bits: negative ints as their two's complement (int64 fields)."""
    if 0 <= n < 0x80:  # most values and every key: before the mask (a build's perfetto export: 1.8 M calls)
        return _ONE_BYTE[n]
    n &= _U64
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:  # location ids and most sample values: two bytes, without the loop
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


# The fields make their keys with varint directly (its one-byte case first): a call less for each
# of the fields an export writes (a build's ~0.9 M).
def uint(field: int, n: int) -> bytes:
    """A varint field (int32/int64/uint64/bool/enum); zero is written too (explicit presence)."""
    return varint(field << 3) + varint(n)  # wire type _VARINT, 0


def opt_uint(field: int, n: int) -> bytes:
    """A varint field, left out when zero (proto3 default)."""
    return b"" if not n else varint(field << 3) + varint(n)


def blob(field: int, data: bytes) -> bytes:
    """A length-delimited field: bytes, string or an encoded sub-message."""
    return varint((field << 3) | _LEN) + varint(len(data)) + data


def string(field: int, s: str) -> bytes:
    return blob(field, s.encode("utf-8", "surrogateescape"))


def packed(field: int, values: Iterable[int]) -> bytes:
    """A packed repeated varint field (proto3 default for repeated scalars)."""
    body = b"".join(varint(v) for v in values)
    return blob(field, body) if body else b""


def unpacked(field: int, values: Iterable[int]) -> bytes:
    """A repeated varint field written one element per key (proto2 without [packed])."""
    k = key(field, _VARINT)
    return b"".join(k + varint(v) for v in values)
