"""The client never hangs or crashes its target.

Each scenario runs a reproducer of tests/fault/programs/ (client_*.c) once on
its own and once under `heapscope record`, and checks that stdout and the
exit status are the same, that nothing hangs (every run has a timeout), and
what the profile holds: exact figures at -i 1 for the program's known
allocations, or the reason the client gave when it had to stop.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from hs_integration import (
    HEAPSCOPE,
    Profile,
    Recorder,
    Recording,
    Run,
    Views,
    exit_status,
    kill_group,
    run_process,
)

PROGRAMS = Path(__file__).resolve().parent / "programs"
CACHE = Path(__file__).resolve().parents[1] / "programs" / "bin" / "fault"
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")

# How the reproducers are built: -O0 and frame pointers keep every named
# function in its own frame, whatever the unwinder.
PLAIN = ("-O0", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-Wall", "-pthread")
# No unwind tables: libunwind's DWARF steps fail on these frames, and it falls
# back on the frame chain, which it validates through its pipe.
NO_UNWIND_TABLES = (*PLAIN, "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
# Code without frame pointers, where %rbp holds anything.
NO_FRAME_POINTER = ("-O2", "-g", "-fomit-frame-pointer", "-Wall")


def build(source: str, flags: Sequence[str], *, shared: bool = False, libs: Sequence[str] = ()) -> Path:
    """Compile tests/fault/programs/SOURCE once per content and flags (cached)."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler: the package cannot have been built either")
    src = PROGRAMS / source
    key = hashlib.sha256(src.read_bytes() + "\0".join([*flags, *libs, str(shared)]).encode()).hexdigest()[:16]
    stem = Path(source).stem
    out = CACHE / key / (f"lib{stem}.so" if shared else stem)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    argv = [cc, *flags, *(("-shared", "-fPIC") if shared else ()), "-o", str(tmp), str(src), *libs]
    subprocess.run(argv, check=True, timeout=120)
    tmp.rename(out)
    return out


def plain_run(argv: Sequence[str | Path], env: dict[str, str] | None = None) -> Run:
    return run_process([str(a) for a in argv], timeout=60, env=env)


def assert_same_behaviour(plain: Run, rec: Run) -> None:
    assert rec.stdout == plain.stdout, rec.describe()
    assert exit_status(rec.returncode) == exit_status(plain.returncode), rec.describe()


def views_everywhere(profile: Profile, function: str) -> Views:
    """A function's views summed over every process of the profile."""
    total = [0, 0, 0, 0]
    for row in profile.processes():
        v = profile.views_of(row["upid"], function)
        for i, x in enumerate((v.alloc_space, v.alloc_objects, v.space, v.objects)):
            total[i] += x
    return Views(*total)


def client_errors(profile: Profile) -> set[str]:
    errors = set()
    for r in profile.processes():
        row = profile.heapscope_process(r["upid"])
        assert row is not None, f"no heapscope_process row for upid {r['upid']}"
        errors.add(str(row["client_error"] or ""))
    return errors


def check_exact(rec: Recording, truth: dict[str, Views]) -> None:
    profile = rec.profile()
    try:
        for fn, want in truth.items():
            got = views_everywhere(profile, fn)
            assert got == want, (
                f"{fn}: expected {want}, got {got}\n{rec.describe()}\n"
                + "\n".join(profile.describe_process(r["upid"]) for r in profile.processes())
            )
        assert client_errors(profile) <= {""}, rec.describe()
    finally:
        profile.close()


# --- descriptors: close loops, closefrom, dup2 ------------------------------------

FDS_TRUTH = {
    "fds_before": Views(204950, 100, 0, 0),
    "fds_after": Views(219900, 200, 58725, 50),
    "fds_late": Views(12800000, 200000, 0, 0),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unwinder", ["auto", "libunwind", "fp"])
@pytest.mark.parametrize("kind", ["socket", "pipe", "file"])
@pytest.mark.parametrize("how", ["loop", "closefrom", "dup2"])
def test_program_closes_and_reuses_descriptors(record: Recorder, how: str, kind: str, unwinder: str) -> None:
    """Daemons: the client's descriptors go, the program's own take their
    numbers. Before the fix libunwind read() its pipe, by then the program's
    blocking socket, and hung; wrote stack bytes into the program's file; or
    died of SIGPIPE writing to the program's pipe."""
    exe = build("client_fds.c", NO_UNWIND_TABLES)
    plain = plain_run([exe, how, kind])
    assert plain.returncode == 0, plain.describe()
    rec = record([exe, how, kind], extra=["--unwinder", unwinder], timeout=60)
    assert_same_behaviour(plain, rec)
    check_exact(rec, FDS_TRUTH)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["closefrom", "dup2"])
