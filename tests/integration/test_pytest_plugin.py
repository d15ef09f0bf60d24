"""The pytest plugin (heapscope/hosts/pytest_plugin.py), run as users run it: pytest on a test file.

The generated test file allocates through a small C library compiled here
(`hs_test_hold(n)`: malloc n bytes and touch them), so the truth is known and
the allocating stack has a name of ours. Each run is a real pytest in a
subprocess, under a timeout, with a JUnit XML report to read the outcomes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from heapscope.hosts.pytest_plugin import standard_error

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
RUN_TIMEOUT_S = 120

LIB_C = r"""
#include <stdlib.h>
#include <string.h>
void *hs_test_hold(size_t n) { void *p = malloc(n); if (p) memset(p, 1, n); return p; }
void hs_test_release(void *p) { free(p); }
"""

HEADER = '''
import ctypes, os, threading
import pytest
lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libhsalloc.so"))
lib.hs_test_hold.restype = ctypes.c_void_p
lib.hs_test_hold.argtypes = [ctypes.c_size_t]
lib.hs_test_release.argtypes = [ctypes.c_void_p]
KEEP = []

def hold(total, size=64 * 1024):
    return [lib.hs_test_hold(size) for _ in range(total // size)]

def release(ps):
    for p in ps:
        lib.hs_test_release(p)
'''

MARKS = HEADER + '''
@pytest.mark.limit_memory("24 MB")
def test_peak_under_limit():
    release(hold(8 * 1024 * 1024))

@pytest.mark.limit_memory("24 MB")
def test_peak_over_limit():
    release(hold(40 * 1024 * 1024))

@pytest.mark.limit_memory("30 MiB")
def test_peak_over_iec_limit():
    a = hold(16 * 1024 * 1024)
    b = hold(16 * 1024 * 1024)
    release(a)
    release(b)

@pytest.mark.limit_leaks("1 MB")
def test_leaks():
    KEEP.extend(hold(8 * 1024 * 1024))

@pytest.mark.limit_leaks("1 MB")
def test_no_leak_after_a_leak():
    release(hold(8 * 1024 * 1024))

def test_unmarked_big():
    release(hold(12 * 1024 * 1024))

@pytest.mark.limit_memory("1 MB")
def test_fails_on_its_own():
    release(hold(4 * 1024 * 1024))
    assert False, "its own failure"
'''

MUST_PASS = {"test_peak_under_limit", "test_no_leak_after_a_leak", "test_unmarked_big"}
MUST_FAIL = {"test_peak_over_limit": 40 * MIB, "test_peak_over_iec_limit": 32 * MIB, "test_leaks": 8 * MIB}


@dataclass
class PytestRun:
    returncode: int
    stdout: str
    stderr: str
    outcomes: dict[str, tuple[str, str]]  # test name -> (passed/failed/error/skipped, message)


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("plugin_suite")
    (d / "alloc.c").write_text(LIB_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-g", "-o", str(d / "libhsalloc.so"), str(d / "alloc.c")],
                   check=True, timeout=60)
    return d


def run_pytest(d: Path, test_file: str, source: str, *args: str, tmpdir: Path | None = None) -> PytestRun:
    (d / test_file).write_text(source)
    xml = d / f"{test_file}.xml"
    xml.unlink(missing_ok=True)
    env = dict(os.environ)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    env.pop("PYTEST_ADDOPTS", None)
    # An editable install's loader module belongs to the distribution of the plugin's entry
    # point: pytest warns that it cannot rewrite it (not so from a wheel).
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(d),
                           "-W", "ignore::pytest.PytestAssertRewriteWarning",
                           f"--junitxml={xml}", test_file, *args],
                          cwd=d, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    outcomes: dict[str, tuple[str, str]] = {}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome, message = child.tag, (child.get("message") or "") + "\n" + (child.text or "")
            outcomes[case.get("name", "")] = (outcome, message)
    return PytestRun(proc.returncode, proc.stdout, proc.stderr, outcomes)


ESTIMATE = re.compile(r"is ([0-9.]+) (B|KiB|MiB|GiB) ± ([0-9.]+) (B|KiB|MiB|GiB)")
SCALE = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def test_marks_pass_and_fail_with_the_stack_and_the_standard_error(suite_dir: Path) -> None:
    # GIVEN tests that allocate known amounts through hs_test_hold, with limits
    run = run_pytest(suite_dir, "test_marks.py", MARKS, "--heapscope")
    # THEN the ones within their limits pass
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the tests run on unmeasured" not in run.stderr, run.stderr
    for name in MUST_PASS:
        assert run.outcomes[name][0] == "passed", (name, run.outcomes[name], run.stderr)
    # AND the ones over fail, naming hs_test_hold's stack and the estimate ± its standard error
    for name, truth in MUST_FAIL.items():
        outcome, message = run.outcomes[name]
        assert outcome == "failure", (name, run.outcomes[name], run.stderr)
        kind = "limit_leaks" if "leak" in name else "limit_memory"
        assert f"heapscope {kind}" in message
        assert "hs_test_hold (libhsalloc.so)" in message, message
        m = ESTIMATE.search(message)
        assert m is not None, message
        est, se = float(m.group(1)) * SCALE[m.group(2)], float(m.group(3)) * SCALE[m.group(4)]
        assert se == pytest.approx(standard_error(4096, int(est)), rel=0.01, abs=100)
        # the estimate is the truth within 4 standard errors (plus 0.1 MB of rounding and interpreter noise)
        assert abs(est - truth) <= 4 * se + 0.1e6, (name, est, truth, se)
    # AND a test that fails on its own reports its own failure, not the limit
    outcome, message = run.outcomes["test_fails_on_its_own"]
    assert outcome == "failure" and "its own failure" in message and "heapscope" not in message


def test_report_after_the_run_ranks_tests_by_peak(suite_dir: Path) -> None:
    # GIVEN every allocation recorded exactly (interval 1)
    run = run_pytest(suite_dir, "test_report.py", MARKS, "--heapscope", "--heapscope-interval", "1",
                     "--heapscope-top", "3")
    assert set(run.outcomes) >= MUST_PASS | set(MUST_FAIL), run.stderr
    # THEN the report follows the run: the three largest peaks, largest first, with hs_test_hold's stack
    report = run.stdout.split("heapscope: largest sampled heap peaks", 1)[1]
    assert "7 tests measured at a sampling interval of 1 bytes" in report
    # (IEC units, as every heapscope figure)
    ranked = re.findall(r"^\s*([0-9.]+) MiB ± [0-9.]+ (?:B|KiB|MiB)\s+(\S+)", report, re.M)
    assert [nodeid.split("::")[1] for _est, nodeid in ranked] == [
        "test_peak_over_limit", "test_peak_over_iec_limit", "test_unmarked_big"]
    peaks = [float(est) * MIB for est, _ in ranked]
    # exact: each is its own allocation above its start, whatever earlier tests still hold
    for peak, truth in zip(peaks, (40 * MIB, 32 * MIB, 12 * MIB), strict=True):
        assert truth <= peak + 0.05 * MIB and peak <= truth + 0.2e6, (peaks, report)
    assert "hs_test_hold (libhsalloc.so)" in report


def test_stacks_are_named_for_the_report_and_for_limits_alike(suite_dir: Path) -> None:
    # GIVEN a report of one test only: the stacks of the others are named only when over a limit
    run = run_pytest(suite_dir, "test_top1.py", MARKS, "--heapscope", "--heapscope-interval", "1",
                     "--heapscope-top", "1")
    report = run.stdout.split("heapscope: largest sampled heap peaks", 1)[1].split("short test summary", 1)[0]
    # THEN the report's one test comes with its stack (named at the report, after the last test)
    tests = [x for x in report.splitlines() if "::test_" in x]
    assert len(tests) == 1 and "::test_peak_over_limit" in tests[0], report
    assert "hs_test_hold (libhsalloc.so)" in report.split(tests[0], 1)[1], report
    # AND every test over a limit, in the report or not, names its stack in its failure
    for name in MUST_FAIL:
        outcome, message = run.outcomes[name]
        assert outcome == "failure" and "hs_test_hold (libhsalloc.so)" in message, (name, message)


def test_windows_are_relative_to_each_test_start(suite_dir: Path) -> None:
    # GIVEN test_leaks keeps 8 MiB, and the next test allocates 8 MiB and frees it (interval 1: exact)
    run = run_pytest(suite_dir, "test_windows.py", MARKS, "--heapscope", "--heapscope-interval", "1",
                     "--heapscope-top", "10")
    report = run.stdout.split("heapscope: largest sampled heap peaks", 1)[1]
    line = next(x for x in report.splitlines() if "::test_no_leak_after_a_leak" in x)
    # THEN its peak is its own 8 MiB, not 16 MiB
    assert re.match(r"\s*8\.[0-1] MiB", line), line
    leak_line = next(x for x in report.splitlines() if "::test_leaks" in x)
    assert "held at its end: 8." in leak_line, leak_line


def test_without_the_option_nothing_changes(suite_dir: Path) -> None:
    # GIVEN the same file without --heapscope
    run = run_pytest(suite_dir, "test_plain.py", MARKS)
    # THEN the marks are inert: only the test that fails on its own fails, and no report
    failed = {name for name, (outcome, _m) in run.outcomes.items() if outcome != "passed"}
    assert failed == {"test_fails_on_its_own"}, run.outcomes
    assert "heapscope" not in run.stdout + run.stderr
    assert run.returncode == 1


CRASH = HEADER + '''
def test_before():
    release(hold(1024 * 1024))

def test_crashes():
    ctypes.string_at(0)  # SIGSEGV

def test_after():
    pass
'''

HANG = HEADER + '''
@pytest.mark.timeout(3, method="signal")
def test_hangs():
    threading.Event().wait()

def test_after_the_hang():
    release(hold(1024 * 1024))
    # a pytest this test would start is no child of the plugin's, and has the usual allocator
    assert "HEAPSCOPE_PYTEST_SOCKET" not in os.environ
    assert "PYTHONMALLOC" not in os.environ
'''


def test_a_crash_is_reported_as_without_the_plugin(suite_dir: Path) -> None:
    # GIVEN a test that dies of SIGSEGV
    plain = run_pytest(suite_dir, "test_crash.py", CRASH)
    run = run_pytest(suite_dir, "test_crash.py", CRASH, "--heapscope")
    # THEN pytest dies of it as it does without the plugin, faulthandler naming the test
    assert plain.returncode == -signal.SIGSEGV, plain.stderr
    assert run.returncode == plain.returncode, run.stderr
    assert "Fatal Python error: Segmentation fault" in run.stderr
    assert "test_crashes" in run.stderr


def test_a_hang_is_reported_as_without_the_plugin(suite_dir: Path) -> None:
    # GIVEN a test that hangs, under pytest-timeout
    run = run_pytest(suite_dir, "test_hang.py", HANG, "--heapscope", "--heapscope-python-objects")
    # THEN it fails on its timeout and the next test runs and is measured
    assert run.outcomes["test_hangs"][0] == "failure", run.outcomes
    assert "Timeout" in run.outcomes["test_hangs"][1]
    assert run.outcomes["test_after_the_hang"][0] == "passed"
    assert "2 tests measured" in run.stdout


def test_bad_limits_and_options_are_one_line(suite_dir: Path) -> None:
    bad = HEADER + '''
@pytest.mark.limit_memory("lots")
def test_bad():
    pass
'''
    run = run_pytest(suite_dir, "test_bad.py", bad, "--heapscope")
    assert "limit_memory: not a size: 'lots'" in run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    run = run_pytest(suite_dir, "test_bad2.py", HEADER, "--heapscope", "--heapscope-interval", "0")
    assert run.returncode == 4 and "--heapscope-interval must be a positive number" in run.stderr, run.stderr


COUNTING_CONFTEST = """
import os

