"""view/memory.py: a process's chart and samples for the flamegraph page stay bounded on a big
profile, and the samples thinned for the page keep their sums unbiased."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from heapscope.model import CallsiteId, Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.writer import ProfileWriter
from heapscope.view.flamegraph import payload, profile_graphs
from heapscope.view.memory import MAX_POINTS, MAX_SAMPLES, encode_memory, process_memory

MS = 1_000_000


def write_profile(path: Path, points: int, samples: int) -> int:
    """One process, two callsites; `points` series points and `samples` samples of 100 bytes,
    a third of them never freed. Returns the held bytes of samples allocated in the first half."""
    rng = random.Random(3)
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("aa", 0, 0, 0x1000, 0x9000, 0, "/usr/bin/app"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main")), (2, Frame(MappingId(1), 0x20, "work"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2)])
    p = ProcessInfo(Upid(1), pid=9, ppid=1, name="app", cmdline="app", exe="/usr/bin/app", uid=0, start_ts=0)
    w.add_process(p)
    w.set_process_flags(p, ProcessFlags(sampling_interval_bytes=1, orig_sampling_interval_bytes=1))
    w.add_dump(1, 0, points * 10 * MS, "exit", [(1, 1, 100), (2, samples, 100 * samples)], "libc.malloc")
    series: list[int] = []
    for k in range(points):
        series += (k * 10 * MS, 1000 + k, 900 + k, 100 * k)
    rows: list[int | None] = []
    end = points * 10 * MS
    held_first_half = 0
    for _ in range(samples):
        a = rng.randrange(end)
        f = None if rng.random() < 1 / 3 else rng.randrange(a, end)
        rows += (2, a, f, 100, 1)
        if a < end // 2 and (f is None or f > end // 2):
            held_first_half += 100
    w.add_memory(1, "libc.malloc", series, rows)
    w.commit()
    w.close()
    return held_first_half


def test_a_big_profile_gives_a_bounded_chart_and_unbiased_samples(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    held = write_profile(db, points=4 * MAX_POINTS, samples=20 * MAX_SAMPLES)
    with open_profile(db) as prof:
        mem = process_memory(prof, 1, {CallsiteId(2): 1})
    assert mem is not None
    assert len(mem.series) == MAX_POINTS and max(p[1] for p in mem.series) == 1000 + 4 * MAX_POINTS - 1
    assert len(mem.node) == MAX_SAMPLES and mem.samples_in_profile == 20 * MAX_SAMPLES
    # THEN the thinned samples' weights estimate the range's held bytes (each stands for 20)
    half = 4 * MAX_POINTS * 10 * MS // 2
    est = sum(b for a, f, b in zip(mem.alloc_ts, mem.free_ts, mem.size, strict=True)
              if a < half and (f is None or f > half))
    assert abs(est - held) < 0.05 * held
    page: dict[str, Any] = encode_memory(mem, 0)
    assert len(page["t"]) == MAX_POINTS and page["kept"] == MAX_SAMPLES


def test_samples_thinned_by_a_step_that_does_not_divide_them_stay_unbiased(tmp_path: Path) -> None:
    db = tmp_path / "odd.db"
    n = 5 * MAX_SAMPLES // 2 + 1  # every 3rd kept: fewer than MAX_SAMPLES, each standing for 3
    held = write_profile(db, points=20, samples=n)
    with open_profile(db) as prof:
        mem = process_memory(prof, 1, {CallsiteId(2): 1})
        again = process_memory(prof, 1, {CallsiteId(2): 1})
    assert mem is not None and again is not None
    assert n // 3 <= len(mem.node) <= n // 3 + 1 and set(mem.weight) == {3}
    assert mem.size == [300] * len(mem.node) and mem.samples_in_profile == n
    assert mem.alloc_ts == sorted(mem.alloc_ts) and (mem.alloc_ts, mem.free_ts) == (again.alloc_ts, again.free_ts)
    half = 20 * 10 * MS // 2
    est = sum(b for a, f, b in zip(mem.alloc_ts, mem.free_ts, mem.size, strict=True)
              if a < half and (f is None or f > half))
    assert abs(est - held) < 0.05 * held
    assert encode_memory(mem, 0)["sw"] == [3] * len(mem.node)  # whole numbers, as the page reads them


def test_the_page_carries_each_process_memory(tmp_path: Path) -> None:
    db = tmp_path / "small.db"
    write_profile(db, points=10, samples=30)
    with open_profile(db) as prof:
        data: dict[str, Any] = payload(profile_graphs(prof), title="t")
    (proc,) = data["processes"]
    mem = proc["memory"]
    assert mem["t"] == [k * 10_000 for k in range(10)] and mem["kept"] == 30 and set(mem["sn"]) == {2}
