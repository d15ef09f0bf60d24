"""Samples so far, one count for every reader: the live view's snapshot, the API's progress and
`record`'s summary all count every heap, Python's (python.pymalloc) included.

The target is a real Python program under the real client: it builds 200,000 small strings
(each under pymalloc's 512-byte limit, so they come from pymalloc's arenas, which the client
samples as python.pymalloc and which libc's malloc never sees), says "ready" and holds them
until its stdin closes. The live figure is read while it holds them.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from heapscope import api
from heapscope.hosts.live.snapshot import HeapSnapshot, Snapshotter
from heapscope.producer.config import RecordConfig
from heapscope.producer.producer import Producer
from heapscope.session import Recording, RecordingOptions

INTERVAL = 4096
STRINGS = 200_000
PROGRAM = (f"import sys\nheld = ['%0100d' % i for i in range({STRINGS})]\n"
           "print('ready', flush=True)\nsys.stdin.read()\n")
WAIT_S = 60.0
# The strings' bytes over the mean interval: the python.pymalloc samples to expect; half of it
# is far above what malloc's heap alone samples in this program (its start-up, the list).
EXPECTED = STRINGS * sys.getsizeof("0" * 100) // INTERVAL


def _heap_samples(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        ((n,),) = con.execute("SELECT COALESCE(SUM(value), 0) FROM stats WHERE name = 'python_heap_samples'")
    finally:
        con.close()
    return int(n)


def test_the_live_figure_counts_python_pymalloc_samples(tmp_path: Path) -> None:
    # GIVEN a recording of the Python program with the live view's snapshotter on its loop
    out = tmp_path / "live.db"
    rec = Recording(RecordConfig(interval=INTERVAL), out, RecordingOptions(forward_signals=False))
    snapshots = Snapshotter()
    taken = threading.Event()

    def take(producer: Producer) -> None:
        snapshots.take(producer)
        taken.set()

    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    result: list[int] = []
    with rec:
        try:
            rec.start([sys.executable, "-c", PROGRAM], stdin=read_in, stdout=write_out)
        finally:
            os.close(read_in)
            os.close(write_out)
        rec.every(0.05, take)
        loop = threading.Thread(target=lambda: result.append(rec.run_until_exit()), daemon=True)
        loop.start()
        with os.fdopen(read_out) as lines:
            assert lines.readline() == "ready\n"
            # WHEN the program holds its strings: snapshots until one has counted them (bounded)
            snap: HeapSnapshot | None = None
            for _ in range(int(WAIT_S / 0.05)):
                taken.clear()
                if not taken.wait(WAIT_S):
                    break
                snap = snapshots.latest()
                if snap is not None and snap.samples >= EXPECTED // 2:
                    break
            os.close(write_in)
            loop.join(WAIT_S)
    # THEN the live figure reached the strings' samples, which are python.pymalloc's
    assert result == [0]
    assert snap is not None and snap.samples >= EXPECTED // 2, (snap and snap.samples, EXPECTED)
    pymalloc = _heap_samples(out)
    assert rec.summary.samples - pymalloc < EXPECTED // 4  # malloc's heap alone could not have
    # and it is the count the summary ends with (it only grows)
    assert snap.samples <= rec.summary.samples == rec.progress.samples


def test_the_api_progress_counts_python_pymalloc_samples(tmp_path: Path) -> None:
    # GIVEN the Python program recorded through the API (its stdin closed: it ends at once)
    out = tmp_path / "api.db"
    with api.recording([sys.executable, "-c", PROGRAM.replace("sys.stdin.read()", "")], out,
                       interval=INTERVAL, symbolize=False) as running:
        pass
    # THEN its progress is the summary's count, python.pymalloc's samples included
    pymalloc = _heap_samples(out)
    assert running.exit_status == 0
    assert pymalloc >= EXPECTED // 2
    assert running.progress.samples == running.summary.samples >= pymalloc + 1


def test_the_status_line_and_summary_read_one_count(tmp_path: Path) -> None:
    # GIVEN `record` on the same program, its summary line
    out = tmp_path / "cli.db"
    done = subprocess.run([sys.executable, "-m", "heapscope", "record", "-o", str(out), "--no-symbolize", "--",
                           sys.executable, "-c", PROGRAM.replace("sys.stdin.read()", "")],
                          capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    # THEN the samples it says include python.pymalloc's
    line = next(s for s in done.stderr.splitlines() if " samples, " in s)
    said = int(line.split(" samples, ")[0].rsplit(" ", 1)[1].replace(",", ""))
    assert said >= _heap_samples(out) >= EXPECTED // 2
