"""The client's side of the wire, in Python, for tests and benchmarks only.

Encoders of every record kind (each returns a whole record, header included)
and a ring writer that appends them to a real shared ring as the client does,
so tests can feed the real producer any byte sequence, malformed ones
included. The layouts come from heapscope.wire.codec, which mirrors wire.h.
"""

from __future__ import annotations

import mmap
import struct

from heapscope.wire.codec import (
    FREE,
    HEADER,
    HEAP,
    HEAP_FREE,
    HEAP_MALLOC,
    LABELSET,
    MALLOC,
    META_FIELDS,
    META_SIZE,
    MODULE,
    PYCODE,
    PYFRAME,
    PYINFO,
    PYSTACK,
    STACK,
    STACK_PYTHON,
    STACK_TRUNCATED,
    ModuleRecord,
    PyCodeRecord,
    PyInfoRecord,
    RecordType,
    align8,
    header,
    write_meta,
)


def _record(rtype: int, body: bytes) -> bytes:
    size = align8(HEADER.size + len(body))
    return HEADER.pack(header(size, rtype)) + body + b"\0" * (size - HEADER.size - len(body))


def encode_malloc(seq: int, addr: int, sample_size: int, alloc_size: int,
                  stack_id: int, ts: int, tid: int = 0, label_set: int = 0) -> bytes:
    """tid: the allocating thread's kernel id (0: not known); label_set: its labels' id (0: none)."""
    return _record(RecordType.MALLOC, MALLOC.pack(seq, addr, sample_size, alloc_size, stack_id, ts, tid, label_set))


def encode_labelset(label_set: int, pairs: tuple[tuple[str, str], ...]) -> bytes:
    text = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in pairs)
    return _record(RecordType.LABELSET, LABELSET.pack(label_set, len(pairs), len(text), 0) + text)


def encode_free(seq: int, addr: int, ts: int = 0) -> bytes:
    return _record(RecordType.FREE, FREE.pack(seq, addr, ts))


def encode_stack(stack_id: int, pcs: tuple[int, ...] | list[int], truncated: bool = False,
                 py: tuple[tuple[int, int, int], ...] | None = None, py_flags: int = 0) -> bytes:
    flags = (STACK_TRUNCATED if truncated else 0) | (STACK_PYTHON if py is not None else 0)
    body = STACK.pack(stack_id, len(pcs), flags) + struct.pack(f"<{len(pcs)}Q", *pcs)
    if py is not None:
        body += PYSTACK.pack(len(py), py_flags) + b"".join(PYFRAME.pack(*f) for f in py)
    return _record(RecordType.STACK, body)


def encode_pycode(r: PyCodeRecord) -> bytes:
    name, file = r.name.encode(), r.file.encode("utf-8", "surrogateescape")
    body = PYCODE.pack(r.code_key, r.first_line, r.line_format, r.flags, len(name), len(file), len(r.table), 0)
    return _record(RecordType.PYCODE, body + name + file + r.table)


def encode_pyinfo(r: PyInfoRecord) -> bytes:
    status = r.status.encode()
    body = PYINFO.pack(r.eval_lo, r.eval_hi, r.hexversion, r.state, len(status), int(r.pymem), 0)
    return _record(RecordType.PYINFO, body + status)


def encode_module(m: ModuleRecord) -> bytes:
    path = m.path.encode()
    body = MODULE.pack(m.base, m.start, m.end, m.file_offset, m.vaddr,
                       len(m.build_id), len(path), m.build_id)
    return _record(RecordType.MODULE, body + path)


def encode_heap(heap_id: int, interval: int, name: str) -> bytes:
    return _record(RecordType.HEAP, HEAP.pack(interval, heap_id, 0, name.encode()))


def encode_heap_malloc(heap_id: int, seq: int, addr: int, sample_size: int, alloc_size: int,
                       stack_id: int, ts: int, label_set: int = 0) -> bytes:
    return _record(RecordType.HEAP_MALLOC,
                   HEAP_MALLOC.pack(seq, heap_id, label_set, addr, sample_size, alloc_size, stack_id, ts))


def encode_heap_free(heap_id: int, seq: int, addr: int, ts: int = 0) -> bytes:
    return _record(RecordType.HEAP_FREE, HEAP_FREE.pack(seq, heap_id, 0, addr, ts))


class RingWriter:
    """Writes records into a shared ring the way the client does (single thread).

    For tests: lets them feed the real producer any byte sequence, including
    malformed ones, through the real shared memory.
    """

    def __init__(self, shm: mmap.mmap) -> None:
        self.shm = shm
        self.ring_size = int(struct.unpack_from("<Q", shm, META_FIELDS["ring_size"][0])[0])

    def _pos(self, name: str) -> int:
        return int(struct.unpack_from("<Q", self.shm, META_FIELDS[name][0])[0])

    def space(self) -> int:
        return self.ring_size - (self._pos("write_pos") - self._pos("read_pos"))

    def write(self, record: bytes) -> bool:
        """Append one record (its header word is written last). False when full."""
        size = len(record)
        wp = self._pos("write_pos")
        off = wp & (self.ring_size - 1)
        pad = self.ring_size - off if off + size > self.ring_size else 0
        if pad + size > self.space():
            return False
        if pad:
            self._put(off, pad_record(pad))
            wp += pad
            off = 0
        struct.pack_into("<Q", self.shm, META_FIELDS["write_pos"][0], wp + size)
        base = META_SIZE + off
        self.shm[base + 8:base + size] = record[8:]
        self.shm[base:base + 8] = record[:8]
        return True

    def _put(self, off: int, record: bytes) -> None:
        base = META_SIZE + off
        self.shm[base:base + len(record)] = record

    def set(self, name: str, value: int) -> None:
        write_meta(self.shm, name, value)


def pad_record(size: int) -> bytes:
    return HEADER.pack(header(size, RecordType.PAD)) + b"\0" * (size - HEADER.size)
