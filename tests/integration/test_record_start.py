"""The start of `heapscope record` (heapscope/launch.py, producer/listener.py): the target
is spawned with posix_spawn and answered before the recording's imports. What the target gets must
be what it would get without heapscope (signals, descriptors, limits), and nothing of the profile
may be lost to the early answer: clients that connect while `record` imports are profiled, and the
records their rings hold meanwhile are all read."""

from __future__ import annotations

import fcntl
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

HEAPSCOPE = (sys.executable, "-m", "heapscope")
SIGINT_BIT, SIGQUIT_BIT, SIGPIPE_BIT, SIGXFSZ_BIT = 1 << 1, 1 << 2, 1 << 12, 1 << 24


def _status_field(text: str, key: str) -> int:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {key} in {text!r}")


def _query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_target_gets_the_signals_descriptors_and_limit_it_would_get_alone(tmp_path: Path) -> None:
    # GIVEN heapscope started with a soft descriptor limit below the one heapscope raises its own
    # to, and two descriptors it may inherit: one below that limit and one above it (a parent
    # that lowered the limit after opening it; glibc refuses to close that one in a spawn)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(256, soft)
    r_fd, w_fd = os.pipe()
    high_fd = fcntl.fcntl(w_fd, fcntl.F_DUPFD, want + 8)
    os.set_inheritable(w_fd, True)
    os.set_inheritable(high_fd, True)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    try:
        # WHEN it records a shell that shows what it got
        done = subprocess.run(
            [*HEAPSCOPE, "record", "-q", "-o", str(tmp_path / "a.db"), "--", "/bin/sh", "-c",
             f"cat /proc/self/status; for fd in {w_fd} {high_fd}; do "
             "if test -e /proc/self/fd/$fd; then echo LEAKED; fi; done; ulimit -n"],
            capture_output=True, text=True, timeout=60, pass_fds=(w_fd, high_fd), preexec_fn=limit)
    finally:
        os.close(r_fd)
        os.close(w_fd)
        os.close(high_fd)
    assert done.returncode == 0, done.stderr
    # THEN Python's ignored signals are back at their default, as subprocess's restore_signals gives
    ignored = _status_field(done.stdout, "SigIgn")
    assert ignored & (SIGPIPE_BIT | SIGXFSZ_BIT) == 0
    # the descriptors heapscope was given above 2 stay heapscope's (subprocess's close_fds)
    assert "LEAKED" not in done.stdout
    # and the limit is the one it was started with, not heapscope's raised one
    assert done.stdout.splitlines()[-1] == str(want)


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a terminal")
def test_a_target_in_a_terminal_does_not_inherit_the_interrupts_heapscope_ignores(tmp_path: Path) -> None:
    # GIVEN heapscope in the foreground of a terminal (it ignores SIGINT and SIGQUIT there: the
    # terminal sends them to the target's process group itself)
    db = tmp_path / "t.db"
    cmd = " ".join([*HEAPSCOPE, "record", "-q", "-o", str(db), "--", "grep", "SigIgn", "/proc/self/status"])
    # WHEN it records a program
    done = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    # THEN the program gets them at their default: Ctrl-C still interrupts it
    ignored = _status_field(done.stdout.replace("\r", ""), "SigIgn")
    assert ignored & (SIGINT_BIT | SIGQUIT_BIT) == 0


def test_children_that_connect_while_record_imports_are_profiled(tmp_path: Path) -> None:
    # GIVEN a shell that starts ten programs one after the other at once (each connects while
    # `record` is still importing the recording's modules after the shell's answer)
    db = tmp_path / "c.db"
    script = "; ".join(["ls /usr/bin >/dev/null"] * 10)
    done = subprocess.run([*HEAPSCOPE, "record", "-q", "-i", "1", "--no-symbolize", "-o", str(db), "--",
                           "/bin/sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # THEN each is profiled, with every allocation (interval 1) and no record dropped
    assert _query(db, "SELECT COUNT(*) FROM process") == [(11,)]
    rows = _query(db, "SELECT p.name, SUM(a.count) FROM heap_profile_allocation a JOIN process p USING (upid)"
                      " WHERE a.count > 0 GROUP BY a.upid")
    counts = [n for name, n in rows if name == "ls"]
    assert len(counts) == 10 and min(counts) > 0 and len(set(counts)) == 1  # the same program, the same count
    assert _query(db, "SELECT SUM(value) FROM stats WHERE name IN ('dropped_records', 'rejected_clients')") in (
        [(0,)], [(None,)])


def test_a_small_ring_that_fills_before_the_producer_reads_it_loses_nothing(tmp_path: Path) -> None:
    # GIVEN the smallest ring (4 KiB) in blocking mode: it fills long before `record` has imported
    # what reads it, and the target waits (bounded) for room
    db = tmp_path / "s.db"
    done = subprocess.run([*HEAPSCOPE, "record", "-q", "-i", "1", "--no-symbolize", "--shmem-size", "4k", "-o",
                           str(db), "--", "ls", "-l", "/usr/bin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # THEN every allocation is there, none dropped
    ((dropped,),) = _query(db, "SELECT value FROM stats WHERE name = 'dropped_records'")
    assert dropped == 0
    ((allocs,),) = _query(db, "SELECT SUM(count) FROM heap_profile_allocation WHERE count > 0")
    assert allocs > 100


def test_a_recording_that_cannot_start_after_the_spawn_still_supervises_the_target(tmp_path: Path) -> None:
    # GIVEN a heapscope whose recording module cannot be imported (a broken install: the import
    # fails after the target was spawned and answered), run as the console script runs it
    probe = ("import sys; sys.modules['heapscope.session'] = None\n"
             "from heapscope.cli.start import main\n"
             "sys.exit(main(sys.argv[1:]))\n")
    db = tmp_path / "broken.db"
    done = subprocess.run([sys.executable, "-c", probe, "record", "-q", "-o", str(db), "--", "/bin/sh", "-c",
                           "echo out; exit 7"], capture_output=True, text=True, timeout=60)
    # THEN the target ran to its end with its output, its status is the command's, one line says
    # what went wrong, and no empty profile is left behind
    assert done.returncode == 7, done.stderr
    assert done.stdout == "out\n"
    assert done.stderr.count("heapscope: error:") == 1 and "runs on unprofiled" in done.stderr
    assert "Traceback" not in done.stderr
    assert not db.exists()
