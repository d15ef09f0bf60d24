"""Exporters on small profiles written with the real ProfileWriter, decoded field by field."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import export_support
import pytest
from export_support import check_chrome_trace, packed_ints

from heapscope.errors import UsageError
from heapscope.export import FORMATS, export
from heapscope.export import _proto as pb
from heapscope.export.chrome_json import _desample
from heapscope.model import CallsiteId, Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.writer import ProfileWriter

START, OFFSET, BIAS = 0x555555554000, 0x1000, 0x0


def decode(buf: bytes) -> list[tuple[int, Any]]:
    """export_support.decode, a field's value as Any: these tests know which fields are bytes."""
    return export_support.decode(buf)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.set_metadata("interval", 4096)
    info = ProcessInfo(upid=Upid(1), pid=77, ppid=1, name="demo", cmdline="/bin/demo -x", exe="/bin/demo",
                       uid=0, start_ts=1000)
    w.add_process(info)
    w.set_process_flags(info, ProcessFlags(sampling_interval_bytes=4096, orig_sampling_interval_bytes=4096))
    w.add_mappings([(1, Mapping("ab" * 20, OFFSET, 0, START, START + 0x2000, BIAS, "/bin/demo"))])
    demo = MappingId(1)
    w.add_frames([(1, Frame(demo, 0x1100, "main")), (2, Frame(demo, 0x1200, "parse")), (3, Frame(demo, 0x1300, ""))])
    w.symbols().write_symbols([(1, 9, "helper", "demo.c", 7, 1), (2, 9, "parse", "demo.c", 8, 0)],
                              [("parse", 9, 2)])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3), (4, 1, 1, 3)])
    w.add_dump(1, 1000, 2000, "periodic", [(3, 4, 16384), (4, 1, 65536), (3, -1, -4096)], "libc.malloc")
    w.add_dump(1, 2000, 3000, "end", [(3, 2, 8192)], "libc.malloc")
    w.close()
    return path


