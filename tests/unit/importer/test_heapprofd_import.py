"""heapprofd trace import, one rule at a time, on small traces written as protobuf text.

Each trace is parsed with Perfetto's `Trace` message (the `perfetto` package's generated
module), serialized, and imported through the real importer and ProfileWriter. The rules are
those of trace_processor (spec heapprofd.md §8.1); tests/integration/test_import.py checks the
same figures against trace_processor itself on Perfetto's own test traces.
"""

from __future__ import annotations

import gzip
import importlib
import sqlite3
import zlib
from pathlib import Path

import pytest

pt = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
text_format = importlib.import_module("google.protobuf.text_format")  # no type stubs

from heapscope.errors import ProfileError  # noqa: E402
from heapscope.importer.heapprofd import ImportSummary, import_trace  # noqa: E402
from heapscope.store.reader import Profile, open_profile  # noqa: E402
from heapscope.store.writer import ProfileWriter  # noqa: E402

# Sequence 1: a mapping /system/lib64/libc.so (build id 0xabcd), frames main -> alloc_a / alloc_b,
# callstacks 10 = main, alloc_a and 11 = main, alloc_b.
INTERNED = """
packet {
  trusted_packet_sequence_id: 1
  sequence_flags: 1
  interned_data {
    build_ids { iid: 1 str: "\\xab\\xcd" }
    mapping_paths { iid: 1 str: "system" }
    mapping_paths { iid: 2 str: "lib64" }
    mapping_paths { iid: 3 str: "libc.so" }
    function_names { iid: 1 str: "main" }
    function_names { iid: 2 str: "alloc_a" }
    function_names { iid: 3 str: "alloc_b" }
    mappings { iid: 1 build_id: 1 path_string_ids: 1 path_string_ids: 2 path_string_ids: 3
               start: 4096 end: 8192 exact_offset: 4096 load_bias: 0 }
    frames { iid: 1 function_name_id: 1 mapping_id: 1 rel_pc: 256 }
    frames { iid: 2 function_name_id: 2 mapping_id: 1 rel_pc: 512 }
    frames { iid: 3 function_name_id: 3 mapping_id: 1 rel_pc: 768 }
    callstacks { iid: 10 frame_ids: 1 frame_ids: 2 }
    callstacks { iid: 11 frame_ids: 1 frame_ids: 3 }
  }
}
"""



def _sql(p: Profile) -> sqlite3.Connection:
    """The raw tables of an opened profile, read-only: what these tests check row by row."""
    return sqlite3.connect(f"file:{p.path}?mode=ro", uri=True)

def dump(index: int, ts: int, samples: str, *, pid: int = 42, heap: str = "libc.malloc", extra: str = "",
         continued: bool = False, seq: int = 1) -> str:
    return f"""
packet {{
  trusted_packet_sequence_id: {seq}
  profile_packet {{
    index: {index}
    continued: {str(continued).lower()}
    process_dumps {{ pid: {pid} heap_name: "{heap}" timestamp: {ts} {extra} {samples} }}
  }}
}}
"""


def sample(callstack: int, alloc: int = 0, n_alloc: int = 0, freed: int = 0, n_free: int = 0) -> str:
    return (f"samples {{ callstack_id: {callstack} self_allocated: {alloc} alloc_count: {n_alloc}"
            f" self_freed: {freed} free_count: {n_free} }}")


def serialize(text: str) -> bytes:
    trace = pt.Trace()
    text_format.Parse(text, trace)
    return bytes(trace.SerializeToString())


def run_import(tmp_path: Path, text: str | bytes, name: str = "t.pftrace") -> tuple[ImportSummary, Path]:
    trace = tmp_path / name
    trace.write_bytes(serialize(text) if isinstance(text, str) else text)
    db = tmp_path / (name + ".db")
    summary, writer = import_trace(trace, lambda: ProfileWriter(db))
    writer.close()
    return summary, db


