"""`heapscope record` as a command: exit status and I/O pass through; bad input is
refused with one `heapscope:` line before the target starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs, Recorder, Run, exit_status, run_process


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("mode", "status"), [("exit3", 3), ("sigterm", 143)])
def test_exit_status_is_the_targets(programs: Programs, record: Recorder, mode: str, status: int) -> None:
    target = programs.path("lifecycle")
    plain = run_process([target, mode])
    assert exit_status(plain.returncode) == status  # the program itself
    rec = record([target, mode], interval=1)
    assert rec.returncode == status, rec.describe()
    assert rec.stdout == plain.stdout


@pytest.mark.timeout(60)
def test_stdin_stdout_stderr_pass_through_unchanged(programs: Programs, record: Recorder) -> None:
    target = programs.path("lifecycle")
    stdin = b"line A\nline B \x00\xfe\xff\n" * 1000 + b"no newline at the end"
    plain = run_process([target, "io"], input=stdin)
    assert plain.returncode == 0
    rec = record([target, "io"], interval=1, input=stdin)
    assert rec.returncode == 0, rec.describe()
    assert rec.stdout == plain.stdout, "stdout differs from an unprofiled run"
    assert plain.stderr in rec.stderr, (
        f"the target's stderr {plain.stderr!r} is not found intact in record's stderr {rec.stderr!r}"
    )


def _marker_cmd(marker: Path) -> list[str]:
    return ["/bin/sh", "-c", 'echo started > "$1"', "sh", str(marker)]


def _assert_refused(run: Run, marker: Path | None) -> None:
    err = run.stderr.decode(errors="replace")
    assert run.returncode != 0, run.describe()
    assert "Traceback" not in err, run.describe()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("heapscope:"), (
        f"expected one line starting with 'heapscope:', got:\n{err}"
    )
    if marker is not None:
        assert not marker.exists(), "the target was started although the command was refused"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("interval", ["0", "-5", "abc"])
def test_bad_interval_is_refused_before_start(tmp_path: Path, interval: str) -> None:
    marker = tmp_path / "marker"
    run = run_process(
        [*HEAPSCOPE, "record", "-o", str(tmp_path / "p.db"), "-i", interval, "--", *_marker_cmd(marker)]
    )
    _assert_refused(run, marker)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [[], ["--"]], ids=["no-args", "empty-after-dashes"])
def test_no_command_is_refused(tmp_path: Path, argv: list[str]) -> None:
    run = run_process([*HEAPSCOPE, "record", "-o", str(tmp_path / "p.db"), *argv])
    _assert_refused(run, None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cmd", ["/nonexistent/heapscope-test-cmd", "heapscope-test-no-such-command"])
def test_command_not_found(tmp_path: Path, cmd: str) -> None:
    run = run_process([*HEAPSCOPE, "record", "-o", str(tmp_path / "p.db"), "--", cmd])
    _assert_refused(run, None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["proc", "missing-dir"])
def test_unwritable_output_is_refused_before_start(tmp_path: Path, where: str) -> None:
    out = "/proc/heapscope-test.db" if where == "proc" else str(tmp_path / "missing" / "p.db")
    marker = tmp_path / "marker"
    run = run_process([*HEAPSCOPE, "record", "-o", out, "--", *_marker_cmd(marker)])
    _assert_refused(run, marker)


# --- sql: Ctrl-C, table-valued pragmas ------------------------------------------------------------

_ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timeout(120)
def test_sql_obeys_ctrl_c_during_a_long_query(programs: Programs, record: Recorder) -> None:
    import signal
    import subprocess

    rec = record([programs.path("tiny")])
    assert rec.returncode == 0, rec.describe()
    # GIVEN `heapscope sql` running a query that never ends
    proc = subprocess.Popen([*HEAPSCOPE, "sql", str(rec.db), _ENDLESS], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # (deep in the query: more CPU spent than start-up takes, watched, never slept on)
        while _cpu_seconds(proc.pid) < 1.5:
            try:
                proc.wait(timeout=0.05)
                pytest.fail(f"sql ended by itself: {proc.communicate()}")
            except subprocess.TimeoutExpired:
                pass
        # WHEN it gets SIGINT (Ctrl-C)
        proc.send_signal(signal.SIGINT)
        # THEN it stops the query and exits as Ctrl-C exits: 130, no traceback
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert b"Traceback" not in err and out == b"", err


@pytest.mark.timeout(60)
def test_sql_table_valued_pragmas(programs: Programs, record: Recorder) -> None:
    rec = record([programs.path("tiny")])
    assert rec.returncode == 0, rec.describe()
    # GIVEN a profile; WHEN read-only pragmas are used as table-valued functions THEN they answer
    for query, expect in (("SELECT name FROM pragma_table_info('process') WHERE cid = 0", b"upid"),
                          ("SELECT COUNT(*) > 5 FROM pragma_table_list", b"1"),
                          ("SELECT * FROM pragma_index_list('heap_profile')", b"row"),
                          ("SELECT user_version FROM pragma_user_version", b"0")):
        r = run_process([*HEAPSCOPE, "sql", str(rec.db), query], timeout=30)
        assert r.returncode == 0 and expect in r.stdout, r.describe()
    # AND one that is not read-only is refused in one line that says which ones are
    for query in ("SELECT * FROM pragma_cache_size", "PRAGMA cache_size = 10"):
        r = run_process([*HEAPSCOPE, "sql", str(rec.db), query], timeout=30)
        err = r.stderr.decode()
        assert r.returncode != 0 and err.count("\n") == 1, r.describe()
        assert "read-only" in err and "pragma_table_info(" in err and "SELECT is not allowed" not in err, err