def test_unpinned_socket_lost_never_hangs(tmp_path: Path, how: str) -> None:
    """Where the socket cannot be pinned (no io_uring), the program's closing
    it ends the connection: the client must then never take the program's
    socket in its slot for the producer (before the fix, the full ring's
    wait peeked at it, found it alive, and waited forever), and the producer,
    seeing the socket's EOF, took it for the exit and lost every later sample."""
    exe = build("client_fds.c", NO_UNWIND_TABLES)
    plain = plain_run([exe, how, "socket"])
    db = tmp_path / "unpinned.db"
    argv = [*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--block-client", "--", str(exe), how, "socket"]
    run = run_process(argv, timeout=120, env=dict(os.environ, HEAPSCOPE_PIN_SOCKET="0"))
    rec = Recording(run.argv, run.returncode, run.stdout, run.stderr, db)
    assert_same_behaviour(plain, rec)
    # The producer reads the ring of a process that closed its socket until the
    # process exits (a pidfd tells it when): nothing after the close is lost.
    check_exact(rec, FDS_TRUTH)


@pytest.mark.timeout(300)
def test_socket_survives_a_close_loop_below_a_raised_hard_limit(record: Recorder, tmp_path: Path) -> None:
    """With room above the soft limit the client's socket sits there, out of
    reach of a loop up to sysconf(_SC_OPEN_MAX): the process stays connected
    and nothing is lost."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"hard RLIMIT_NOFILE {hard} leaves no room above a soft limit of 1024")
    exe = build("client_fds.c", NO_UNWIND_TABLES)
    script = tmp_path / "low-soft-limit.sh"
    # The profiled program runs under a soft limit of 1024, below the hard one.
    script.write_text(f'#!/bin/sh\nulimit -Sn 1024\nexec "{exe}" loop socket\n')
    script.chmod(0o755)
    plain = plain_run([script])
    rec = record([script], timeout=60)
    assert_same_behaviour(plain, rec)
    check_exact(rec, FDS_TRUTH)


@pytest.mark.timeout(300)
def test_socket_number_stays_low_under_a_large_limit(record: Recorder, tmp_path: Path) -> None:
    """Under a large soft limit the socket went to 7/8 of it, and every process of a tree
    allocated and copied a descriptor table that size (8 MiB under a container's 2^20): it
    now goes no higher than 1000 there, and the process stays connected."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with open("/proc/sys/fs/nr_open") as f:
        soft = min(int(f.read()), 1 << 20) if hard == resource.RLIM_INFINITY else hard
    if soft < 2000:
        pytest.skip(f"hard RLIMIT_NOFILE {hard}: no soft limit large enough to tell")
    script = tmp_path / "large-limit.sh"
    # The soft limit raised to the hard one; ls, under the client, lists its own descriptors.
    script.write_text(f"#!/bin/sh\nulimit -Sn {soft} || exit 99\nexec ls -l /proc/self/fd/\n")
    script.chmod(0o755)
    rec = record([script], timeout=60)
    assert rec.returncode == 0, rec.describe()
    sockets = [int(line.split()[-3]) for line in rec.stdout.decode().splitlines() if "socket:[" in line]
    assert sockets and max(sockets) <= 1000, rec.stdout.decode()


# --- frame-pointer walks through code without frame pointers ------------------------


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unwinder", ["fp", "none", "auto", "libunwind"])
@pytest.mark.parametrize("mode", ["rbp16", "rbp8", "signal", "altstack"])
def test_frame_pointer_walk_survives_garbage_rbp(record: Recorder, mode: str, unwinder: str) -> None:
    """%rbp = -16 / -8 (alignment masks in code built without frame pointers),
    also as saved by a signal frame: the walk's bound check wrapped and the
    target died of SIGSEGV."""
    exe = build("client_fp.c", NO_FRAME_POINTER)
    plain = plain_run([exe, mode])
    assert plain.returncode == 0, plain.describe()
    rec = record([exe, mode], extra=["--unwinder", unwinder], timeout=60)
    assert_same_behaviour(plain, rec)
    leaf = "bad_rbp_alloc" if mode.startswith("rbp") else "on_signal"
    check_exact(rec, {leaf: Views(300 * 4321, 300, 0, 0)})


# --- the life of a process: fork, exec, threads, exit, death -------------------------


def life() -> Path:
    return build("client_life.c", PLAIN, libs=("-ldl",))


LIFE_TRUTH: dict[str, dict[str, Views]] = {
    "fork": {"life_parent": Views(250000, 50, 0, 0)},
    "vfork": {"life_exec_child": Views(120000, 20, 0, 0)},
    "spawn": {"life_exec_child": Views(120000, 20, 0, 0)},
    "threads": {"life_thread_alloc": Views(2700000, 3000, 0, 0)},
    "atexit": {"life_atexit": Views(11000, 10, 11000, 10), "life_dtor": Views(12000, 10, 12000, 10)},
    "oom": {},
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unwinder", ["auto", "fp"])
@pytest.mark.parametrize("mode", sorted(LIFE_TRUTH))
def test_process_life(record: Recorder, mode: str, unwinder: str) -> None:
    """fp: every new thread finds its own stack bounds on its first sample."""
    exe = life()
    plain = plain_run([exe, mode])
    assert plain.returncode == 0, plain.describe()
    rec = record([exe, mode], extra=["--unwinder", unwinder], timeout=120)
    assert_same_behaviour(plain, rec)
    check_exact(rec, LIFE_TRUTH[mode])


@pytest.mark.timeout(300)
def test_signal_handler_allocates_while_target_is_in_malloc(record: Recorder) -> None:
    """A handler that mallocs and frees, 300 times. Half the signals interrupt
    a loop of malloc/free (and so often the client itself, under its guard:
    those allocations pass through unsampled, as the client's own do); the
    other half interrupt a spin outside malloc, so are always sampled. Nothing
    deadlocks or crashes; every sampled handler allocation is 770 bytes and
    its free is seen. (CI once had all 300 land inside the client when the
    test relied on luck for the lower bound.)"""
    exe = life()
    plain = plain_run([exe, "sigmalloc"])
    assert plain.returncode == 0, plain.describe()
    rec = record([exe, "sigmalloc"], timeout=120)
    assert_same_behaviour(plain, rec)
    profile = rec.profile()
    try:
        got = views_everywhere(profile, "on_usr2")
        assert 150 <= got.alloc_objects <= 300, rec.describe()
        assert got == Views(770 * got.alloc_objects, got.alloc_objects, 0, 0), rec.describe()
    finally:
        profile.close()


@pytest.mark.timeout(300)
def test_exec_chain(record: Recorder) -> None:
    """A program exec'ing itself: each image connects anew under the same pid."""
    exe = life()
    plain = plain_run([exe, "chain", "4"])
    rec = record([exe, "chain", "4"], timeout=120)
    assert_same_behaviour(plain, rec)
    check_exact(rec, {"life_chain": Views(5 * 70000, 50, 0, 0)})


@pytest.mark.timeout(300)
def test_dlopen_dlclose_loop(record: Recorder) -> None:
    exe = life()
    plugin = build("client_plugin.c", PLAIN, shared=True)
    plain = plain_run([exe, "dlopen", plugin])
    rec = record([exe, "dlopen", plugin], timeout=120)
    assert_same_behaviour(plain, rec)
    check_exact(rec, {"life_dlopen": Views(400000, 50, 0, 0)})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how,signo", [("sigkill", 9), ("sigsegv", 11), ("abort", 6)])
def test_target_killed_keeps_its_status(record: Recorder, how: str, signo: int) -> None:
    exe = life()
    plain = plain_run([exe, how])
    assert exit_status(plain.returncode) == 128 + signo
    rec = record([exe, how], timeout=120)
    assert rec.returncode == 128 + signo, rec.describe()
    assert_same_behaviour(plain, rec)
    check_exact(rec, {"life_before_death": Views(13000, 10, 13000, 10)})


# --- the malloc family, under glibc and under jemalloc ------------------------------


def family_truth() -> dict[str, Views]:
    page = os.sysconf("SC_PAGESIZE")
    return {
        "fam_malloc": Views(1001, 1, 1001, 1),
        "fam_calloc": Views(1020, 1, 1020, 1),
        "fam_realloc": Views(3006, 2, 2003, 1),
        "fam_reallocarray": Views(1043, 1, 1043, 1),
        "fam_posix_memalign": Views(1005, 1, 1005, 1),
        "fam_aligned_alloc": Views(1024, 1, 1024, 1),
        "fam_memalign": Views(1007, 1, 1007, 1),
        "fam_valloc": Views(1008, 1, 1008, 1),
        "fam_pvalloc": Views(page, 1, page, 1),
        "fam_freed": Views(5050, 5, 0, 0),
    }


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unwinder", ["auto", "fp"])
def test_malloc_family(record: Recorder, unwinder: str) -> None:
    exe = life()
    plain = plain_run([exe, "family"])
    assert plain.returncode == 0, plain.describe()
    rec = record([exe, "family"], extra=["--unwinder", unwinder], timeout=120)
    assert_same_behaviour(plain, rec)
    check_exact(rec, family_truth())


@pytest.mark.timeout(300)
def test_jemalloc_target(tmp_path: Path) -> None:
    """A program run with jemalloc preloaded: the client goes first and its
    real allocator is jemalloc (malloc_usable_size included)."""
    if not JEMALLOC.exists():
        pytest.fail(f"{JEMALLOC} missing: install Debian's libjemalloc2 (.ci/run does)")
    exe = life()
    env = dict(os.environ, LD_PRELOAD=str(JEMALLOC))
    plain = plain_run([exe, "family-jemalloc"], env=env)
    assert plain.returncode == 0, plain.describe()
    db = tmp_path / "jemalloc.db"
    argv = [*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--seed", "1", "--", str(exe), "family-jemalloc"]
    run = run_process(argv, timeout=120, env=env)
    rec = Recording(run.argv, run.returncode, run.stdout, run.stderr, db)
    assert_same_behaviour(plain, rec)
    truth = family_truth()
    del truth["fam_pvalloc"]  # jemalloc has no pvalloc (see client_life.c)
    check_exact(rec, truth)


# --- a producer that stops reading ---------------------------------------------------


def _child_named(parent: int, comm: str) -> int | None:
    """A child process of `parent` whose name is `comm`, if any."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return None
    for pid in map(int, children):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                return pid
        except OSError:
            continue
    return None


def _in_nanosleep(pid: int) -> bool | None:
    """Whether `pid` sits in (clock_)nanosleep, as the client's wait for ring
    space does; None once the process is gone."""
    try:
        nr = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return None
    return nr in ("35", "230")  # x86_64 nanosleep, clock_nanosleep


@pytest.mark.timeout(120)
def test_unpinned_lost_socket_waits_out_a_stalled_producer(tmp_path: Path) -> None:
    """The program closed the client's socket (unpinned) and the ring filled
    while the producer was off the CPU (here: stopped until the target waits).
    The client used to give up at once, on finding its socket gone, and the
    rest of the recording was lost (CI, loaded machine: the closefrom case of
    test_unpinned_socket_lost_never_hangs). It must wait while the producer
    may still come back (bounded), and lose nothing when it does."""
    exe = build("client_ring.c", PLAIN)
    db = tmp_path / "stall.db"
    argv = [*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--block-client",
            "--shmem-size", "65536", "--", str(exe), "closefrom"]
    env = dict(os.environ, HEAPSCOPE_PIN_SOCKET="0")
    env.pop("HEAPSCOPE_MAX_WAIT_MS", None)  # the default bound (10 s)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == b"ready\n"
        target = _child_named(proc.pid, "client_ring")
        assert target is not None
        os.kill(proc.pid, signal.SIGSTOP)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        # The ring (64 KiB) is full after ~700 of the 20000 allocations: the
        # client then waits for space, sleeping in short naps.
        waiting = _in_nanosleep(target)
        while waiting is False:
            waiting = _in_nanosleep(target)
        os.kill(proc.pid, signal.SIGCONT)
        assert waiting, "the target ended without waiting for ring space"
        assert proc.stdout.readline() == b"done\n"
        out, err = proc.communicate(timeout=60)
    except BaseException:
        kill_group(proc)
        raise
    assert proc.returncode == 0, err.decode(errors="replace")
    profile = Profile(db)
    try:
        assert client_errors(profile) == {""}, err.decode(errors="replace")  # no error
        assert profile.views_of(profile.processes()[0]["upid"], "ring_fill") == Views(2_000_000, 20000, 0, 0)
    finally:
        profile.close()



@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", [True, False])
def test_one_cpu_full_ring_waits_for_the_producer_or_counts_the_loss(tmp_path: Path, block: bool) -> None:
    """The producer and the program on one CPU (a 1-CPU container, `taskset -c 0`), with a
    ring far too small for the program's records: it fills again and again, and each time
    the writer wakes the producer (a byte on the socket, which the producer must take for a
    wake-up, not for the process's end) and leaves it the CPU. Blocking: every allocation
    arrives and the client reports no error. Not blocking: what did not fit is counted and
    said in the summary."""
    exe = build("client_ring.c", PLAIN)
    db = tmp_path / "onecpu.db"
    cpu = min(os.sched_getaffinity(0))
    argv = [*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--block-client" if block else "--no-block-client",
            "--shmem-size", "65536", "--", str(exe), "wait"]
    env = dict(os.environ)
    env.pop("HEAPSCOPE_MAX_WAIT_MS", None)  # the default bound (10 s)
    proc = subprocess.run(argv, input=b"go\n", capture_output=True, timeout=90, env=env,
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err
    assert proc.stdout == b"ready\ndone\n"
    profile = Profile(db)
    try:
        assert client_errors(profile) == {""}, err
        dropped = profile.stats().get("dropped_records", 0)
        fill = profile.views_of(profile.processes()[0]["upid"], "ring_fill")
        if block:
            assert dropped == 0, err
            assert fill == Views(2_000_000, 20000, 0, 0)
        else:
            assert f"{dropped:,} records dropped" in err
            assert fill.alloc_objects <= 20000
            assert dropped > 0 or fill.alloc_objects == 20000
    finally:
        profile.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "mode,pin,reason",
    [("wait", "1", "wait_timeout"), ("closefrom", "1", "wait_timeout"), ("closefrom", "0", "socket_lost")],
)
def test_blocked_client_gives_up_and_says_why(tmp_path: Path, mode: str, pin: str, reason: str) -> None:
    """Blocking mode, a small ring, and the producer stopped (SIGSTOP) while
    the target allocates: the wait for space ends by itself (bounded, or on
    finding its socket gone when it is not pinned open), the client disables
    itself, the target runs to its end, and the reason reaches the profile
    and the summary."""
    exe = build("client_ring.c", PLAIN)
    db = tmp_path / "ring.db"
    argv = [*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--block-client",
            "--shmem-size", "65536", "--", str(exe), mode]
    env = dict(os.environ, HEAPSCOPE_MAX_WAIT_MS="300", HEAPSCOPE_PIN_SOCKET=pin)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == b"ready\n"
        os.kill(proc.pid, signal.SIGSTOP)  # the producer; the target runs on
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        # The target finishes while the producer is still stopped: it did not
        # wait for it forever.
        assert proc.stdout.readline() == b"done\n"
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    except BaseException:
        kill_group(proc)
        raise
    assert proc.returncode == 0, err.decode(errors="replace")
    assert reason in err.decode(errors="replace"), err.decode(errors="replace")
    profile = Profile(db)
    try:
        assert client_errors(profile) == {reason}
        assert profile.views_of(profile.processes()[0]["upid"], "ring_fill").alloc_objects < 20000
    finally:
        profile.close()