def _note(what):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "counts.txt"), "a") as f:
        f.write(f"{what} {os.getpid()}\\n")

_note("conftest")

def pytest_addoption(parser):
    parser.addoption("--flavour", default="plain")

def pytest_collection(session):
    _note("collection")
"""

COUNTED = """
def test_sees_its_option(request):
    assert request.config.getoption("--flavour") == "mint"
"""


def test_conftest_and_collection_run_once_in_the_tests_process(suite_dir: Path) -> None:
    # GIVEN a conftest.py that notes (with its pid) its import and each collection, and declares an option
    d = suite_dir / "counted"
    d.mkdir(exist_ok=True)
    (d / "conftest.py").write_text(COUNTING_CONFTEST)
    counts = d / "counts.txt"
    counts.unlink(missing_ok=True)
    run = run_pytest(suite_dir, "counted/test_counted.py", COUNTED, "--heapscope", "--flavour", "mint")
    # THEN the test sees the option, and was measured
    assert run.returncode == 0 and run.outcomes == {"test_sees_its_option": ("passed", "")}, run.stdout + run.stderr
    assert "1 tests measured" in run.stdout
    # AND the conftest was imported once and collection ran once, both in one process (the tests')
    notes = [line.split() for line in counts.read_text().splitlines()]
    assert [what for what, _pid in notes] == ["conftest", "collection"], notes
    assert notes[0][1] == notes[1][1]


IN_PROCESS_TESTS = """
def test_holds():
    release(hold(1024 * 1024))