def rows(db: Path) -> list[tuple[int, str, str, int, int]]:
    """(ts, heap, leaf function, count, size) of every heap_profile_allocation row."""
    with open_profile(db) as p:
        return [tuple(r) for r in _sql(p).execute(
            "SELECT a.ts, a.heap_name, f.name, a.count, a.size FROM heap_profile_allocation a"
            " JOIN stack_profile_callsite c ON c.id = a.callsite_id JOIN stack_profile_frame f ON f.id = c.frame_id"
            " ORDER BY a.ts, a.heap_name, f.name, a.size").fetchall()]


def stat(db: Path, name: str) -> int:
    with open_profile(db) as p:
        return sum(s.value for s in p.stats() if s.name == name)


def test_cumulative_samples_become_alloc_and_free_rows(tmp_path: Path) -> None:
    text = INTERNED + dump(0, 100, sample(10, 100, 1)) + dump(1, 200, sample(10, 300, 3, 100, 1) + sample(11, 8, 1))
    _, db = run_import(tmp_path, text)
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 1, 100),
                        (200, "libc.malloc", "alloc_a", -1, -100), (200, "libc.malloc", "alloc_a", 2, 200),
                        (200, "libc.malloc", "alloc_b", 1, 8)]
    with open_profile(db) as p:
        (proc,) = p.processes()
        assert proc.info.pid == 42
        assert [(d.ts, d.ts_end, d.reason) for d in p.dumps(proc.info.upid)] == [(100, 100, "periodic"),
                                                                                 (100, 200, "end")]
        values = p.callsite_values(proc.info.upid)
        assert sorted((v.space, v.alloc_space, v.objects, v.alloc_objects) for v in values.values()) == [
            (8, 8, 1, 1), (200, 300, 2, 3)]


def test_mapping_frame_and_callsite_rows(tmp_path: Path) -> None:
    _, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 100, 1) + sample(11, 5, 1)))
    with open_profile(db) as p:
        assert _sql(p).execute('SELECT build_id, name, start, "end", exact_offset FROM stack_profile_mapping'
                            ).fetchall() == [("abcd", "/system/lib64/libc.so", 4096, 8192, 4096)]
        # main is shared: three callsites, depth 0 for the root.
        assert sorted(_sql(p).execute(
            "SELECT c.depth, f.name, f.rel_pc FROM stack_profile_callsite c JOIN stack_profile_frame f"
            " ON f.id = c.frame_id").fetchall()) == [(0, "main", 256), (1, "alloc_a", 512), (1, "alloc_b", 768)]


def test_samples_wait_for_the_end_of_a_continued_dump(tmp_path: Path) -> None:
    """heapprofd interns new callstacks after the samples that use them, before the packet ending the dump."""
    late = """
packet {
  trusted_packet_sequence_id: 1
  interned_data {
    function_names { iid: 9 str: "late" }
    frames { iid: 9 function_name_id: 9 mapping_id: 1 rel_pc: 1024 }
    callstacks { iid: 12 frame_ids: 1 frame_ids: 9 }
  }
}
"""
    end = "packet { trusted_packet_sequence_id: 1 profile_packet { index: 2 } }"
    text = (INTERNED + dump(0, 100, sample(12, 64, 1), continued=True) + dump(1, 100, sample(10, 1, 1), continued=True)
            + late + end)
    summary, db = run_import(tmp_path, text)
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 1, 1), (100, "libc.malloc", "late", 1, 64)]
    assert summary.problems == {}
    with open_profile(db) as p:
        assert len(p.dumps(1)) == 1  # the two packets are one dump


def test_a_dump_without_its_last_packet_is_counted_not_imported(tmp_path: Path) -> None:
    summary, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 1, 1)) + dump(1, 200, sample(10, 5, 2),
                                                                                         continued=True))
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 1, 1)]
    assert summary.problems == {"heapprofd_non_finalized_profile": 1}
    assert stat(db, "heapprofd_non_finalized_profile") == 1


def test_values_going_down_are_dropped_and_counted(tmp_path: Path) -> None:
    summary, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 100, 2)) + dump(1, 200, sample(10, 50, 1)))
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 2, 100)]
    assert stat(db, "heapprofd_malformed_packet") == 1
    with open_profile(db) as p:
        (s,) = [s for s in p.stats() if s.name == "heapprofd_malformed_packet"]
        assert s.idx == 1 and s.severity == "data_loss"


