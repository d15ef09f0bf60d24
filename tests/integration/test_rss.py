"""The peak RSS that `record` and `report` give ("seen N of RSS M") is the process's, even when
the peak comes in its last moments, and the part of it that is heapscope's own is said.

The producer polls VmHWM every 50 ms, and the kernel drops it with the process: rsspeak.c
(tests/programs) writes 100 MiB in ~30 ms, prints its VmHWM and ends, so polling alone saw a
part of its peak (52-98 of 104 MiB). Now the client's last destructor reads it (wire.h,
exit_peak_rss) and, for the process `record` started, so does record's wait (launch.Child,
exact after _exit or a signal too).
"""

from __future__ import annotations

import re

import pytest
from hs_integration import HEAPSCOPE, Profile, Programs, Recorder, Recording, run_process

from heapscope.producer.config import DEFAULT_SHMEM_SIZE

pytestmark = pytest.mark.timeout(120)


def _printed_hwm(run: Recording) -> int:
    """The VmHWM (bytes) the target printed itself (its `hwm KIB` line, on stderr)."""
    found = re.findall(rb"^hwm (\d+)$", run.stderr, re.M)
    assert len(found) == 1, run.describe()
    return int(found[0]) * 1024


def _rss_stats(profile: Profile, upid: int) -> tuple[int, int]:
    rows = {r["name"]: r["value"] for r in profile.query(
        "SELECT name, value FROM stats WHERE idx = ? AND name IN ('peak_rss_bytes', 'client_own_rss_bytes')",
        (upid,))}
    return rows["peak_rss_bytes"], rows.get("client_own_rss_bytes", 0)


def _summary_line(run: Recording) -> str:
    lines = [ln for ln in run.stderr.decode().splitlines() if " of RSS " in ln]
    assert len(lines) == 1, run.describe()
    return lines[0]


@pytest.mark.parametrize("mode", ["", "exit"], ids=["returns", "_exit"])
def test_peak_rss_of_a_peak_just_before_the_exit(programs: Programs, record: Recorder, mode: str) -> None:
    # GIVEN a target whose 100 MiB peak comes a few ms before it returns from main (its client's
    # destructor runs), or before it calls _exit (none runs: the client's _exit notes it)
    run = record([programs.path("rsspeak"), *([mode] if mode else [])], interval=None)
    assert run.returncode == 0, run.describe()
    hwm = _printed_hwm(run)
    profile = run.profile()
    peak, own = _rss_stats(profile, profile.only_upid("rsspeak"))
    # THEN its peak_rss_bytes is the VmHWM it printed itself, within 5% (never below 95%)
    assert 0.95 * hwm <= peak <= 1.05 * hwm, (peak, hwm, run.describe())
    # AND heapscope's own part is said: the destructor or _exit measured it
    line = _summary_line(run)
    assert 0 < own < peak, (own, peak)
    assert "heapscope's own" in line, line


@pytest.mark.parametrize("end", ["", "exit"], ids=["returns", "_exit"])
def test_peak_rss_of_a_grandchild_peak_just_before_its_exit(programs: Programs, record: Recorder, end: str) -> None:
    # GIVEN a target that forks and execs the same program, which makes the 100 MiB peak and
    # returns, or calls _exit (no destructor: the client's _exit notes the figures; a fork
    # child of multiprocessing ends so)
    run = record([programs.path("rsspeak"), "grandchild", *([end] if end else [])], interval=None)
    assert run.returncode == 0, run.describe()
    hwm = _printed_hwm(run)
    profile = run.profile()
    rows = profile.query("SELECT upid, pid FROM process ORDER BY upid")
    assert len(rows) == 2, profile.processes_text()
    parent, child = rows[0]["upid"], rows[1]["upid"]
    # THEN the grandchild's peak is the one it printed (its client's destructor read it) ...
    peak, own = _rss_stats(profile, child)
    assert 0.95 * hwm <= peak <= 1.05 * hwm, (peak, hwm, run.describe())
    assert 0 < own < peak
    # ... and its parent, whose wait4 figure includes the grandchild's, keeps its own small one
    parent_peak, _ = _rss_stats(profile, parent)
    assert 0 < parent_peak < hwm // 4, (parent_peak, hwm)


def test_peak_rss_of_a_program_exec_d_by_a_shell(programs: Programs, record: Recorder) -> None:
    # GIVEN a shell that execs the program in its own process (one pid, two programs, each
    # connected as a process of the profile)
    run = record(["/bin/sh", "-c", f"exec {programs.path('rsspeak')}"], interval=None)
    assert run.returncode == 0, run.describe()
    hwm = _printed_hwm(run)
    profile = run.profile()
    rows = profile.query("SELECT upid, name FROM process ORDER BY upid")
    assert len(rows) == 2 and rows[1]["name"] == "rsspeak", profile.processes_text()
    # THEN the program has its peak, and the shell not the program's: the pid's VmHWM after the
    # exec is the program's (the shell's own was never read: 0, or a few MiB)
    peak, _ = _rss_stats(profile, rows[1]["upid"])
    assert 0.95 * hwm <= peak <= 1.05 * hwm, (peak, hwm, run.describe())
    shell_peak, _ = _rss_stats(profile, rows[0]["upid"])
    assert shell_peak < hwm // 4, (shell_peak, hwm)
    # AND the summary's RSS is the sum of the two
    said = re.search(r"of RSS (\S+) MiB", _summary_line(run))
    assert said and abs(float(said[1]) - (peak + shell_peak) / 2**20) < 0.1, _summary_line(run)


def test_own_rss_covers_the_ring_a_busy_target_filled(programs: Programs, record: Recorder) -> None:
    # GIVEN a target at interval 1 whose records (400k malloc + free pairs, 88 bytes of ring
    # each) fill the default ring several times over
    pairs = 400_000
    assert pairs * 88 > 4 * DEFAULT_SHMEM_SIZE
    run = record([programs.path("rsspeak"), "records", str(pairs)], interval=1, timeout=110)
    assert run.returncode == 0, run.describe()
    profile = run.profile()
    upid = profile.only_upid("rsspeak")
    assert profile.stats(upid)["heap_samples"] >= pairs, profile.describe_process(upid)
    # THEN heapscope's own resident bytes cover the whole ring it wrote through, and are part of
    # the process's peak RSS
    peak, own = _rss_stats(profile, upid)
    assert DEFAULT_SHMEM_SIZE <= own < peak, (own, peak)
    # AND both the summary and the report say it, on the "seen ... of RSS" line
    line = _summary_line(run)
    assert re.search(r"of RSS \S+ \S+ \(heapscope's own \S+ \S+ of it; ", line), line
    report = run_process([*HEAPSCOPE, "report", str(run.db)])
    assert report.returncode == 0, report.describe()
    assert re.search(rb"memory: +seen \S+ \S+ of RSS \S+ \S+ \(heapscope's own \S+ \S+ of it; peaks\)",
                     report.stdout), report.stdout.decode()


def test_no_own_figure_after_sigkill(programs: Programs, record: Recorder) -> None:
    # GIVEN a target that SIGKILLs itself after its peak: no destructor of its client runs
    run = record([programs.path("rsspeak"), "kill"], interval=None)
    assert run.returncode == 128 + 9, run.describe()
    profile = run.profile()
    peak, own = _rss_stats(profile, profile.only_upid("rsspeak"))
    # THEN no own figure, no crash; its peak is still read (by record's wait4: the root)
    assert own == 0
    assert 0.95 * _printed_hwm(run) <= peak, peak
    line = _summary_line(run)
    assert "heapscope's own" not in line, line
