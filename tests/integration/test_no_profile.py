"""benchmarks/no_profile.py, the floor column of the benchmark tables: a recording that keeps no profile.

RESULTS.md reads "heapscope (no profile)" as what heapscope costs a program before a single row is
written, so the tool must sample as `record` does (the same samples of the same program), run the
program to its end with its output and exit status, and write no file at all.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
from pathlib import Path

from hs_integration import HEAPSCOPE, run_process

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
# 2,000 objects of 4 KiB held, then the program says so and exits with status 3.
PROGRAM = "import sys; held = [bytearray(4096) for _ in range(2000)]; print(len(held)); sys.exit(3)"


def test_no_profile_samples_as_record_does_and_writes_nothing(tmp_path: Path) -> None:
    # GIVEN a program with a known exit status and output, run from an empty directory
    work, tmp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    # WHEN it runs under no_profile.py at interval 1 (in that directory), and under record for comparison
    in_work = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(work)]
    run = run_process([*in_work, sys.executable, str(BENCH / "no_profile.py"), "-i", "1", "--", sys.executable, "-c",
                       PROGRAM], timeout=120, env={**os.environ, "TMPDIR": str(tmp)})
    db = tmp_path / "record.db"
    recorded = run_process([*HEAPSCOPE, "record", "-q", "-i", "1", "-o", str(db), "--", sys.executable, "-c",
                            PROGRAM], timeout=120)
    # THEN the program ran to its end, as it does alone
    assert run.returncode == 3 and run.stdout.decode().split() == ["2000"], run.describe()
    assert recorded.returncode == 3, recorded.describe()
    # AND it was sampled: at interval 1 every one of its 2,000 buffers at least, as record samples them
    said = re.search(r"no_profile: ProducerStats\(samples=(\d+)", run.stderr.decode())
    assert said is not None, run.describe()
    with sqlite3.connect(db) as con:
        (recorded_samples,) = con.execute(
            "SELECT SUM(value) FROM stats WHERE name IN ('heap_samples', 'python_heap_samples')").fetchone()
    con.close()
    samples = int(said.group(1))
    assert samples >= 2000 and recorded_samples >= 2000, (samples, recorded_samples)
    assert abs(samples - recorded_samples) < recorded_samples // 10, (samples, recorded_samples)
    # AND nothing was written: not in the working directory, and nothing left in the temporary one
    assert list(work.iterdir()) == []
    assert list(tmp.iterdir()) == []