def test_a_new_callstack_id_for_known_frames_continues_its_totals(tmp_path: Path) -> None:
    """heapprofd drops a callstack without live allocations and interns it again under a new id."""
    again = """
packet { trusted_packet_sequence_id: 1 interned_data { callstacks { iid: 20 frame_ids: 1 frame_ids: 2 } } }
"""
    text = INTERNED + dump(0, 100, sample(10, 10, 1, 10, 1)) + again + dump(1, 200, sample(20, 10, 1, 10, 1))
    _, db = run_import(tmp_path, text)
    assert rows(db) == [(100, "libc.malloc", "alloc_a", -1, -10), (100, "libc.malloc", "alloc_a", 1, 10),
                        (200, "libc.malloc", "alloc_a", -1, -10), (200, "libc.malloc", "alloc_a", 1, 10)]


def test_heaps_are_kept_apart(tmp_path: Path) -> None:
    a, b = sample(10, 10, 1), sample(10, 7, 1)
    text = INTERNED + f"""
packet {{
  trusted_packet_sequence_id: 1
  profile_packet {{
    index: 0
    process_dumps {{ pid: 42 heap_name: "libc.malloc" timestamp: 100 {a} }}
    process_dumps {{ pid: 42 heap_name: "custom" timestamp: 100 {b} }}
  }}
}}
"""
    _, db = run_import(tmp_path, text)
    assert rows(db) == [(100, "custom", "alloc_a", 1, 7), (100, "libc.malloc", "alloc_a", 1, 10)]
    with open_profile(db) as p:
        assert sorted(d.heap_name for d in p.dumps(1)) == ["custom", "libc.malloc"]


def test_dump_at_max(tmp_path: Path) -> None:
    peak = "samples { callstack_id: 10 self_max: 4096 self_max_count: 3 }"
    _, db = run_import(tmp_path, INTERNED + dump(0, 100, peak, extra="orig_sampling_interval_bytes: 4096"))
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 3, 4096)]
    with open_profile(db) as p:
        assert [d.reason for d in p.dumps(1)] == ["peak"]
    # Without orig_sampling_interval_bytes (older heapprofd) the count is not trusted.
    _, db = run_import(tmp_path, INTERNED + dump(0, 100, peak), name="old.pftrace")
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 0, 4096)]


def test_the_art_heap_has_no_free_rows(tmp_path: Path) -> None:
    _, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 100, 2, 50, 1), heap="com.android.art"))
    assert rows(db) == [(100, "com.android.art", "alloc_a", 2, 100)]


def test_a_dump_without_heap_name_is_unknown(tmp_path: Path) -> None:
    text = INTERNED + """
packet { trusted_packet_sequence_id: 1 profile_packet { index: 0
  process_dumps { pid: 42 timestamp: 100 samples { callstack_id: 10 self_allocated: 1 alloc_count: 1 } } } }
"""
    _, db = run_import(tmp_path, text)
    assert rows(db) == [(100, "unknown", "alloc_a", 1, 1)]


def test_index_gap_is_counted(tmp_path: Path) -> None:
    summary, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 1, 1)) + dump(2, 200, sample(10, 2, 2)))
    assert summary.problems == {"heapprofd_missing_packet": 1}
    assert len(rows(db)) == 2


def test_cleared_incremental_state_forgets_interned_data(tmp_path: Path) -> None:
    clear = "packet { trusted_packet_sequence_id: 1 sequence_flags: 1 }"
    summary, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 1, 1)) + clear
                             + dump(1, 200, sample(10, 2, 2)))
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 1, 1)]
    assert summary.problems == {"import_unresolved_callstack": 1}


def test_sequences_have_their_own_interned_data(tmp_path: Path) -> None:
    summary, _ = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 1, 1), seq=2))
    assert summary.problems == {"import_unresolved_callstack": 1}


