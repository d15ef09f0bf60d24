"""pprof_source: one dump as Go's heap profile, with pid/executable labels and wall-clock time."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from export_support import decode, packed_ints
from fleet_support import go_missing, go_pprof, iter_labels, raw_totals

from heapscope.errors import HeapscopeError, UsageError
from heapscope.fleet import pprof_source
from heapscope.store.reader import open_profile


def _samples(data: bytes) -> tuple[list[str], list[tuple[list[int], list[tuple[int, int | bytes]]]], dict[int, int]]:
    msg = decode(gzip.decompress(data))
    strings = [v.decode() for f, v in msg if f == 6]  # type: ignore[union-attr]
    samples = []
    for f, v in msg:
        if f == 2:
            fields = decode(v)  # type: ignore[arg-type]
            values = packed_ints(next(b for k, b in fields if k == 2))  # type: ignore[arg-type]
            labels = [decode(b) for k, b in fields if k == 3]  # type: ignore[arg-type]
            samples.append((values, [tuple(lb) for lb in labels]))
    scalars = {f: v for f, v in msg if isinstance(v, int)}
    return strings, samples, scalars  # type: ignore[return-value]


def _labels(strings: list[str], sample_labels: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label in sample_labels:
        d = dict(label)
        key = strings[d[1]]
        out[key] = strings[d[2]] if 2 in d else d[3]
    return out


def test_every_sample_has_pid_and_executable(known_profile: Path) -> None:
    # GIVEN two processes with dumps; WHEN the last dump of each is built
    with open_profile(known_profile) as p:
        got = pprof_source.build(p)
    strings, samples, _ = _samples(got.data)
    # THEN every sample names its process and executable, and the values are the report's
    assert got.pids == (100, 200) and got.samples == len(samples) == 6
    by_pid: dict[int, int] = {}
    for values, labels in samples:
        lab = _labels(strings, labels)
        assert set(lab) == {"pid", "executable"} and len(labels) == 2  # each once (the export labels pid too)
        assert lab["executable"] == {100: "/usr/bin/prog", 200: "/usr/bin/child"}[lab["pid"]]
        by_pid[lab["pid"]] = by_pid.get(lab["pid"], 0) + values[3]  # inuse_space
    assert by_pid == {100: 434, 200: 4096}


def test_one_process_one_dump(known_profile: Path) -> None:
    with open_profile(known_profile) as p:
        got = pprof_source.build(p, pid=100, dump=1)
    strings, samples, _ = _samples(got.data)
    assert got.pids == (100,)
    assert sum(v[3] for v, _ in samples) == 138  # ts 1000: A 100 + B 30 + C 8
    assert all(_labels(strings, lab) == {"pid": 100, "executable": "/usr/bin/prog"} for _, lab in samples)


def test_time_with_a_wall_clock(timed_profile: Path) -> None:
    with open_profile(timed_profile) as p:
        got = pprof_source.build(p, pid=100)
    _, _, scalars = _samples(got.data)
    # dump 2 of pid 100: window 1000..2000 ns after the start
    assert scalars[9] == 1_700_000_000_000_000_000 + 2000 and scalars[10] == 1000
    assert (got.start_unix_ns, got.end_unix_ns) == (1_700_000_000_000_001_000, 1_700_000_000_000_002_000)


def test_no_time_without_start(known_profile: Path) -> None:
    with open_profile(known_profile) as p:
        _, _, scalars = _samples(pprof_source.build(p).data)
    assert 9 not in scalars


def test_bad_selection_is_one_line(known_profile: Path) -> None:
    with open_profile(known_profile) as p:
        with pytest.raises(HeapscopeError, match=r"no process with pid 7 \(pids present: 100, 200, 300\)"):
            pprof_source.build(p, pid=7)
        with pytest.raises(UsageError, match="has 2 dump"):
            pprof_source.build(p, pid=100, dump=5)


@pytest.mark.timeout(240)
def test_go_tool_pprof_reads_it(known_profile: Path, tmp_path: Path) -> None:
    missing = go_missing()
    if missing:
        pytest.skip(missing)
    with open_profile(known_profile) as p:
        f = tmp_path / "heap.pb.gz"
        f.write_bytes(pprof_source.build(p, view="alloc_space").data)
    raw = go_pprof(["-raw", str(f)], tmp_path)
    assert "alloc_space/bytes[dflt]" in raw
    assert raw_totals(raw) == {"alloc_objects": 13, "alloc_space": 4600, "inuse_objects": 11, "inuse_space": 4530}
    assert set(iter_labels(raw)) == {"pid:[100]", "pid:[200]", "executable:[/usr/bin/prog]",
                                     "executable:[/usr/bin/child]"}