def test_fails():
    assert False
"""

IN_PROCESS = """
import sys
import pytest
args = ["-q", "-p", "no:cacheprovider", "--rootdir", sys.argv[1], "-W", "ignore::pytest.PytestAssertRewriteWarning",
        sys.argv[2], "--heapscope"]
held = list(args)
code = pytest.main(args)
print("exit", int(code), "args kept" if args == held else f"args now {args}")
"""


def test_pytest_main_in_process_returns_the_status_and_keeps_its_arguments(suite_dir: Path) -> None:
    # GIVEN pytest.main(args) called from a program, with --heapscope, on tests of which one fails
    (suite_dir / "test_in_process.py").write_text(HEADER + IN_PROCESS_TESTS)
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-c", IN_PROCESS, str(suite_dir), "test_in_process.py"], cwd=suite_dir,
                          env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    # THEN it returns the tests' status (1), the tests were measured, and the caller's list is as it gave it
    assert "exit 1 args kept" in proc.stdout, proc.stdout + proc.stderr
    assert "2 tests measured" in proc.stdout, proc.stdout


def test_kept_profile_holds_the_process_peak_over_all_tests(suite_dir: Path, tmp_path: Path) -> None:
    # GIVEN the run's profile kept; the largest test holds 40 MiB at once, later tests less
    from heapscope.store.reader import open_profile

    out = tmp_path / "run.db"
    run = run_pytest(suite_dir, "test_kept.py", MARKS, "--heapscope", "--heapscope-output", str(out))
    assert f"the run's profile is in {out}" in run.stderr
    # THEN its peak table is the process's peak over every test's window, not the last window's
    with open_profile(out) as prof:
        db = prof.sql_connection()
        peaks = [size for (size,) in db.execute(
            "select sum(size) from heapscope_peak_allocation group by upid")]
        held = db.execute("select sum(size) from heapscope_peak_allocation a join stack_profile_callsite c "
                          "on a.callsite_id = c.id join stack_profile_frame f on c.frame_id = f.id "
                          "where f.name = 'hs_test_hold'").fetchone()[0]
    assert max(peaks) >= 40 * MIB, peaks
    # hs_test_hold's share of it: test_peak_over_limit's 40 MiB (test_leaks keeps 8 MiB only later,
    # and what it holds with later tests stays below 40 MiB)
    se = standard_error(4096, 40 * MIB)
    assert 40 * MIB - 4 * se <= held <= 40 * MIB + 4 * se, held


API_TARGET = '''
import ctypes, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
keep = [libc.malloc(1 << 20) for _ in range(8)]
sys.exit(3)
'''


def test_api_records_a_command_and_keeps_its_status(tmp_path: Path) -> None:
    from heapscope import api

    out = tmp_path / "api.db"
    with api.recording([sys.executable, "-c", API_TARGET], out, symbolize=False) as rec:
        assert rec.pid > 0
    assert rec.exit_status == 3
    s = rec.summary
    assert s.processes == 1 and s.exit_status == 3 and out.is_file()
    # 8 MiB of malloc(1 MiB): each at least the interval, so recorded at its real size
    assert s.sampled_bytes >= 8 * MIB
    assert api.record([sys.executable, "-c", "pass"], tmp_path / "b.db", symbolize=False).exit_status == 0


def test_api_refuses_a_missing_command(tmp_path: Path) -> None:
    from heapscope import api
    from heapscope.errors import TargetError

    with pytest.raises(TargetError, match="cannot run"), api.recording([str(tmp_path / "nope")], tmp_path / "c.db"):
        pass


def test_the_board_keeps_the_largest_peaks_and_their_ties() -> None:
    # GIVEN the parent's board of the tests with the largest peaks (top 3, ties kept), fed as
    # _window feeds it: a test joins when _ranks says so, then the board is pruned
    import random

    from heapscope.hosts.pytest_plugin import _Parent

    for seed in range(20):
        rng = random.Random(seed)
        parent = _Parent(None, None, 4096, 3, False)  # type: ignore[arg-type]  # no recording needed here
        seen: list[int] = []
        for i in range(300):
            peak = rng.choice((0, 4096, 8192, 12288)) * rng.randrange(1, 4) + rng.randrange(2) * rng.randrange(10**6)
            seen.append(peak)
            if parent._ranks(peak):
                parent.board[f"t{i}"] = (peak, [])
                parent._prune_board()
            # THEN it holds exactly the tests whose peak (> 0) is at least the third largest so far
            third = sorted((p for p in seen if p > 0), reverse=True)[2:3]
            want = sorted(p for p in seen if p > 0 and (not third or p >= third[0]))
            assert sorted(v[0] for v in parent.board.values()) == want, (seed, i)


def test_a_parent_that_does_not_answer_is_waited_for_a_bounded_time(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the child's side of the plugin connected to a parent that never answers
    import socket
    import time

    import heapscope.hosts.pytest_plugin as hp

    monkeypatch.setattr(hp, "ASK_TIMEOUT_S", 0.3)
    path = str(tmp_path / "control.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)

        class Config:  # what _Child reads of pytest's Config
            option = type("Options", (), {"heapscope_interval": "4096"})()

            def getoption(self, _name: str) -> int:
                return 5

        child = hp._Child(Config(), path)  # type: ignore[arg-type]
        conn, _ = server.accept()
        with conn:
            # WHEN it asks before a test
            t0 = time.monotonic()
            reply = child._ask(hp.START)
            waited = time.monotonic() - t0
    # THEN the kernel's bound on the wait (SO_RCVTIMEO) ends it: no answer, and it asks no more
    assert reply is None and 0.25 <= waited < 10
    assert child.off.startswith("no answer from the recording") and child.sock is None
    assert child._ask(hp.START) is None


def test_a_recording_that_keeps_no_profile_writes_nothing_and_still_counts(tmp_path: Path) -> None:
    # GIVEN a Recording told to keep no profile (the plugin without --heapscope-output)
    from heapscope.errors import HeapscopeError
    from heapscope.producer.config import RecordConfig
    from heapscope.session import Recording, RecordingOptions

    out = tmp_path / "never.db"
    with Recording(RecordConfig(interval=4096), out, RecordingOptions(symbolize=False, keep=False)) as rec:
        rec.start([sys.executable, "-c", API_TARGET])
        with pytest.raises(HeapscopeError, match="keeps no profile"):  # a scrape: nothing to serve
            rec.fresh_dump()
        code = rec.run_until_exit()
    # THEN the command ran as ever, no file was made, no stack was resolved, and the
    # trackers' figures are all there (8 MiB of malloc(1 MiB): recorded at their real size)
    assert code == 3
    assert not out.exists() and not list(tmp_path.iterdir())
    assert rec.producer is not None and not rec.producer.trie.take_new_flat()
    s = rec.summary
    assert s.processes == 1 and s.samples > 0
    assert s.sampled_bytes >= 8 * MIB and s.peak_heap >= 8 * MIB


PARENT_KILLED = HEADER + '''
import signal

def test_first():
    release(hold(1024 * 1024))

def test_kills_the_recording():
    os.kill(os.getppid(), signal.SIGKILL)

def test_after():
    release(hold(1024 * 1024))

def test_after_too():
    pass
'''


def test_tests_run_on_when_the_recording_dies(suite_dir: Path, tmp_path: Path) -> None:
    from heapscope.producer.session import remove_stale_dirs

    # GIVEN the parent that holds the recording is killed in the middle of the run
    temp = tmp_path / "temp"
    temp.mkdir(mode=0o700)
    run = run_pytest(suite_dir, "test_parent_killed.py", PARENT_KILLED, "--heapscope", tmpdir=temp)
    # THEN (the child writes the JUnit report) every test ran and passed, and it said so once
    assert run.returncode == -signal.SIGKILL
    assert {name: o for name, (o, _m) in run.outcomes.items()} == {
        "test_first": "passed", "test_kills_the_recording": "passed", "test_after": "passed",
        "test_after_too": "passed"}, run.stderr
    assert run.stderr.count("the tests run on unmeasured") == 1, run.stderr
    # AND what the killed parent left in the temp dir, the next run's clean-up removes
    left = sorted(p.name for p in temp.iterdir())
    assert left and all(name.startswith("heapscope-") for name in left), left
    remove_stale_dirs(str(temp))
    assert not list(temp.iterdir()), left


def test_python_frames_first_allocator_frames_left_out() -> None:
    from heapscope.hosts.pytest_plugin import _is_runner, _Named, is_python_frame, order_frames

    stack = [_Named("malloc", "libc.so.6", False), _Named("hs_test_hold", "libx.so", False),
             _Named("build_index (app.py:12)", "", True), _Named("_PyEval_EvalFrameDefault", "libpython", False),
             _Named("main (app.py:30)", "", True), _Named("hook", "libheapscope.so", False)]
    assert [f.name for f in order_frames(stack)] == [
        "build_index (app.py:12)", "main (app.py:30)", "hs_test_hold", "_PyEval_EvalFrameDefault"]
    assert is_python_frame("build_index", "/src/app.py") and is_python_frame("f", "[python]")
    assert not is_python_frame("malloc", "/usr/lib/x86_64-linux-gnu/libc.so.6")
    # the runner's own frames are on every test's stack: left out
    runner = _Named("pytest_pyfunc_call (python.py:159)", "python.py", True, True)
    assert [f.name for f in order_frames([stack[1], stack[2], runner])] == ["build_index (app.py:12)", "hs_test_hold"]
    # `python -m pytest` starts through runpy (frozen since 3.11) and pytest's __main__
    assert is_python_frame("_run_code", "<frozen runpy>")
    for path in ("<frozen runpy>", "/usr/lib/python3.10/runpy.py", "/venv/site-packages/pytest/__main__.py",
                 "/venv/site-packages/_pytest/python.py", "/venv/site-packages/pluggy/_callers.py"):
        assert _is_runner(path), path
    for path in ("/src/app/__main__.py", "/src/tests/test_runpy.py", "/src/pytest_helpers/x.py"):
        assert not _is_runner(path), path


PYTHON_OBJECTS = """
import pytest