def test_process_flags_stats_and_names(tmp_path: Path) -> None:
    tree = """
packet { process_tree { processes { pid: 42 ppid: 1 uid: 10001 cmdline: "/system/bin/app_process64" cmdline: "-x" } } }
"""
    extra = ("disconnected: true buffer_overran: true client_error: CLIENT_ERROR_HIT_TIMEOUT"
             " sampling_interval_bytes: 8192 orig_sampling_interval_bytes: 4096 from_startup: true"
             " stats { heap_samples: 17 unwinding_errors: 2 map_reparses: 3 total_unwinding_time_us: 40 }")
    _, db = run_import(tmp_path, tree + INTERNED + dump(0, 100, sample(10, 1, 1), extra=extra))
    with open_profile(db) as p:
        (proc,) = p.processes()
        assert (proc.info.pid, proc.info.ppid, proc.info.uid, proc.info.name, proc.info.cmdline) == (
            42, 1, 10001, "app_process64", "/system/bin/app_process64 -x")
        f = proc.flags
        assert f is not None
        assert (f.disconnected, f.buffer_overran, f.client_error, f.from_startup) == (True, True, "hit_timeout", True)
        assert (f.sampling_interval_bytes, f.orig_sampling_interval_bytes) == (8192, 4096)
        assert [d.reason for d in p.dumps(1)] == ["exit"]
        st = {s.name: s.value for s in p.stats(1)}
        assert (st["heap_samples"], st["unwinding_errors"], st["map_reparses"]) == (17, 2, 3)


def test_other_packets_are_ignored(tmp_path: Path) -> None:
    other = """
packet { trusted_packet_sequence_id: 3 track_event { name: "x" } }
packet { trusted_packet_sequence_id: 4 streaming_profile_packet { callstack_iid: 1 timestamp_delta_us: 5 } }
"""
    summary, db = run_import(tmp_path, other + INTERNED + dump(0, 100, sample(10, 1, 1)) + other)
    assert summary.ignored_packets == 4
    assert len(rows(db)) == 1


def test_compressed_packets(tmp_path: Path) -> None:
    inner = serialize(INTERNED + dump(0, 100, sample(10, 1, 1)))
    outer = pt.Trace()
    outer.packet.add().compressed_packets = zlib.compress(inner)
    _, db = run_import(tmp_path, bytes(outer.SerializeToString()))
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 1, 1)]


def test_gzip_file(tmp_path: Path) -> None:
    _, db = run_import(tmp_path, gzip.compress(serialize(INTERNED + dump(0, 100, sample(10, 1, 1)))))
    assert rows(db) == [(100, "libc.malloc", "alloc_a", 1, 1)]


def test_module_symbols_give_file_and_line(tmp_path: Path) -> None:
    symbols = """
packet { module_symbols { path: "/system/lib64/libc.so" build_id: "abcd"
  address_symbols { address: 512 lines { function_name: "inlined_a" source_file_name: "a.h" line_number: 3 }
                                 lines { function_name: "alloc_a" source_file_name: "a.c" line_number: 30 } } } }
"""
    _, db = run_import(tmp_path, INTERNED + dump(0, 100, sample(10, 1, 1)) + symbols)
    with open_profile(db) as p:
        assert _sql(p).execute(
            "SELECT s.name, s.source_file, s.line_number, s.inlined, s.id = s.symbol_set_id FROM stack_profile_symbol s"
            " ORDER BY s.id").fetchall() == [("inlined_a", "a.h", 3, 1, 1), ("alloc_a", "a.c", 30, 0, 0)]
        assert _sql(p).execute("SELECT name FROM stack_profile_frame WHERE symbol_set_id IS NOT NULL").fetchall() == [
            ("alloc_a",)]


@pytest.mark.parametrize("data,why", [
    (b"hello, world", "not a Perfetto trace"),
    (b"", "empty file"),
    (b"\x0a\x50\x01\x02", "truncated"),
    (b"\x1f\x8b\x08\x00", "gzip"),
])
def test_not_a_trace(tmp_path: Path, data: bytes, why: str) -> None:
    with pytest.raises(ProfileError, match=why):
        run_import(tmp_path, data)
    assert not (tmp_path / "t.pftrace.db").exists()


