"""symbolize.perfmap: reading a program's /tmp/perf-PID.map (what may be trusted of a file in a
directory every user writes to) and naming the frames of its code in no loaded object."""

from __future__ import annotations

import os
import sqlite3
import struct
from pathlib import Path

import pytest

from heapscope.model import Frame, Mapping, MappingId, is_jitdump_path, unknown_code_name, unknown_code_pid
from heapscope.store.writer import ProfileWriter, SymbolWriter
from heapscope.symbolize.cache import SymbolCache
from heapscope.symbolize.live import LiveSymbolizer
from heapscope.symbolize.missing import unsymbolized_modules
from heapscope.symbolize.perfmap import merged, parse_perf_map, perf_map_path, read_jitdump, read_perf_map
from heapscope.symbolize.profile import symbolize_profile

pytestmark = pytest.mark.timeout(60)

PID = 4242
MAP = (b"7f0000001000 40 LazyCompile:~outer /app/main.js:1\n"
       b"0x7f0000001040 0x20 JS:*inner /app/main.js:9\n"  # a 0x prefix, as some runtimes write
       b"7f0000001100 100 py::handler:/app/server.py\n"
       b"7f0000001180 10 stub inside handler\n"  # nested in the one before: the innermost wins
       b"not a line\n"
       b"7f0000002000 zz bad size\n"
       b"7f0000003000 10 written las")  # the line being written when the file was read


def test_parse_names_ranges_innermost_and_skips_what_is_not_a_line() -> None:
    m = parse_perf_map("p", MAP)
    assert m.lookup(0x7F0000001000) == "LazyCompile:~outer /app/main.js:1"
    assert m.lookup(0x7F000000103F) == "LazyCompile:~outer /app/main.js:1"
    assert m.lookup(0x7F0000001040) == "JS:*inner /app/main.js:9"
    assert m.lookup(0x7F0000001060) is None  # past inner's end, between functions
    assert m.lookup(0x7F0000001184) == "stub inside handler"
    assert m.lookup(0x7F00000011F0) == "py::handler:/app/server.py"
    assert m.lookup(0x7F0000000FFF) is None
    assert m.lookup(0x7F0000003004) is None  # the incomplete last line is not taken
    assert (len(m), m.bad_lines) == (4, 2)


def test_a_reused_address_takes_the_later_line() -> None:
    m = parse_perf_map("p", b"1000 10 old\n1000 20 new\n")
    assert m.lookup(0x1018) == "new"


def _write(d: Path, data: bytes = MAP) -> Path:
    p = Path(perf_map_path(PID, str(d)))
    p.write_bytes(data)
    return p


def test_read_own_file(tmp_path: Path) -> None:
    _write(tmp_path)
    m = read_perf_map(PID, os.getuid(), str(tmp_path))
    assert m.status == "read" and len(m) == 4 and not m.truncated


def test_absent_file(tmp_path: Path) -> None:
    assert read_perf_map(PID, os.getuid(), str(tmp_path)).status == "absent"


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    # GIVEN /tmp/perf-PID.map planted as a link to a file of the right owner
    target = tmp_path / "elsewhere"
    target.write_bytes(MAP)
    os.symlink(target, perf_map_path(PID, str(tmp_path)))
    m = read_perf_map(PID, os.getuid(), str(tmp_path))
    # THEN it is not read
    assert m.status.startswith("not opened") and len(m) == 0, m.status


def test_a_file_of_another_owner_is_refused(tmp_path: Path) -> None:
    _write(tmp_path)
    m = read_perf_map(PID, os.getuid() + 1, str(tmp_path))
    assert m.status.startswith("refused: owned by uid") and len(m) == 0


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(perf_map_path(PID, str(tmp_path)))
    m = read_perf_map(PID, os.getuid(), str(tmp_path))
    assert m.status == "refused: not a regular file"


def test_read_stops_at_the_limit(tmp_path: Path) -> None:
    _write(tmp_path)
    m = read_perf_map(PID, os.getuid(), str(tmp_path), limit=60)
    # only the first line fits whole in 60 bytes
    assert m.truncated and len(m) == 1 and m.bytes_read == 60


