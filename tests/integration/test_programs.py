"""The target programs themselves, unprofiled: they build, state their ground truth,
and run to the documented end. (Their totals were also cross-checked once with
valgrind's "total heap usage", see tests/programs/README.md.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from hs_integration import Programs, build_programs, exit_status, run_process

PROGRAMS = build_programs.available()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_states_consistent_truth(programs: Programs, name: str) -> None:
    truth = programs.truth(name)
    for fn, t in truth.items():
        fields = t.fields()
        if set(fields.values()) == {-1}:
            continue  # a function named without figures (templates.cpp: they follow libstdc++'s growth)
        for view in ("space", "objects"):
            assert fields[view] >= 0, (fn, fields)
        if t.alloc_space >= 0:
            assert t.space <= t.alloc_space and t.objects <= t.alloc_objects, (fn, fields)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["basic", "cxx", "tiny", "sampled", "threads"])
def test_program_runs_unprofiled(programs: Programs, name: str) -> None:
    run = run_process([programs.path(name)])
    assert run.returncode == 0, run.describe()
    assert run.stdout == b""


@pytest.mark.timeout(60)
def test_forking_spawn_phases_run_unprofiled(programs: Programs, tmp_path: Path) -> None:
    run = run_process([programs.path("forking")])
    assert run.returncode == 0 and run.stdout.startswith(b"child exited 0\nparent pid "), run.describe()
    run = run_process([programs.path("spawn"), programs.path("tiny")])
    assert run.returncode == 0, run.describe()
    assert run.stdout.startswith(b"fork+exec exited 0\nposix_spawn exited 0\nparent pid "), run.stdout
    run = run_process([programs.path("phases"), tmp_path / "done"], input=b"go\n")
    assert run.returncode == 0 and run.stdout == b"phase 1 done\ngot: go\nphase 2 done\n", run.describe()
    assert (tmp_path / "done").read_bytes() == b"ok\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("mode", "status"), [("exit3", 3), ("sigterm", 143), ("segv", 139), ("sigkill", 137)])
def test_lifecycle_modes_unprofiled(programs: Programs, mode: str, status: int) -> None:
    run = run_process([programs.path("lifecycle"), mode])
    assert exit_status(run.returncode) == status
    assert run.stdout == f"about to {mode}\n".encode()