def run_export(db: Path, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    with open_profile(db) as p:
        export(fmt, p, buf, **kw)
    return buf.getvalue()


def test_varints() -> None:
    assert pb.varint(0) == b"\x00" and pb.varint(300) == b"\xac\x02"
    assert pb.varint(-1) == b"\xff" * 9 + b"\x01"
    assert decode(pb.uint(3, 300) + pb.string(6, "x")) == [(3, 300), (6, b"x")]
    assert packed_ints(b"".join(pb.varint(v) for v in (1, 300, 5))) == [1, 300, 5]


def _reference_varint(n: int) -> bytes:
    """The wire format's varint, written from its definition: 7 bits a byte, low first, int64 as uint64."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >= 0x80 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_keys_and_fields_at_every_byte_boundary() -> None:
    # The fields make their keys inline, one byte below 0x80 (fields 1-15): fields 15 and 16 sit
    # on either side, and values on each boundary of one and two bytes, negatives as int64.
    values = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, (1 << 63) - 1, 1 << 63, -1, -0x80, -(1 << 63)]
    for field in (1, 15, 16, 2047, 2048):
        for v in values:
            assert pb.varint(v) == _reference_varint(v), v
            assert pb.uint(field, v) == _reference_varint(field << 3) + _reference_varint(v), (field, v)
            assert pb.opt_uint(field, v) == (b"" if v == 0 else pb.uint(field, v)), (field, v)
        assert pb.key(field, pb.LEN) == _reference_varint(field << 3 | 2), field
        assert pb.blob(field, b"xyz") == _reference_varint(field << 3 | 2) + b"\x03xyz", field
        assert decode(pb.uint(field, 300) + pb.blob(field + 1, b"ab")) == [(field, 300), (field + 1, b"ab")]


def test_pprof_fields(db: Path) -> None:
    msg = decode(gzip.decompress(run_export(db, "pprof", view="alloc_space")))
    strings = [v.decode() for f, v in msg if f == 6]
    assert strings[0] == ""
    types = [[strings[x] for _, x in decode(v)] for f, v in msg if f == 1]
    assert types == [["alloc_objects", "count"], ["alloc_space", "bytes"], ["inuse_objects", "count"],
                     ["inuse_space", "bytes"]]
    assert strings[dict((f, v) for f, v in msg if f in (12, 14))[14]] == "alloc_space"
    assert dict((f, v) for f, v in msg if f == 12)[12] == 4096
    locs = {dict(decode(v))[1]: decode(v) for f, v in msg if f == 4}
    funcs = {dict(decode(v))[1]: dict(decode(v)) for f, v in msg if f == 5}
    (mapping,) = [dict(decode(v)) for f, v in msg if f == 3]
    assert strings[mapping[6]] == "ab" * 20 and strings[mapping[5]] == "/bin/demo"
    samples = [dict((f, packed_ints(v)) for f, v in decode(s)) for f, s in msg if f == 2]
    by_leaf: dict[tuple[int, ...], list[int]] = {}
    for s in samples:
        assert len(s[2]) == 4
        by_leaf[tuple(s[1])] = s[2]
    assert sorted(v[1] for v in by_leaf.values()) == [16384 + 8192, 65536]
    for ids in by_leaf:
        for lid in ids:
            fields = dict(locs[lid])
            rel_pc = fields[3] - (START - OFFSET - BIAS)
            assert rel_pc in (0x1100, 0x1200, 0x1300)
            lines = [dict(decode(v)) for f, v in locs[lid] if f == 4]
            names = [strings[funcs[ln[1]][2]] for ln in lines]
            assert names == {0x1100: ["main"], 0x1200: ["helper", "parse"], 0x1300: []}[rel_pc]


def test_perfetto_packets(db: Path) -> None:
    packets = [decode(v) for f, v in decode(run_export(db, "perfetto", dump="all"))]  # the peak by default
    assert dict(packets[0]).get(6), "first packet is the clock snapshot"
    clocks = [dict(decode(v)) for f, v in decode(dict(packets[0])[6]) if f == 1]
    assert {c[1] for c in clocks} >= {4, 6} and len({c[2] for c in clocks}) == 1
    interned = [dict(p) for p in packets if 12 in dict(p)]
    assert interned[0][13] == 1 and interned[0][41] == 1 and all(p[10] == 1 for p in interned)
    profiles = [dict(decode(dict(p)[37])) for p in packets if 37 in dict(p)]
    assert [p[7] for p in profiles] == [0, 1]
    totals = []
    for p in profiles:
        heap = decode(p[5])
        samples = {dict(decode(v))[1]: dict(decode(v)) for f, v in heap if f == 2}
        totals.append({cs: (s[2], s[3], s[5], s[6]) for cs, s in samples.items()})
    assert totals[0][3] == (16384, 4096, 4, 1) and totals[1][3] == (24576, 4096, 6, 1)
    assert totals[1][4] == (65536, 0, 1, 0)


def test_collapsed_speedscope_chrome(db: Path) -> None:
    lines = run_export(db, "collapsed", view="space").decode().splitlines()
    assert sorted(lines) == ["main;demo+0x1300 65536",
                             "main;parse;helper;demo+0x1300 20480"]
    doc = json.loads(run_export(db, "speedscope", view="objects"))
    assert doc["activeProfileIndex"] == 2 and doc["profiles"][2]["unit"] == "none"
    assert sum(doc["profiles"][0]["weights"]) == 65536 + 20480
    chrome = json.loads(run_export(db, "chrome-json", view="alloc_space", dump="all"))
    assert check_chrome_trace(chrome) == []
    dumps = [e for e in chrome["traceEvents"] if e.get("ph") == "v"]
    assert len(dumps) == 2 and [d["id"] for d in dumps] == ["1", "2"]
    assert int(dumps[1]["args"]["dumps"]["allocators"]["malloc"]["attrs"]["size"]["value"], 16) == 65536 + 24576


def test_desampling_follows_the_seed() -> None:
    out = _desample({(CallsiteId(1), 64): 3, (CallsiteId(1), 8192): 2, (CallsiteId(2), 0): 1}, 4096)
    assert out[CallsiteId(1)] == (3 * 64 + 2, 3 * 4096 + 2 * 8192)
    assert out[CallsiteId(2)] == (1, 0)


def test_dump_and_pid_selection(db: Path) -> None:
    assert run_export(db, "collapsed", view="space", dump=1).decode().count("\n") == 2
    with pytest.raises(UsageError, match="--dump 3"):
        run_export(db, "collapsed", dump=3)
    with pytest.raises(Exception, match="no process with pid 5"):
        run_export(db, "pprof", pid=5)
    assert set(FORMATS) == {"pprof", "perfetto", "chrome-json", "speedscope", "otlp", "collapsed"}


def test_chrome_json_reads_the_mappings_once(db: Path) -> None:
    """Each dump's memory map (vm_regions) came from a read of the mapping table at every dump of
    every process: 1.5 s of a build's 3 s chrome-json export. The profile reads them once, and
    every dump still carries its regions."""
    reads = []

    def count(sql: str) -> None:
        if "FROM stack_profile_mapping m" in sql:
            reads.append(sql)

    buf = io.BytesIO()
    with open_profile(db) as p:
        p.sql_connection().set_trace_callback(count)
        every: dict[str, Any] = {"dump": "all"}
        export("chrome-json", p, buf, view="alloc_space", **every)
        mapped = p.mappings()
        mapped.clear()  # a caller's copy: the profile's own list stays whole
        assert [m.name for m in p.mappings()] == ["/bin/demo"]
    dumps = [e for e in json.loads(buf.getvalue())["traceEvents"] if e.get("ph") == "v"]
    assert len(dumps) == 2 and all(d["args"]["dumps"]["process_mmaps"]["vm_regions"] for d in dumps)
    assert len(reads) == 1, reads


def test_stacks_made_from_their_parents_encodings_read_as_the_paths(tmp_path: Path) -> None:
    """pprof's samples, Perfetto's callstacks and speedscope's samples encode a callsite's frames
    from its parent's encoding, made once (a build's ~200k stacks of ~30 frames, a varint at a time, took 0.65 and
    0.8 s). Decoded, every stack is its callsite's path, leaf first in pprof and root first in
    Perfetto, shared prefixes, a callsite whose parent is missing and one met before its
    parent included; pprof's locations stand for the frames they were made for."""
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    info = ProcessInfo(upid=Upid(1), pid=77, ppid=1, name="demo", cmdline="demo", exe="/bin/demo", uid=0,
                       start_ts=1000)
    w.add_process(info)
    w.add_mappings([(1, Mapping("", 0, 0, START, START + 0x8000, 0, "/bin/demo"))])
    w.add_frames([(f, Frame(MappingId(1), 0x100 * f, f"f{f}")) for f in range(1, 9)])
    # 1 > 2 > 3 > 4, 1 > 2 > 5 (shares 1 > 2), 6 under a parent that does not exist, 7 > 8 (8's
    # row before 7's is fine: a parent's id is below its child's as written, 7 < 8)
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3), (4, 3, 3, 4), (5, 2, 2, 5),
                     (6, 1, 99, 6), (7, 0, None, 7), (8, 1, 7, 8)])
    leaves = {4: [4, 3, 2, 1], 5: [5, 2, 1], 6: [6], 8: [8, 7], 3: [3, 2, 1]}  # frames, leaf first
    w.add_dump(1, 1000, 2000, "end", [(cs, 1, 64 * cs) for cs in (5, 4, 6, 8, 3)], "libc.malloc")
    w.close()
    msg = decode(gzip.decompress(run_export(path, "pprof", view="space", dump="end")))
    frame_of = {}
    for f, v in msg:
        if f == 4:
            fields = dict(decode(v))
            frame_of[fields[1]] = (fields[3] - START) // 0x100
    got = {}
    for f, s in msg:
        if f == 2:
            sample = dict((g, packed_ints(v)) for g, v in decode(s))
            got[sample[2][3] // 64] = [frame_of[lid] for lid in sample[1]]
    assert got == leaves
    packets = [dict(decode(v)) for f, v in decode(run_export(path, "perfetto", dump="end"))]
    stacks = {}
    for p in packets:
        for f, v in decode(p.get(12, b"")):
            if f == 7:  # InternedData.callstacks: id, then each frame id (unpacked)
                callstack = decode(v)
                stacks[dict(callstack)[1]] = [x for g, x in callstack if g == 2]
    assert {cs: stacks[cs] for cs in leaves} == {cs: frames[::-1] for cs, frames in leaves.items()}
    # speedscope's samples too (each its callsite's frame indices, root first, from its parent's)
    doc = json.loads(run_export(path, "speedscope", view="space", dump="end"))
    names = [f["name"] for f in doc["shared"]["frames"]]
    space = doc["profiles"][0]
    got = {w // 64: [int(names[i][1:]) for i in sample] for sample, w in zip(space["samples"], space["weights"],
                                                                            strict=True)}
    assert got == {cs: frames[::-1] for cs, frames in leaves.items()}