def test_unknown_code_names_round_trip() -> None:
    assert unknown_code_pid(unknown_code_name(17)) == 17
    assert unknown_code_pid("[unknown]") is None
    assert unknown_code_pid("[unknown pid x]") is None
    assert unknown_code_pid("/usr/bin/node") is None


def _profile(path: Path, frames: list[Frame]) -> sqlite3.Connection:
    w = ProfileWriter(path)
    anon = Mapping("", 0, 0, 0, 0, 0, unknown_code_name(PID))
    other = Mapping("", 0, 0, 0, 0, 0, unknown_code_name(PID + 1))
    w.add_mappings([(1, anon), (2, other)])
    w.add_frames(enumerate(frames, start=1))
    w.close()
    return sqlite3.connect(path)


def test_symbolize_names_a_process_frames_from_its_own_map_only(tmp_path: Path) -> None:
    # GIVEN frames at the same JIT address in two processes, and the perf map of one of them
    db = _profile(tmp_path / "p.db", [Frame(MappingId(1), 0x7F0000001044), Frame(MappingId(2), 0x7F0000001044),
                                      Frame(MappingId(1), 0x7F0000009000)])
    maps = {PID: parse_perf_map(perf_map_path(PID), MAP)}
    report = symbolize_profile(SymbolWriter(db), symbolizer=None, perf_maps=maps)
    names = [n for (n,) in db.execute("SELECT name FROM stack_profile_frame ORDER BY id")]
    # THEN only its own frame is named; the others keep their address
    assert names == ["JS:*inner /app/main.js:9", f"[unknown pid {PID + 1}]+0x7f0000001044",
                     f"[unknown pid {PID}]+0x7f0000009000"]
    by_name = {m.name: m for m in report.mappings}
    assert (by_name[unknown_code_name(PID)].frames, by_name[unknown_code_name(PID)].named) == (2, 1)
    # AND what stays unnamed is listed with its fix: the runtime's flag where no map was read
    missing = {u.module: u for u in unsymbolized_modules(report)}
    assert "node --perf-basic-prof" in missing[unknown_code_name(PID + 1)].fix
    assert "python -X perf" in missing[unknown_code_name(PID + 1)].fix
    assert "not in its perf map" in missing[unknown_code_name(PID)].fix
    assert missing[unknown_code_name(PID)].frames == 1


def test_a_later_symbolize_keeps_the_names_record_gave(tmp_path: Path) -> None:
    # GIVEN a profile whose JIT frame `record` named from the perf map
    db = _profile(tmp_path / "p.db", [Frame(MappingId(1), 0x7F0000001044)])
    maps = {PID: parse_perf_map(perf_map_path(PID), MAP)}
    symbolize_profile(SymbolWriter(db), symbolizer=None, perf_maps=maps)
    db.execute("UPDATE stack_profile_frame SET symbol_set_id = NULL")  # as record leaves them
    db.commit()
    # WHEN it is symbolized again later, with no perf map (`heapscope symbolize`)
    report = symbolize_profile(SymbolWriter(db), symbolizer=None)
    # THEN the frame keeps its name, and counts as named
    assert [n for (n,) in db.execute("SELECT name FROM stack_profile_frame")] == ["JS:*inner /app/main.js:9"]
    assert [m.named for m in report.mappings] == [1]
    assert unsymbolized_modules(report) == []


def _jitdump(records: list[bytes]) -> bytes:
    header = struct.pack("<IIIIIIQQ", 0x4A695444, 1, 40, 62, 0, PID, 0, 0)
    return header + b"".join(records)


def _load(addr: int, size: int, name: bytes, code: bytes = b"\x90" * 16) -> bytes:
    body = struct.pack("<IIQQQQ", PID, PID, addr, addr, size, 0) + name + b"\0" + code
    return struct.pack("<IIQ", 0, 16 + len(body), 0) + body


