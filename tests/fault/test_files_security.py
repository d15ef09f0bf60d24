"""Files heapscope writes: never through a planted link, never a file it does not own, private by default.

The attacks need two users: a throwaway unprivileged user, created here with
useradd, plants links in a directory it owns (where root was asked to write,
as in `cd ~user && sudo heapscope record ...`); heapscope then runs as root,
and the victim file (root's, which the attacker cannot write) must stay as it
was. These tests skip when not run as root. The rest (modes, overwrite policy,
read-only sql) run as any user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs, run_process

from heapscope.model import Frame, Mapping, MappingId, ProcessInfo, Upid
from heapscope.store.writer import ProfileWriter

VICTIM_TEXT = b"root's precious file\n"


class Attacker:
    def __init__(self, name: str) -> None:
        pw = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, pw.pw_uid, pw.pw_gid

    def run(self, argv: list[str]) -> None:
        subprocess.run(argv, user=self.uid, group=self.gid, extra_groups=[], check=True, timeout=30,
                       stdin=subprocess.DEVNULL)

    def link(self, target: Path, link: Path) -> None:
        self.run(["ln", "-s", str(target), str(link)])


@pytest.fixture(scope="module")
def attacker() -> Iterator[Attacker]:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a throwaway user and runs heapscope as root against it")
    if shutil.which("useradd") is None:
        pytest.skip("needs useradd to create the throwaway user")
    name = f"hsatk{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--system", "--shell", "/usr/sbin/nologin", name],
                   check=True, timeout=30)
    try:
        yield Attacker(name)
    finally:
        subprocess.run(["userdel", name], check=False, timeout=30)


@pytest.fixture
def shared(attacker: Attacker) -> Iterator[Path]:
    """A directory the attacker owns, reachable by everyone (not under pytest's 0700 tmp root)."""
    d = Path(tempfile.mkdtemp(prefix="hs-shared-", dir="/tmp"))
    os.chmod(d, 0o755)
    os.chown(d, attacker.uid, attacker.gid)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_bytes(VICTIM_TEXT)
    os.chmod(v, 0o644)
    return v


def assert_untouched(victim: Path) -> None:
    assert victim.read_bytes() == VICTIM_TEXT
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def assert_one_line_error(r: object, *words: str) -> None:
    err = r.stderr.decode(errors="replace")  # type: ignore[attr-defined]
    assert r.returncode not in (0, None), r.describe()  # type: ignore[attr-defined]
    assert err.count("\n") == 1 and err.startswith("heapscope: error: "), r.describe()  # type: ignore[attr-defined]
    for w in words:
        assert w in err, r.describe()  # type: ignore[attr-defined]


def small_profile(path: Path) -> Path:
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("", 0, 0, 0x1000, 0x2000, 0, "/bin/x"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main"))])
    w.add_callsites([(1, 0, None, 1)])
    w.add_process(ProcessInfo(Upid(1), pid=5, ppid=1, name="x", cmdline="x", exe="/bin/x", uid=0, start_ts=0))
    w.add_dump(1, 0, 10, "exit", [(1, 1, 64)], "libc.malloc")
    w.close()
    return path


def record_argv(out: Path, marker: Path, *extra: str) -> list[str]:
    """`record` of a shell that leaves `marker` behind when it ran."""
    return [*HEAPSCOPE, "record", "-q", "-o", str(out), *extra, "--", "/bin/sh", "-c", f": > {marker}"]


# --- planted links (root against an unprivileged user) -------------------------------------


def test_record_refuses_a_planted_link_as_output(attacker: Attacker, shared: Path, victim: Path,
                                                 tmp_path: Path) -> None:
    # GIVEN the attacker's link, where root was asked to write the profile, pointing at root's file
    out = shared / "profile.db"
    attacker.link(victim, out)
    marker = tmp_path / "ran"
    # WHEN root records into it (even with --force)
    for extra in ((), ("--force",)):
        r = run_process(record_argv(out, marker, *extra), timeout=60)
        # THEN one line refuses it, the target never starts, the victim is untouched
        assert_one_line_error(r, "symbolic link")
        assert not marker.exists()
        assert_untouched(victim)


def test_record_refuses_a_dangling_link_as_output(attacker: Attacker, shared: Path, tmp_path: Path) -> None:
    # GIVEN a dangling link naming a file root would create in a directory of root's
    target = tmp_path / "created-by-root.txt"
    out = shared / "profile.db"
    attacker.link(target, out)
    marker = tmp_path / "ran"
    r = run_process(record_argv(out, marker), timeout=60)
    assert_one_line_error(r, "symbolic link")
    assert not target.exists() and not marker.exists()


def test_record_never_writes_through_a_planted_wal_link(attacker: Attacker, shared: Path, victim: Path,
                                                        tmp_path: Path) -> None:
    # GIVEN links planted where SQLite puts its write-ahead log and shared memory beside the profile
    out = shared / "profile.db"
    attacker.link(victim, Path(f"{out}-wal"))
    attacker.link(victim, Path(f"{out}-shm"))
    marker = tmp_path / "ran"
    # WHEN root records
    r = run_process(record_argv(out, marker), timeout=60)
    # THEN the recording works, and the victim is untouched
    assert r.returncode == 0, r.describe()
    assert marker.exists()
    assert_untouched(victim)
    assert out.is_file() and not out.is_symlink()
    assert run_process([*HEAPSCOPE, "report", str(out)], timeout=60).returncode == 0


def test_export_refuses_a_planted_link_as_output(attacker: Attacker, shared: Path, victim: Path,
                                                 tmp_path: Path) -> None:
    profile = small_profile(tmp_path / "p.db")
    out = shared / "p.collapsed"
    attacker.link(victim, out)
    for extra in ((), ("--force",)):
        r = run_process([*HEAPSCOPE, "export", str(profile), "-f", "collapsed", "-o", str(out), *extra], timeout=60)
        assert_one_line_error(r, "symbolic link")
        assert_untouched(victim)
        assert out.is_symlink()


_PLANT = """
import os, sys
victim, out = sys.argv[1], sys.argv[2]
last = int(open("/proc/sys/kernel/ns_last_pid").read())
for pid in range(last + 1, last + 400):
    os.symlink(victim, os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.{pid}.tmp"))
"""


def test_export_temporary_file_has_no_predictable_name(attacker: Attacker, shared: Path, victim: Path,
                                                       tmp_path: Path) -> None:
    # GIVEN links planted at `.<out>.<pid>.tmp` for the next few hundred pids (a name that
    # depends only on the pid can be guessed)
    profile = small_profile(tmp_path / "p.db")
    out = shared / "p.collapsed"
    python = shutil.which("python3", path="/usr/bin:/bin") or pytest.skip("needs a system python3 for the attacker")
    attacker.run([python, "-c", _PLANT, str(victim), str(out)])
    # WHEN root exports there
    r = run_process([*HEAPSCOPE, "export", str(profile), "-f", "collapsed", "-o", str(out)], timeout=60)
    # THEN the export is written and the victim is untouched
    assert r.returncode == 0, r.describe()
    assert_untouched(victim)
    assert out.is_file() and not out.is_symlink() and out.read_bytes().startswith(b"main ")


def test_flamegraph_refuses_a_planted_link_as_output(attacker: Attacker, shared: Path, victim: Path,
                                                     tmp_path: Path) -> None:
    profile = small_profile(tmp_path / "p.db")
    out = shared / "p.html"
    attacker.link(victim, out)
    r = run_process([*HEAPSCOPE, "flamegraph", str(profile), "-o", str(out), "--force"], timeout=60)
    assert_one_line_error(r, "symbolic link")
    assert_untouched(victim)


def test_symbolize_refuses_to_write_through_a_link(attacker: Attacker, shared: Path, tmp_path: Path) -> None:
    # GIVEN root's profile and the attacker's link to it
    profile = small_profile(tmp_path / "p.db")
    before = profile.read_bytes()
    link = shared / "p.db"
    attacker.link(profile, link)
    # WHEN root symbolizes the link in place THEN one line refuses it and the profile is unchanged
    r = run_process([*HEAPSCOPE, "symbolize", str(link)], timeout=60)
    assert_one_line_error(r, "symbolic link")
    assert profile.read_bytes() == before


@pytest.mark.parametrize("target", ["fifo", "victim", "dangling"])
@pytest.mark.parametrize("sidecar", ["-journal", "-wal"])
@pytest.mark.timeout(120)
def test_a_link_planted_beside_the_profile_is_refused(attacker: Attacker, shared: Path, victim: Path,
                                                      target: str, sidecar: str) -> None:
    # GIVEN a profile in the attacker's directory, and the attacker's link at its journal (or
    # WAL) name: to a FIFO (which would block the open), to root's file, or to nothing
    profile = small_profile(shared / "p.db")
    fifo = shared / "fifo"
    attacker.run(["mkfifo", str(fifo)])
    to = {"fifo": fifo, "victim": victim, "dangling": shared / "nothing"}[target]
    attacker.link(to, Path(f"{profile}{sidecar}"))
    before = profile.read_bytes()
    # WHEN root symbolizes it, or reports it THEN one line names the link, nothing is changed
    for command in ("symbolize", "report"):
        r = run_process([*HEAPSCOPE, command, str(profile)], timeout=30)
        assert_one_line_error(r, f"p.db{sidecar} is a symbolic link")
    assert profile.read_bytes() == before
    assert_untouched(victim)


# --- modes and the overwrite policy (any user) ------------------------------------------------


def _umask_022() -> None:
    os.umask(0o022)


@pytest.mark.timeout(120)
def test_profiles_and_outputs_are_private(programs: Programs, tmp_path: Path) -> None:
    # GIVEN the usual umask 022, under which files are world-readable by default
    out = tmp_path / "p.db"
    r = subprocess.run([*HEAPSCOPE, "record", "-q", "-o", str(out), "--", str(programs.path("tiny"))],
                       preexec_fn=_umask_022, capture_output=True, timeout=90)
    assert r.returncode == 0, r.stderr
    # THEN the profile (it holds every command line) and what is made of it are 0600
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    for argv, made in ((["export", str(out), "-f", "pprof", "-o", str(tmp_path / "p.pb.gz")], "p.pb.gz"),
                       (["flamegraph", str(out), "-o", str(tmp_path / "p.html")], "p.html")):
        r = subprocess.run([*HEAPSCOPE, *argv], preexec_fn=_umask_022, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE((tmp_path / made).stat().st_mode) == 0o600, made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.db", "p.html", "p.pb.gz"]  # no temporary left


def test_record_never_replaces_a_file_that_is_not_a_profile(tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_bytes(VICTIM_TEXT)
    marker = tmp_path / "ran"
    for extra in ((), ("--force",)):
        r = run_process(record_argv(out, marker, *extra), timeout=60)
        assert_one_line_error(r, "not a heapscope profile")
        assert out.read_bytes() == VICTIM_TEXT and not marker.exists()


def test_record_replaces_a_profile_only_with_force(tmp_path: Path) -> None:
    out = small_profile(tmp_path / "p.db")
    before = out.read_bytes()
    marker = tmp_path / "ran"
    # WHEN recording over an existing profile without --force THEN it says so, target not started
    r = run_process(record_argv(out, marker), timeout=60)
    assert_one_line_error(r, "heapscope profile is already there", "--force")
    assert out.read_bytes() == before and not marker.exists()
    # WHEN with --force THEN the new recording replaces it
    r = run_process(record_argv(out, marker, "--force"), timeout=60)
    assert r.returncode == 0, r.describe()
    assert marker.exists() and out.read_bytes() != before


def test_export_never_replaces_a_profile(tmp_path: Path) -> None:
    profile = small_profile(tmp_path / "p.db")
    other = small_profile(tmp_path / "other.db")
    before = other.read_bytes()
    r = run_process([*HEAPSCOPE, "export", str(profile), "-f", "collapsed", "-o", str(other), "--force"],
                    timeout=60)
    assert_one_line_error(r, "heapscope profile")
    assert other.read_bytes() == before


@pytest.mark.parametrize("statement", ["ATTACH '{d}/new.db' AS x", "VACUUM INTO '{d}/copy.db'",
                                       "DELETE FROM process", "PRAGMA query_only = OFF"])
def test_sql_is_read_only(tmp_path: Path, statement: str) -> None:
    profile = small_profile(tmp_path / "p.db")
    before = profile.read_bytes()
    r = run_process([*HEAPSCOPE, "sql", str(profile), statement.format(d=tmp_path)], timeout=60)
    assert_one_line_error(r, "read-only")
    assert profile.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.db"]