def test_a_trace_without_heap_profiles(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no heapprofd heap profile"):
        run_import(tmp_path, INTERNED + "packet { track_event { name: \"x\" } }")
    assert not (tmp_path / "t.pftrace.db").exists()


def test_a_trace_of_streamed_allocations_only(tmp_path: Path) -> None:
    stream = """
packet { trusted_packet_sequence_id: 5 streaming_allocation { address: 4096 size: 16 sample_size: 16 heap_id: 1 } }
packet { trusted_packet_sequence_id: 5 streaming_free { address: 4096 heap_id: 1 } }
"""
    with pytest.raises(ProfileError, match="only streamed allocations"):
        run_import(tmp_path, stream)


JAVA = """
packet { process_tree { processes { pid: 42 uid: 10001 cmdline: "com.example.app" } } }
packet { packages_list { packages { name: "com.example.app" uid: 10001 } } }
packet {
  trusted_packet_sequence_id: 1
  sequence_flags: 1
  interned_data {
    mapping_paths { iid: 1 str: "data" }
    mapping_paths { iid: 2 str: "app" }
    mapping_paths { iid: 3 str: "com.example.lib-XyZ==" }
    mapping_paths { iid: 4 str: "base.apk" }
    mapping_paths { iid: 5 str: "memfd:jit-cache" }
    function_names { iid: 1 str: "a.b" }
    function_names { iid: 2 str: "a.c" }
    mappings { iid: 1 path_string_ids: 1 path_string_ids: 2 path_string_ids: 3 path_string_ids: 4 }
    mappings { iid: 2 path_string_ids: 5 }
    frames { iid: 1 function_name_id: 1 mapping_id: 1 rel_pc: 16 }
    frames { iid: 2 function_name_id: 2 mapping_id: 2 rel_pc: 32 }
    callstacks { iid: 10 frame_ids: 1 frame_ids: 2 }
  }
}
packet { deobfuscation_mapping { package_name: "com.example.lib"
  obfuscated_classes { obfuscated_name: "a" deobfuscated_name: "com.example.lib.Parser"
                       obfuscated_methods { obfuscated_name: "b" deobfuscated_name: "parse" } } } }
packet { deobfuscation_mapping { package_name: "com.example.app"
  obfuscated_classes { obfuscated_name: "a" deobfuscated_name: "com.example.app.Cache"
                       obfuscated_methods { obfuscated_name: "c" deobfuscated_name: "grow" } } } }
"""


def test_java_frames_are_deobfuscated_with_the_map_of_their_package(tmp_path: Path) -> None:
    """The apk path names the package of frame 1; frame 2 (JIT code) is the process's, by its uid."""
    _, db = run_import(tmp_path, JAVA + dump(0, 100, sample(10, 64, 1), heap="com.android.art"))
    with open_profile(db) as p:
        frames = _sql(p).execute("SELECT rel_pc, name, deobfuscated_name FROM stack_profile_frame").fetchall()
        assert sorted(frames) == [
            (16, "com.example.lib.Parser.parse", "com.example.lib.Parser.parse"),
            (32, "com.example.app.Cache.grow", "com.example.app.Cache.grow")]


def test_a_value_past_63_bits_is_kept_whole(tmp_path: Path) -> None:
    """u64 addresses at the top of the address space survive the store (two's complement in SQLite)."""
    text = """
packet { trusted_packet_sequence_id: 1 sequence_flags: 1 interned_data {
  mappings { iid: 1 start: 18446744073709547520 end: 18446744073709551615 }
  frames { iid: 1 mapping_id: 1 rel_pc: 18446744073709551615 }
  callstacks { iid: 1 frame_ids: 1 } } }
""" + dump(0, 100, sample(1, 16, 1))
    _, db = run_import(tmp_path, text)
    with open_profile(db) as p:
        assert [f.rel_pc for f in p.frames().values()] == [2**64 - 1]


def test_strings_that_are_not_utf8(tmp_path: Path) -> None:
    """protobuf hands proto2 `string` fields with invalid UTF-8 over as bytes; they are stored as text."""
    trace = pt.Trace.FromString(serialize(INTERNED + dump(0, 100, sample(10, 1, 1), heap="HEAP")))
    data = bytes(trace.SerializeToString()).replace(b"HEAP", b"\xff\xfeAP")
    _, db = run_import(tmp_path, data)
    with open_profile(db) as p:
        (heap,) = _sql(p).execute("SELECT DISTINCT heap_name FROM heap_profile_allocation").fetchone()
    assert heap == "\ufffd\ufffdAP"