@pytest.mark.limit_memory("8 MB")
def test_small_objects():
    # 200,000 tuples of two ints: each well under pymalloc's 512-byte limit
    keep = [(i + 1000, i + 2000) for i in range(200_000)]
    assert len(keep) == 200_000
"""


def test_small_python_objects_are_seen(suite_dir: Path) -> None:
    # GIVEN a test holding ~200k small tuples at once (56 B each + two 28 B ints: ~22 MB with the list)
    # WHEN run with --heapscope-python-objects (PYTHONMALLOC=malloc in the child)
    run = run_pytest(suite_dir, "test_pyobj.py", PYTHON_OBJECTS, "--heapscope", "--heapscope-python-objects")
    # THEN its peak is seen and passes the limit
    outcome, message = run.outcomes["test_small_objects"]
    assert outcome == "failure", (run.outcomes, run.stderr)
    m = ESTIMATE.search(message)
    assert m is not None and float(m.group(1)) * SCALE[m.group(2)] > 15e6, message
    # AND by default too: the client samples CPython's own allocator (pymalloc), so the
    # objects it serves from its arenas are seen without PYTHONMALLOC=malloc
    run = run_pytest(suite_dir, "test_pyobj.py", PYTHON_OBJECTS, "--heapscope")
    outcome, message = run.outcomes["test_small_objects"]
    assert outcome == "failure", (run.outcomes, run.stderr)
    m = ESTIMATE.search(message)
    assert m is not None and float(m.group(1)) * SCALE[m.group(2)] > 15e6, message
    # AND its top stacks name the test's Python frames, leaf first (spliced from stacks that
    # the recording held by id: no profile is kept)
    # (3.12+ inlines the comprehension: no frame of its own); the runner's frames (pytest's
    # __main__, runpy's) are left out
    top = message.split("top allocating stacks (leaf first):", 1)[1].splitlines()[1]
    # each Python frame with its line (test_pyobj.py:N)
    assert re.match(r"\s*[0-9.]+ (?:B|KiB|MiB|GiB)  "
                    r"(test_small_objects\.<locals>\.<listcomp> \(test_pyobj\.py:\d+\) < )?"
                    r"test_small_objects \(test_pyobj\.py:\d+\) < [^<(]+ \(libpython", top), message
    assert "__main__" not in message and "runpy" not in message, message
    # AND the native frames shown are those the test's code called, not the interpreter's
    # outer ones (a list's resize showed `< libc.so.6+0x27249 < __libc_start_main`)
    assert "__libc_start_main" not in message and "Py_BytesMain" not in message, message
