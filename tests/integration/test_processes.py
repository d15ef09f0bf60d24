"""Targets that fork, exec, spawn, crash or kill themselves: no hang, right numbers."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Profile, Programs, Recorder, assert_exact, exit_status, kill_group


@pytest.mark.timeout(120)
def test_fork_in_multithreaded_target(programs: Programs, record: Recorder) -> None:
    """fork() while another thread is in malloc; the child allocates and _exits."""
    rec = record([programs.path("forking")], interval=1)
    assert rec.returncode == 0, rec.describe()
    m = re.fullmatch(rb"child exited 0\nparent pid (\d+) child pid (\d+)\n", rec.stdout)
    assert m, f"unexpected stdout {rec.stdout!r}\n{rec.describe()}"
    parent_pid, child_pid = int(m[1]), int(m[2])

    profile = rec.profile()
    truth = programs.truth("forking")
    parent = profile.upid_of_pid(parent_pid)
    assert parent is not None, f"no process with pid {parent_pid}: {profile.processes_text()}"
    parent_paths = [fn for fn in truth if fn != "child_alloc"]
    assert_exact(profile, parent, truth, parent_paths, context=rec.describe())
    leaked = profile.views_of(parent, "child_alloc")
    assert leaked.alloc_objects == 0, f"the child's allocations were booked to the parent: {leaked}"

    # A forked child may or may not be profiled (heapprofd stops profiling in fork
    # children); if it has rows, they must be right.
    child = profile.upid_of_pid(child_pid)
    if child is not None and profile.callsite_views(child):
        assert_exact(profile, child, truth, ["child_alloc"], context="forked child")


@pytest.mark.timeout(120)
def test_fork_exec_and_posix_spawn_children_are_own_processes(programs: Programs, record: Recorder) -> None:
    tiny = programs.path("tiny")
    rec = record([programs.path("spawn"), tiny], interval=1)
    assert rec.returncode == 0, rec.describe()
    m = re.fullmatch(rb"fork\+exec exited 0\nposix_spawn exited 0\nparent pid (\d+)\n", rec.stdout)
    assert m, f"unexpected stdout {rec.stdout!r}\n{rec.describe()}"

    profile = rec.profile()
    spawn_upid = profile.upid_of_pid(int(m[1]))
    assert spawn_upid is not None, f"no process with pid {m[1]!r}: {profile.processes_text()}"
    # after_spawn runs after posix_spawn (clone with CLONE_VM|CLONE_VFORK): the
    # parent's profile must survive it.
    assert_exact(profile, spawn_upid, programs.truth("spawn"), context=rec.describe())

    tiny_upids = profile.upids_named("tiny")
    assert len(tiny_upids) == 2, f"expected two exec'd tiny processes: {profile.processes_text()}"
    tiny_truth = programs.truth("tiny")
    for upid in tiny_upids:
        assert upid != spawn_upid
        assert_exact(profile, upid, tiny_truth, context=f"exec'd child upid {upid}")
    for fn in tiny_truth:
        assert profile.views_of(spawn_upid, fn).alloc_objects == 0, f"{fn} booked to the parent"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("mode", "status"), [("segv", 139), ("sigkill", 137)])
def test_target_dying_of_a_signal_keeps_its_profile(programs: Programs, record: Recorder, mode: str,
                                                    status: int) -> None:
    rec = record([programs.path("lifecycle"), mode], interval=1)
    assert exit_status(rec.returncode) == status, rec.describe()
    assert rec.stdout == f"about to {mode}\n".encode()
    profile = rec.profile()
    upid = profile.only_upid("lifecycle")
    assert_exact(profile, upid, programs.truth("lifecycle"), context=rec.describe())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["target", "child"])
@pytest.mark.parametrize("mode", ["heldsock", "heldkill"])
def test_a_process_that_exits_is_ended_as_exited_while_its_socket_lives_on(programs: Programs, tmp_path: Path,
                                                                          how: str, mode: str) -> None:
    # GIVEN a program that _exits or is killed, leaving a child made by the fork system call (no
    # atfork handler: the child holds heapscope's socket, so the program's EOF never comes while it
    # lives), run as the target or by a shell that exits right after it
    db = tmp_path / "held.db"
    program = [str(programs.path("lifecycle")), mode]
    target = program if how == "target" else ["/bin/sh", "-c", f"{shlex.join(program)}; true"]
    proc = subprocess.Popen([*HEAPSCOPE, "record", "-i", "1", "-o", str(db), "--", *target], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        out, err = proc.stdout.read(), proc.stderr.read()  # the child's are /dev/null
        # WHEN record ends, the child still waiting on its stdin
        assert exit_status(proc.wait(timeout=60)) == (137 if (mode, how) == ("heldkill", "target") else 0), err.decode()
        assert out == f"about to {mode}\n".encode()
        # THEN the program's final dump is its exit, with every block it kept, not the session's end
        profile = Profile(db)
        upid = profile.only_upid("lifecycle")
        assert [r["reason"] for r in profile.query("SELECT reason FROM heap_profile WHERE upid = ?", (upid,))] == \
            ["exit"], err.decode()
        assert_exact(profile, upid, programs.truth("lifecycle"), context=err.decode())
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the child's EOF: it _exits
        kill_group(proc)


# --- how processes are named (store/labels.py) ----------------------------------------------------


def _report_text(db: Path, *args: str) -> str:
    from hs_integration import HEAPSCOPE, run_process

    run = run_process([*HEAPSCOPE, "report", str(db), *args], timeout=60)
    assert run.returncode == 0, run.describe()
    return run.stdout.decode()


def test_a_program_run_through_a_link_is_named_as_run_and_its_empty_argument_kept(programs: Programs, record: Recorder,
                                                                                  tmp_path: Path) -> None:
    # GIVEN tiny run as `tiny-link --save '' 'a b'`, tiny-link a symlink to it (redis-server is one
    # to redis-check-rdb)
    link = tmp_path / "tiny-link"
    link.symlink_to(programs.path("tiny"))
    rec = record([link, "--save", "", "a b"])
    assert rec.returncode == 0, rec.describe()
    # THEN the process is named as it was run, its executable kept, and its command line reads
    # back as a shell would take it: the empty argument and the blank in one are there
    [row] = rec.profile().query("SELECT name, cmdline FROM process")
    assert row["name"] == "tiny-link", row
    assert row["cmdline"] == f"{link} --save '' 'a b'", row
    out = _report_text(rec.db)
    assert re.search(r"^pid \d+  tiny-link  \(upid", out, re.M), out
    assert "--save '' 'a b'" in out, out
    assert "tiny-link (pid " in rec.stderr.decode(), rec.describe()  # record's summary names it so too


def test_a_program_run_by_its_own_path_keeps_its_name(programs: Programs, record: Recorder) -> None:
    rec = record([programs.path("tiny")])
    assert rec.returncode == 0, rec.describe()
    [row] = rec.profile().query("SELECT name FROM process")
    assert row["name"] == "tiny"


@pytest.mark.timeout(180)
def test_a_compilers_rows_name_the_file_it_compiled(record: Recorder, tmp_path: Path) -> None:
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("needs cc")
    # GIVEN a build of two C files, as make runs it: cc runs cc1 and as for each
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.c").write_text(f"int {name}(int x) {{ return x * 2; }}\n")
    script = tmp_path / "build.sh"
    script.write_text(f"#!/bin/sh\ncd {tmp_path}\ncc -c alpha.c -o alpha.o\ncc -c beta.c -o beta.o\n")
    script.chmod(0o755)
    rec = record([script], interval=None)
    assert rec.returncode == 0, rec.describe()
    # WHEN report lists every process
    out = _report_text(rec.db, "--all-processes")
    table = out[:out.index("\n\n")]
    # THEN each compiler row names its file beside the compiler, not only `cc1`
    assert re.search(r"cc1 alpha\.c$", table, re.M) and re.search(r"cc1 beta\.c$", table, re.M), table
    assert re.search(r"\bas\b.* -o alpha\.o$", table, re.M), table