def _move(old: int, new: int, size: int) -> bytes:
    body = struct.pack("<IIQQQQQ", PID, PID, new, old, new, size, 0)
    return struct.pack("<IIQ", 1, 16 + len(body), 0) + body


def test_jitdump_loads_and_moves_are_named_and_a_cut_record_is_left(tmp_path: Path) -> None:
    # GIVEN a jitdump with two functions, one moved, an unknown record kind, and a record cut short
    cut = _load(0x9000, 0x10, b"cut")[:30]
    unknown = struct.pack("<IIQ", 7, 24, 0) + b"\0" * 8
    path = tmp_path / f"jit-{PID}.dump"
    path.write_bytes(_jitdump([_load(0x1000, 0x40, b"JS:*first a.js:1"), unknown, _load(0x2000, 0x20, b"second"),
                               _move(0x2000, 0x5000, 0x20), cut]))
    m = read_jitdump(str(path), os.getuid())
    assert m.status == "read", m.status
    assert m.lookup(0x1010) == "JS:*first a.js:1"
    assert m.lookup(0x5004) == "second" and m.lookup(0x2004) is None
    assert m.lookup(0x9004) is None


def test_jitdump_of_another_owner_or_not_a_jitdump_is_refused(tmp_path: Path) -> None:
    path = tmp_path / f"jit-{PID}.dump"
    path.write_bytes(_jitdump([_load(0x1000, 0x40, b"f")]))
    assert read_jitdump(str(path), os.getuid() + 1).status.startswith("refused: owned by uid")
    path.write_bytes(b"not a jitdump at all, but long enough for a header")
    assert read_jitdump(str(path), os.getuid()).status == "not read: not a jitdump file"


def test_jitdump_path_names() -> None:
    assert is_jitdump_path("/home/u/.debug/jit/java-jit-x/jit-1234.dump")
    assert not is_jitdump_path("/tmp/jit-12a4.dump") and not is_jitdump_path("/tmp/jit-.dump")
    assert not is_jitdump_path("/tmp/perf-1234.map")


# No process has this pid (pid_max is at most 2^22): /tmp holds no perf map of it.
NO_PROCESS = 1 << 23


@pytest.mark.parametrize("jit_image_ends_first", [True, False])
def test_the_images_of_one_pid_keep_the_names_either_end_read(tmp_path: Path, jit_image_ends_first: bool) -> None:
    # GIVEN a pid that exec'd (`sh -c 'exec node --perf-prof ...'`): only node's image mapped a jitdump
    assert not os.path.exists(perf_map_path(NO_PROCESS))
    dump = tmp_path / f"jit-{NO_PROCESS}.dump"
    dump.write_bytes(_jitdump([_load(0x1000, 0x40, b"JS:*makeBuffers buffers.js:3")]))
    live = LiveSymbolizer(SymbolCache(tmp_path / "cache"))
    ends = [str(dump), None] if jit_image_ends_first else [None, str(dump)]
    # WHEN both images end, in either order (sh's end is seen when the pid exits, as node's is)
    for jitdump in ends:
        live.process_ended(NO_PROCESS, os.getuid(), jitdump)
    # THEN the pid's map has the jitdump's names: the other image's end did not erase them
    m = live.perf_maps[NO_PROCESS]
    assert m.status == "read" and m.path == str(dump), (m.status, m.path)
    assert m.lookup(0x1010) == "JS:*makeBuffers buffers.js:3"


def test_a_file_read_again_is_named_once_in_a_merged_map(tmp_path: Path) -> None:
    _write(tmp_path)
    dump = tmp_path / f"jit-{PID}.dump"
    dump.write_bytes(_jitdump([_load(0x1000, 0x40, b"f")]))
    first = merged(read_perf_map(PID, os.getuid(), str(tmp_path)), read_jitdump(str(dump), os.getuid()))
    again = merged(first, read_perf_map(PID, os.getuid(), str(tmp_path)))
    assert again.path == first.path == f"{perf_map_path(PID, str(tmp_path))} and {dump}"
    assert again.lookup(0x1010) == "f" and again.lookup(0x7F0000001044) == "JS:*inner /app/main.js:9"
