"""store.sql: `heapscope sql` reads anything and changes nothing, on disk or elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from heapscope.errors import SqlError
from heapscope.store.reader import open_profile
from heapscope.store.sql import SqlConsole


def test_select_works(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        r = SqlConsole(prof).execute("SELECT pid FROM process ORDER BY pid")
        assert r.columns == ["pid"] and r.rows == [(100,), (200,), (300,)]
        assert SqlConsole(prof).execute("PRAGMA table_info(process)").rows


@pytest.mark.parametrize("statement, refused", [
    ("ATTACH '{dir}/attached.db' AS a", "ATTACH"),
    ("VACUUM INTO '{dir}/copy.db'", "ATTACH"),
    ("VACUUM", "ATTACH"),
    ("DETACH main", "DETACH"),
    ("DELETE FROM process", "DELETE"),
    ("UPDATE process SET pid = 1", "UPDATE"),
    ("INSERT INTO stats VALUES ('x', NULL, 'info', 'producer', 1, '')", "INSERT"),
    ("CREATE TEMP TABLE t (x)", "CREATE"),
    ("CREATE TABLE t (x)", "CREATE"),
    ("DROP TABLE process", "DROP"),
    ("PRAGMA query_only = OFF", "PRAGMA"),
    ("PRAGMA journal_mode = DELETE", "PRAGMA"),
    ("PRAGMA writable_schema = ON", "PRAGMA"),
])
def test_writes_and_other_files_are_refused(known_profile: Path, tmp_path: Path, statement: str,
                                            refused: str) -> None:
    before = known_profile.read_bytes()
    listing = sorted(os.listdir(tmp_path))
    with open_profile(known_profile) as prof, pytest.raises(SqlError) as e:
        SqlConsole(prof).execute(statement.format(dir=tmp_path))
    assert "\n" not in str(e.value) and refused in str(e.value), str(e.value)
    assert str(e.value).startswith("refused: heapscope sql is read-only")
    assert known_profile.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == listing  # no file created anywhere


def test_the_flamegraph_table_is_the_one_write(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        console = SqlConsole(prof)
        console.load_table("experimental_flamegraph", ["id", "name"], [(1, "a"), (2, "b")])
        assert console.execute("SELECT COUNT(*) FROM experimental_flamegraph").rows == [(2,)]
        assert "experimental_flamegraph" in console.tables()
        with pytest.raises(SqlError, match="read-only"):
            console.execute("DELETE FROM experimental_flamegraph")
