"""store.select: which state of a process a command shows (peak, end, dump N), in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from heapscope.errors import HeapscopeError, UnknownDumpError
from heapscope.model import CallsiteId, Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.select import ALL_HEAPS, default_dump, parse_dump, process_state, select_heap, state_labels
from heapscope.store.writer import ProfileWriter


def write(path: Path, peak: bool, real: bool = True, more: bool = False) -> None:
    """One process, interval 4096: a dump at 1 s with callsite 2 holding 8 samples (2 KiB real),
    the exit dump at 2 s with them freed; its peak (1.5 s) had callsite 3's 64 KiB too. `more`:
    an mmap heap too, with its peak at 1.2 s, and a second process without dumps."""
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("aa", 0, 0, 0x1000, 0x9000, 0, "/usr/bin/app"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main")), (2, Frame(MappingId(1), 0x20, "small")),
                  (3, Frame(MappingId(1), 0x30, "big"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 1, 1, 3)])
    p = ProcessInfo(Upid(1), pid=7, ppid=1, name="app", cmdline="app", exe="/usr/bin/app", uid=0,
                    start_ts=500_000_000)
    w.add_process(p)
    w.set_process_flags(p, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=4096,
                                        orig_sampling_interval_bytes=4096))
    first = [(2, 8, 8 * 4096, 8 * 256)] if real else [(2, 8, 8 * 4096)]
    w.add_dump(1, 0, 1_000_000_000, "periodic", first, "libc.malloc")
    w.add_dump(1, 1_000_000_000, 2_000_000_000, "exit",
               [(2, -8, -8 * 4096, -8 * 256), (3, 1, 65536, 65536), (3, -1, -65536, -65536)], "libc.malloc")
    if peak:
        w.add_peak(1, 1_500_000_000, "libc.malloc",
                   [(2, 8, 8 * 4096, 8, 8 * 4096, 8 * 256, 8 * 256), (3, 1, 65536, 1, 65536, 65536, 65536)])
    if more:
        w.add_dump(1, 0, 1_000_000_000, "periodic", [(3, 1, 4096, 4096)], "mmap")
        w.add_peak(1, 1_200_000_000, "mmap", [(3, 1, 4096, 1, 4096, 4096, 4096)])
        w.add_process(ProcessInfo(Upid(2), pid=8, ppid=7, name="idle", cmdline="idle", exe="/usr/bin/idle", uid=0,
                                  start_ts=600_000_000))
    w.commit()
    w.close()


def test_parse_dump() -> None:
    assert [parse_dump(x) for x in ("peak", "END", "3", "-1")] == ["peak", "end", 3, -1]
    with pytest.raises(UnknownDumpError, match="use peak, end, or a dump number"):
        parse_dump("max")


def test_defaults_by_view() -> None:
    assert [default_dump(v) for v in ("space", "objects", "alloc_space", "alloc_objects")] == [
        "peak", "peak", "end", "end"]


def test_the_peak_end_and_dump_n(tmp_path: Path) -> None:
    write(tmp_path / "p.db", peak=True)
    with open_profile(tmp_path / "p.db") as prof:
        [p] = prof.processes()
        peak = process_state(prof, p, None, "space")
        assert peak is not None and (peak.kind, peak.ts, peak.label) == ("peak", 1_500_000_000, "peak at 1.00 s")
        assert {cs: v.space for cs, v in peak.values.items()} == {2: 8 * 4096, 3: 65536}
        assert peak.values[CallsiteId(2)].real_space == 8 * 256 and peak.interval == 4096
        end = process_state(prof, p, None, "alloc_space")
        assert end is not None and end.label == "end (dump 2 of 2, exit, at 1.50 s)"
        assert {cs: v.space for cs, v in end.values.items()} == {2: 0, 3: 0}
        assert {cs: v.alloc_real_space for cs, v in end.values.items()} == {2: 8 * 256, 3: 65536}
        first = process_state(prof, p, 1)
        assert first is not None and first.label == "dump 1 of 2 (periodic, at 0.50 s)"
        with pytest.raises(HeapscopeError, match="has 2 dump"):
            process_state(prof, p, 3)


def test_without_a_peak_or_real_sizes(tmp_path: Path) -> None:
    write(tmp_path / "p.db", peak=False, real=False)
    with open_profile(tmp_path / "p.db") as prof:
        [p] = prof.processes()
        st = process_state(prof, p, "peak")
        assert st is not None and st.kind == "end" and st.label.endswith("; no peak recorded")
        first = process_state(prof, p, 1)
        assert first is not None and first.values[CallsiteId(2)].real_space is None


def test_the_labels_alone_are_the_states_labels(tmp_path: Path) -> None:
    """`export`'s line says which state it holds from state_labels, which reads no values: the
    same label as process_state's, for each choice, in each heap shown (a sum of heaps peaks at
    the ts where their sum did), and nothing for a process without dumps."""
    write(tmp_path / "p.db", peak=True, more=True)
    write(tmp_path / "none.db", peak=False)
    for db, heaps in ((tmp_path / "p.db", ["libc.malloc", "mmap", ALL_HEAPS]), (tmp_path / "none.db", [None])):
        with open_profile(db) as prof:
            procs = prof.processes()
            assert len(procs) == (2 if heaps[0] else 1)
            for heap in heaps:
                if heap is not None:
                    select_heap(prof, heap)
                for choice in ("peak", "end", 1, -1, None):
                    states = [(p, process_state(prof, p, choice, "space")) for p in procs]
                    want = [(p.info.pid, st.label) for p, st in states if st is not None]
                    assert [(p.info.pid, label) for p, label in state_labels(prof, procs, choice, "space")] == want
                    assert len(want) == 1, (db.name, heap, choice)
    with open_profile(tmp_path / "p.db") as prof:
        select_heap(prof, "mmap")
        assert [label for _, label in state_labels(prof, prof.processes(), "peak")] == ["peak at 0.70 s"]
