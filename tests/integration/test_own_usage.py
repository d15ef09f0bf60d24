"""What `record` says about its own cost: the heapscope process's CPU time and
peak RSS in `stats`, and the summary and exit status intact when it ends without the
interpreter's teardown."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE

pytestmark = pytest.mark.timeout(120)

BIG = 256 << 20  # the parent's resident memory before it starts heapscope


def _stats(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as con:
        return {str(n): int(v) for n, v in con.execute("SELECT name, value FROM stats WHERE idx IS NULL")}


def test_peak_rss_is_heapscopes_own_not_its_parents(tmp_path: Path) -> None:
    # GIVEN a parent that holds 256 MiB and then starts `heapscope record -- /bin/true`
    # (Linux carries ru_maxrss over fork and exec: read from there, this is the parent's peak)
    out = tmp_path / "p.db"
    parent = (f"import subprocess, sys\nheld = bytearray({BIG})\nheld[::4096] = b'x' * len(held[::4096])\n"
              f"sys.exit(subprocess.run({[*HEAPSCOPE, 'record', '-q', '-o', str(out), '--', '/bin/true']!r})"
              ".returncode)\n")
    run = subprocess.run([sys.executable, "-c", parent], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr
    st = _stats(out)
    # THEN the profile has heapscope's own figures: some CPU, and a peak far below the parent's
    assert st["producer_cpu_ns"] > 0
    assert 1 << 20 < st["producer_peak_rss_bytes"] < BIG // 2, st["producer_peak_rss_bytes"]
    # AND the symbol cache was counted (nothing to symbolize: /bin/true has no sampled frame)
    assert st["symbol_cache_hits"] == st["symbol_cache_misses"] == st["symbol_cache_corrupt"] == 0


def test_record_flushes_its_summary_and_keeps_the_exit_status(tmp_path: Path) -> None:
    # GIVEN a target that writes and fails; record's output goes to pipes
    run = subprocess.run([*HEAPSCOPE, "record", "-o", str(tmp_path / "p.db"), "--", "sh", "-c",
                          "echo out; echo err >&2; exit 7"], capture_output=True, timeout=120)
    # THEN its status is the target's, and every line of the target and of the summary arrived
    assert run.returncode == 7
    assert run.stdout == b"out\n"
    err = run.stderr.decode()
    assert err.startswith("err\n") and err.rstrip().endswith(f"next: heapscope report {tmp_path / 'p.db'}"), err
