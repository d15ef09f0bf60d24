"""ClickHouse rows of a profile in chDB: the views give `heapscope report`'s numbers."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from heapscope.errors import HeapscopeError, UsageError
from heapscope.fleet import clickhouse
from heapscope.fleet.clickhouse import Writer, parse_destination
from heapscope.model import VIEWS
from heapscope.store.reader import open_profile
from heapscope.view.report import build_reports

pytest.importorskip("chdb", reason="needs chDB: pip install '.[clickhouse]'")


def report_rows(db: Path, view: str) -> list[tuple[Any, ...]]:
    with open_profile(db) as p:
        return sorted((r.process.info.pid, row.function, row.library, row.self_value, row.total_value)
                      for r in build_reports(p, view, dump="end", sort="total", keep_common=True)
                      for row in r.rows)


def ch_rows(w: Writer, view: str, table: str = "heapscope.heapscope_samples") -> list[tuple[Any, ...]]:
    rows = w.query(f"SELECT pid, function, library, self_{view}, total_{view} FROM {table}_top_functions"
                   f" WHERE self_{view} != 0 OR total_{view} != 0")
    return sorted(tuple(r) for r in rows)


def test_views_match_report(timed_profile: Path, tmp_path: Path) -> None:
    dest = f"chdb:{tmp_path / 'ch'}"
    with open_profile(timed_profile) as p:
        n = clickhouse.write(p, dest, host="h1", labels={"service": "api"})
    assert n == 9  # pid 100: 3 callsites at dump 1, 5 at dump 2; pid 200: 1
    with Writer(parse_destination(dest)) as w:
        for view in VIEWS:
            assert ch_rows(w, view) == report_rows(timed_profile, view), view
        by_process = w.query("SELECT host, pid, executable, labels, space, alloc_objects"
                             " FROM heapscope.heapscope_samples_by_process ORDER BY pid")
        assert by_process == [["h1", 100, "/usr/bin/prog", {"service": "api"}, 434, 9],
                              ["h1", 200, "/usr/bin/child", {"service": "api"}, 4096, 4]]
        over_time = w.query("SELECT toUnixTimestamp64Nano(timestamp) - 1700000000000000000, pid, space"
                            " FROM heapscope.heapscope_samples_over_time")
        assert over_time == [[1000, 100, 138], [1500, 200, 4096], [2000, 100, 434]]
        stacks = w.query("SELECT stack, space FROM heapscope.heapscope_samples_top_stacks WHERE pid = 100"
                         " ORDER BY space DESC LIMIT 1")
        assert stacks == [[["malloc", "parse", "main"], 300]]
        parts = w.query("SELECT DISTINCT partition FROM system.parts WHERE table = 'heapscope_samples' AND active")
        assert parts == [["2023-11-14"]]  # partitioned by day


def test_second_host_adds_rows_apart(timed_profile: Path, tmp_path: Path) -> None:
    dest = parse_destination(f"chdb:{tmp_path / 'ch'}#fleet.mem")
    with open_profile(timed_profile) as p:
        clickhouse.write(p, dest, host="h1")
        clickhouse.write(p, dest, host="h2", pid=200, dump=-1)
    with Writer(dest) as w:
        got = w.query("SELECT host, sum(space) FROM fleet.mem_by_process GROUP BY host ORDER BY host")
    assert got == [["h1", 4530], ["h2", 4096]]


def test_sql_script_runs(timed_profile: Path, tmp_path: Path) -> None:
    out = io.BytesIO()
    with open_profile(timed_profile) as p:
        n = clickhouse.write_script(p, out, database="s", host="h1")
    assert n == 9
    with Writer(parse_destination(f"chdb:{tmp_path / 'ch'}")) as w:
        for statement in out.getvalue().decode().split(";\n"):
            if statement.strip():
                w.execute(statement)
        assert ch_rows(w, "space", "s.heapscope_samples") == report_rows(timed_profile, "space")


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://h/db", "expected http://HOST:8123/DATABASE or chdb:DIR"),
    ("http:///db", "no host"),
    ("http://h/a/b/c", "the path is /DATABASE or /DATABASE/TABLE"),
    ("http://h/my-db", "database name 'my-db' is not a plain identifier"),
    ("chdb:", "chdb: needs a directory"),
    ("chdb:/x#db.t;drop", "table name 't;drop' is not a plain identifier"),
    ("http://h:99999/db", "Port out of range"),
])
def test_bad_destinations_are_one_line(url: str, message: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_destination(url)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_destinations() -> None:
    d = parse_destination("https://bob:s%3Acret@ch.example:9000/prof/heap")
    assert (d.kind, d.host, d.port, d.secure, d.username, d.password, d.database, d.table) == (
        "server", "ch.example", 9000, True, "bob", "s:cret", "prof", "heap")
    d = parse_destination("http://127.0.0.1/profiles")
    assert (d.port, d.database, d.table) == (8123, "profiles", "heapscope_samples")


def test_unreachable_server_is_one_line(timed_profile: Path) -> None:
    pytest.importorskip("clickhouse_connect", reason="needs clickhouse-connect: pip install '.[fleet]'")
    from fleet_support import free_port

    port = free_port()
    with open_profile(timed_profile) as p, pytest.raises(HeapscopeError) as e:
        clickhouse.write(p, f"http://127.0.0.1:{port}/profiles")
    assert str(e.value).startswith(f"ClickHouse 127.0.0.1:{port}: ") and "\n" not in str(e.value)


def test_planted_staging_file_is_refused_and_kept(timed_profile: Path, tmp_path: Path) -> None:
    # GIVEN the chDB directory exists with a symlink where heapscope stages its rows
    import os

    ch = tmp_path / "ch"
    with Writer(parse_destination(f"chdb:{ch}")) as w:
        w.create()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    planted = ch / f".heapscope-insert-{os.getpid()}.json"
    planted.symlink_to(victim)
    # WHEN rows are written THEN the write fails in one line, and neither file is touched
    with open_profile(timed_profile) as p, pytest.raises(HeapscopeError, match="insert failed: .*File exists"):
        clickhouse.write(p, f"chdb:{ch}")
    assert victim.read_text() == "keep me" and planted.is_symlink()
