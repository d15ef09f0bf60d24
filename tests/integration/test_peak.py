"""The peak in every profile: heapscope_peak_allocation, exact at interval 1.

The target (sessions/phases.c) reads its commands from stdin, all given at
once: keep 1 MiB and free it, keep 2 MiB, then peak_block() takes 1 MiB more
and frees it (the peak, 3 MiB), then everything is freed before exit. With
-i 1 every malloc is sampled at its size, so the peak's rows are known
exactly: grow() 32 blocks of 64 KiB unreleased of 48 allocated, peak_block()
16 of 16.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).resolve().parent / "sessions"
BLOCK = 64 * 1024
COMMANDS = b"a\nf\na\na\np\nf\nq\n"
GROW = (32, 32 * BLOCK, 48, 48 * BLOCK)
PEAK_BLOCK = (16, 16 * BLOCK, 16, 16 * BLOCK)


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    out = tmp_path_factory.mktemp("peak-bin") / "phases"
    subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", "-o", str(out), str(HERE / "phases.c")],
                   check=True, timeout=60)
    return out


def record(db: Path, phases: Path, *opts: str) -> None:
    r = subprocess.run([sys.executable, "-m", "heapscope", "record", "-q", "-i", "1", "--seed", "1",
                        "--no-symbolize", "-o", str(db), *opts, "--", str(phases)],
                       input=COMMANDS, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines()[-1] == "bye 0"


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("opts", [(), ("--dump-at-max",)], ids=["default", "dump-at-max"])
def test_peak_freed_before_exit_is_in_the_profile(phases: Path, tmp_path: Path, opts: tuple[str, ...]) -> None:
    db = tmp_path / "p.db"
    record(db, phases, *opts)
    (upid,) = query(db, "SELECT upid FROM process")[0]
    rows = query(db, "SELECT callsite_id, ts, count, size, alloc_count, alloc_size FROM heapscope_peak_allocation"
                     f" WHERE upid = {upid} ORDER BY size DESC")
    # THEN two callsites, exactly as the program allocated them, at one peak time
    assert [r[2:] for r in rows] == [GROW, PEAK_BLOCK]
    assert len({r[1] for r in rows}) == 1 and rows[0][1] > 0
    (end_ts,) = query(db, f"SELECT end_ts FROM process WHERE upid = {upid}")[0]
    assert rows[0][1] <= end_ts
    # AND the callsites are those of the dumps
    dumped = {r[0] for r in query(db, f"SELECT callsite_id FROM heap_profile_allocation WHERE upid = {upid}")}
    assert {r[0] for r in rows} <= dumped
    unreleased = query(db, f"SELECT SUM(size) FROM heap_profile_allocation WHERE upid = {upid}")[0][0]
    if opts:
        assert unreleased == 48 * BLOCK  # --dump-at-max: the dump is the peak, as before
    else:
        assert unreleased == 0  # the normal dump: everything was freed
