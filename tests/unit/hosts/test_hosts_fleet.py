"""Live: what `record` will hold: its server and pushers, each dump pushed once, losses summarized."""

from __future__ import annotations

import argparse
import sqlite3
import urllib.request
from pathlib import Path

import pytest
from fleet_support import PyroscopeServer, free_port

from heapscope.cli.record import add_fleet_arguments
from heapscope.errors import UsageError
from heapscope.hosts import fleet as live
from heapscope.hosts.serve import Snapshot


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_fleet_arguments(p)
    return p.parse_args(argv)


def test_each_dump_is_pushed_once(timed_profile: Path, pyroscope: PyroscopeServer) -> None:
    fleet = live.Live.from_args(parse(["--push", pyroscope.url, "--label", "service=api", "--serve", "127.0.0.1:0"]),
                                lambda: Snapshot(timed_profile))
    # GIVEN the profile has 3 dumps (two of pid 100, one of pid 200) WHEN `record` reports a dump
    fleet.dumped(timed_profile)
    got = pyroscope.wait_for(3)
    # and a later dump of pid 200 arrives
    db = sqlite3.connect(timed_profile)
    db.execute("INSERT INTO heap_profile (ts, ts_end, dur, upid, heap_name, reason)"
               " VALUES (1500, 3000, 1500, 2, 'libc.malloc', 'periodic')")
    db.commit()
    db.close()
    fleet.dumped(timed_profile)
    got = pyroscope.wait_for(4)
    assert fleet.server is not None
    with urllib.request.urlopen(fleet.server.url + "heap", timeout=20) as r:
        assert r.status == 200
    lines = fleet.close()
    # THEN every dump went once, labelled with its process
    assert sorted(r.labels["pid"] for r in got) == ["100", "100", "200", "200"]
    assert {r.labels["executable"] for r in got} == {"prog", "child"}
    assert all(r.labels["__app__"] == "api" and r.labels["host"] for r in got)
    assert lines[0].startswith("served 1 requests on http://127.0.0.1:")
    assert lines[1].startswith(f"push to {pyroscope.url}: 4 of 4 profiles sent")


def test_dead_server_is_a_counted_loss(timed_profile: Path) -> None:
    url = f"pyroscope+http://127.0.0.1:{free_port()}"
    fleet = live.Live(lambda: Snapshot(timed_profile), push=[url])
    fleet.dumped(timed_profile)
    (line,) = fleet.close(drain_timeout=20)
    assert line.startswith(f"push to {url}: 0 of 3 profiles sent") and "3 failed" in line
    assert "connection refused" in line


def test_unreadable_profile_is_a_counted_loss(tmp_path: Path, pyroscope: PyroscopeServer) -> None:
    fleet = live.Live(lambda: Snapshot(tmp_path / "none.db"), push=[pyroscope.url])
    fleet.dumped(tmp_path / "none.db")
    (line,) = fleet.close(drain_timeout=20)
    assert "1 failed (last error: building the profile:" in line and "no such file" in line


def test_bad_options_before_anything_starts() -> None:
    with pytest.raises(UsageError, match="unknown scheme"):
        live.Live.from_args(parse(["--push", "http://x"]), lambda: Snapshot(Path("x")))
    with pytest.raises(UsageError, match="not a loopback address"):
        live.Live.from_args(parse(["--serve", "0.0.0.0:6060"]), lambda: Snapshot(Path("x")))
