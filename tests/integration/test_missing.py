"""`record` says what is missing: unsymbolized modules with their fix, targets the client
could not be preloaded into, frame-pointer stacks of code without frame pointers; and
debug files come from a debuginfod server (a loopback one started here)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from debuginfod_support import DebuginfodServer
from hs_integration import HEAPSCOPE, joined_fixes, run_process

from heapscope.symbolize.llvm import find_llvm_symbolizer

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("cc", "c++", "objcopy", "readelf")),
                       reason="needs cc, c++, objcopy and readelf"),
]

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
void *keep[64];
__attribute__((noinline)) void *leaf_alloc(int i) { return malloc(4096 + i); }
__attribute__((noinline)) void middle(int i) { keep[i % 64] = leaf_alloc(i); }
__attribute__((noinline)) void top(int n) { for (int i = 0; i < n; i++) middle(i); }
int main(void) { top(256); puts("done"); return 0; }
"""
INLINED = (Path(__file__).parents[1] / "unit" / "symbolize" / "inlined.cpp").read_text()


def _build(tmp: Path, name: str, *flags: str, source: str = PROGRAM, cxx: bool = False) -> Path:
    src = tmp / f"{name}.{'cc' if cxx else 'c'}"
    src.write_text(source)
    out = tmp / name
    subprocess.run(["c++" if cxx else "cc", "-g", "-Wl,--build-id=sha1", *flags, "-o", str(out), str(src)],
                   check=True, timeout=120, capture_output=True)
    return out


def _build_id(path: Path) -> str:
    note = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True).stdout
    return note.split("Build ID:")[1].split()[0]


def _strip(full: Path, out: Path) -> Path:
    subprocess.run(["objcopy", "--strip-all", str(full), str(out)], check=True)
    return out


def _record(tmp: Path, argv: Sequence[str | Path], *extra: str, env: dict[str, str] | None = None,
            name: str = "p.db") -> tuple[Path, str]:
    db = tmp / name
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), *extra, "--", *map(str, argv)], timeout=120,
                      env=env)
    assert run.returncode == 0, run.describe()
    return db, joined_fixes(run.stderr.decode(errors="replace"))


def _stats(db: Path, name: str) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as c:
        return [(int(v), str(d)) for v, d in c.execute("SELECT value, description FROM stats WHERE name = ?",
                                                         (name,))]


# --- unsymbolized modules -------------------------------------------------------------------------


def test_stripped_binary_is_named_with_frames_and_fix(tmp_path: Path) -> None:
    # GIVEN a stripped build of a program whose allocating functions are not exported
    prog = _strip(_build(tmp_path, "full", "-O1", "-fno-omit-frame-pointer", "-fno-inline"), tmp_path / "stripped")
    # WHEN it is recorded
    db, err = _record(tmp_path, [prog], "-i", "1")
    # THEN the summary names the module, how many of its frames stayed unsymbolized, and the fix
    assert "left unsymbolized" in err, err
    line = next(ln for ln in err.splitlines() if f"{prog}:" in ln and "fix:" in ln)
    assert " frames; fix:" in line or " frame; fix:" in line, line
    assert "--binary-path" in line, line
    # AND its stacks show the module+offset names the summary talks about
    with sqlite3.connect(db) as c:
        names = {n for (n,) in c.execute("SELECT name FROM stack_profile_frame")}
    assert any(n.startswith("stripped+0x") for n in names), names


def _debian_like() -> bool:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return False
    return bool(re.search(r"^ID=\"?(debian|ubuntu)", text, re.M)) and "VERSION_CODENAME=" in text


def _apt_has_debug_archive() -> bool:
    files = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list"),
             *Path("/etc/apt/sources.list.d").glob("*.sources")]
    return any(f.is_file() and re.search(r"debian-debug|ddebs\.ubuntu\.com", f.read_text(errors="replace"))
               for f in files)


def _packaged_git(tmp: Path) -> tuple[str, Path]:
    """git as a Debian or Ubuntu package installed it, and an empty repository to run it in."""
    git = shutil.which("git")
    if git is None or shutil.which("dpkg-query") is None or not _debian_like():
        pytest.skip("needs git from a Debian or Ubuntu package")
    if subprocess.run(["dpkg-query", "-S", os.path.realpath(git)], capture_output=True, timeout=10).returncode:
        pytest.skip("git is not from a package")
    repo = tmp / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    return git, repo


def test_a_packaged_program_without_its_debug_archive_gets_the_archive_line(tmp_path: Path) -> None:
    # GIVEN git as Debian or Ubuntu ship it (stripped; its -dbgsym in the debug archive), on a stock
    # system whose apt does not have the debug archive
    if _apt_has_debug_archive():
        pytest.skip("needs apt without the debug archive")
    git, repo = _packaged_git(tmp_path)
    # WHEN it is recorded
    db, err = _record(tmp_path, [git, "-C", str(repo), "status", "--short"])
    # THEN the fix names git's -dbgsym package, and the lines after it say how to get the archive
    # (this release's codename) or to ask debuginfod instead
    lines = err.splitlines()
    fix = next((k for k, ln in enumerate(lines) if "apt install git-dbgsym" in ln), None)
    assert fix is not None, err
    codename = re.search(r"^VERSION_CODENAME=(\S+)", Path("/etc/os-release").read_text(), re.M)
    assert codename is not None
    advice = "\n".join(lines[fix:])
    assert f"{codename.group(1)}" in advice and ("debian-debug/" in advice or "ddebs.ubuntu.com" in advice), err
    assert "sudo apt update" in advice and "DEBUGINFOD_URLS=https://debuginfod." in advice, err
    assert f"heapscope symbolize {db}" in advice, err


def test_report_names_the_package_record_found_without_asking_dpkg(tmp_path: Path) -> None:
    """`report` asked dpkg for the packages of its unnamed rows' files each time (~55 ms of a
    build's 0.9 s report): `record` keeps what dpkg told it in the profile."""
    git, repo = _packaged_git(tmp_path)
    # GIVEN git recorded: its frames without names, its package said at the end. Every allocation
    # sampled: at the default interval git's peak could hold libc's stacks only (one CI run's did),
    # and then no row of `report` had git's unnamed frames to name the package for.
    db, err = _record(tmp_path, [git, "-C", str(repo), "status", "--short"], "-i", "1")
    assert "git-dbgsym" in err, err
    # THEN the profile keeps its file's package
    with sqlite3.connect(db) as c:
        kept = dict(c.execute("SELECT name, package FROM heapscope_mapping_package").fetchall())
    assert "git" in kept.values(), kept
    # AND `report`, with no dpkg-query to run, names its -dbgsym package
    run = run_process([*HEAPSCOPE, "report", str(db), "--wide"], env={**os.environ, "PATH": str(tmp_path / "none")})
    assert run.returncode == 0, run.describe()
    assert "apt install git-dbgsym" in run.stdout.decode(), run.describe()


def test_debug_build_has_no_unsymbolized_line(tmp_path: Path) -> None:
    prog = _build(tmp_path, "full", "-O1", "-fno-omit-frame-pointer", "-fno-inline")
    _db, err = _record(tmp_path, [prog], "-i", "1")
    assert f"{prog}:" not in err, err


# --- targets the client cannot get into ------------------------------------------------------------


def test_static_binary_is_named_with_the_reason(tmp_path: Path) -> None:
    try:
        prog = _build(tmp_path, "static", "-O1", "-static")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no static libc to link with: {e.stderr.decode(errors='replace')[:200]}")
    # WHEN a statically linked program is recorded
    db, err = _record(tmp_path, [prog])
    # THEN the summary says it was not profiled, and why
    assert "recorded 0 processes" in err
    assert f"{prog} (pid " in err and "was not profiled: it is statically linked" in err, err
    # AND `stats` says so too
    rows = _stats(db, "target_not_profiled")
    assert len(rows) == 1 and rows[0][0] == 1 and "statically linked" in rows[0][1], rows


def test_profiled_target_is_not_reported_missing(tmp_path: Path) -> None:
    prog = _build(tmp_path, "dyn", "-O1")
    db, err = _record(tmp_path, [prog])
    assert "not profiled" not in err, err
    assert _stats(db, "target_not_profiled") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a setuid file of another user needs root to create")
def test_setuid_binary_is_named_with_the_reason(tmp_path: Path) -> None:
    prog = _build(tmp_path, "suid", "-O1")
    os.chown(prog, 65534, 65534)
    os.chmod(prog, 0o4755)
    tmp_path.chmod(0o755)
    _db, err = _record(tmp_path, [prog])
    assert "setuid" in err and "not profiled" in err, err


# --- frame pointers ---------------------------------------------------------------------------------


def test_fp_unwinder_without_frame_pointers_is_said(tmp_path: Path) -> None:
    # GIVEN a program built without frame pointers
    prog = _build(tmp_path, "nofp", "-O2", "-fomit-frame-pointer", "-fno-inline")
    # WHEN it is recorded with --unwinder fp
    db, err = _record(tmp_path, [prog], "-i", "1", "--unwinder", "fp")
    # THEN the summary says its stacks are too shallow and suggests the default unwinder
    line = next((ln for ln in err.splitlines() if "shallow stacks" in ln), "")
    assert "--unwinder auto" in line, err
    # AND `stats` keeps it
    rows = _stats(db, "shallow_fp_stacks")
    assert len(rows) == 1 and rows[0][0] > 0 and "--unwinder auto" in rows[0][1], rows


def test_fp_unwinder_with_frame_pointers_is_not_flagged(tmp_path: Path) -> None:
    prog = _build(tmp_path, "fp", "-O0", "-fno-omit-frame-pointer", "-fno-inline")
    db, err = _record(tmp_path, [prog], "-i", "1", "--unwinder", "fp")
    assert "shallow stacks" not in err, err
    assert _stats(db, "shallow_fp_stacks") == []


SHALLOW = r"""
#include <stdlib.h>
void *volatile keep[256];
int main(void) { for (int i = 0; i < 256; i++) keep[i] = malloc(4096 + i); return 0; }
"""


def test_fp_unwinder_on_stacks_that_really_are_shallow_is_not_flagged(tmp_path: Path) -> None:
    # GIVEN a program with frame pointers whose main calls malloc itself: every stack is two
    # frames deep (main, and glibc's function that called it), and complete
    prog = _build(tmp_path, "flat", "-O1", "-fno-omit-frame-pointer", source=SHALLOW)
    # WHEN it is recorded with --unwinder fp
    db, err = _record(tmp_path, [prog], "-i", "1", "--unwinder", "fp")
    # THEN missing frame pointers are not blamed
    assert "shallow stacks" not in err, err
    assert _stats(db, "shallow_fp_stacks") == []


# --- peak in the summary ------------------------------------------------------------------------------


def test_summary_shows_peak_and_largest_stacks(tmp_path: Path) -> None:
    from heapscope.units import format_bytes
    prog = _build(tmp_path, "prog", "-O0", "-fno-omit-frame-pointer", "-fno-inline")
    _db, err = _record(tmp_path, [prog], "-i", "1")
    lines = err.splitlines()
    at = next(i for i, ln in enumerate(lines) if "largest stacks" in ln)
    # Nothing is freed: at interval 1 the peak is every byte allocated, 256 blocks of 4096+i bytes
    want = sum(4096 + i for i in range(256))
    assert "prog (pid " in lines[at] and f"peak {format_bytes(want)} " in lines[at], lines[at]
    assert lines[at + 1].split()[1:3] == format_bytes(want).split(), lines[at + 1]
    assert lines[at + 1].endswith("top > middle > leaf_alloc"), lines[at + 1]


# --- debuginfod ------------------------------------------------------------------------------------------


@pytest.fixture
def split_inlined(tmp_path: Path) -> tuple[Path, str, bytes]:
    """(stripped -O2 program with inlined helpers, its build id, its debug file's bytes)."""
    full = _build(tmp_path, "inl_full", "-O2", "-fno-omit-frame-pointer", source=INLINED, cxx=True)
    debug = tmp_path / "inl.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    stripped = _strip(full, tmp_path / "inl")
    return stripped, _build_id(full), debug.read_bytes()


@pytest.fixture
def server_of(request: pytest.FixtureRequest) -> Iterator[Callable[[dict[str, bytes]], DebuginfodServer]]:
    servers: list[DebuginfodServer] = []

    def start(files: dict[str, bytes]) -> DebuginfodServer:
        s = DebuginfodServer(files)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


@pytest.mark.skipif(find_llvm_symbolizer() is None, reason="llvm-symbolizer not installed (Debian package `llvm`)")
def test_record_symbolizes_from_debuginfod(tmp_path: Path, split_inlined: tuple[Path, str, bytes],
                                           server_of: Callable[[dict[str, bytes]], DebuginfodServer]) -> None:
    prog, build_id, debug = split_inlined
    server = server_of({f"/buildid/{build_id}/debuginfo": debug})
    cache = tmp_path / "cache"
    env = dict(os.environ, DEBUGINFOD_URLS=server.url, HEAPSCOPE_DEBUGINFOD_CACHE=str(cache))
    # WHEN the stripped program is recorded with DEBUGINFOD_URLS set
    db, err = _record(tmp_path, [prog], "-i", "1", env=env)
    # THEN its allocating frame has the inline chain from the server's debug file
    with sqlite3.connect(db) as c:
        chain = c.execute("SELECT s.name, s.line_number FROM stack_profile_frame f JOIN stack_profile_symbol s"
                          " ON s.symbol_set_id = f.symbol_set_id WHERE f.name LIKE 'app::outer_fn%'"
                          " ORDER BY s.id").fetchall()
    assert chain == [("inner_alloc", 4), ("middle_alloc", 5), ("app::outer_fn(unsigned long)", 7)], err
    assert f"{prog}:" not in err, err
    # AND the file is cached privately, so `symbolize` later needs no server
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    assert (cache / f"{build_id}.debuginfo").read_bytes() == debug
    # (llvm-symbolizer reads DEBUGINFOD_URLS too and may ask the server on its own)
    assert f"/buildid/{build_id}/debuginfo" in server.requests, server.requests


def test_debuginfod_without_the_file_says_so(tmp_path: Path, split_inlined: tuple[Path, str, bytes],
                                             server_of: Callable[[dict[str, bytes]], DebuginfodServer]) -> None:
    prog, build_id, _debug = split_inlined
    server = server_of({})
    env = dict(os.environ, DEBUGINFOD_URLS=server.url, HEAPSCOPE_DEBUGINFOD_CACHE=str(tmp_path / "cache"))
    _db, err = _record(tmp_path, [prog], "-i", "1", env=env)
    line = next(ln for ln in err.splitlines() if f"{prog}:" in ln)
    assert "no debuginfod server had it" in line and "not found" in line, line


def test_debuginfod_unreachable_is_one_line(tmp_path: Path, split_inlined: tuple[Path, str, bytes]) -> None:
    prog, _build_id_, _debug = split_inlined
    # A port nothing listens on: bind, note the port, close.
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, DEBUGINFOD_URLS=f"http://127.0.0.1:{port}",
               HEAPSCOPE_DEBUGINFOD_CACHE=str(tmp_path / "cache"))
    _db, err = _record(tmp_path, [prog], "-i", "1", env=env)
    assert sum("unreachable" in ln for ln in err.splitlines()) >= 1, err
    assert "Traceback" not in err


def test_symbolize_with_debuginfod_refuses_a_symlinked_cache(
        tmp_path: Path, split_inlined: tuple[Path, str, bytes],
        server_of: Callable[[dict[str, bytes]], DebuginfodServer]) -> None:
    prog, build_id, debug = split_inlined
    server = server_of({f"/buildid/{build_id}/debuginfo": debug})
    db, _err = _record(tmp_path, [prog], "-i", "1", "--no-symbolize")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "cache").symlink_to(elsewhere)
    env = dict(os.environ, DEBUGINFOD_URLS=server.url, HEAPSCOPE_DEBUGINFOD_CACHE=str(tmp_path / "cache"))
    run = run_process([*HEAPSCOPE, "symbolize", str(db)], timeout=120, env=env)
    err = run.stderr.decode()
    assert "symbolic link" in err and "refused" in err, err
    assert list(elsewhere.iterdir()) == [] and server.requests == []


def test_many_unsymbolized_modules_are_summed_up(tmp_path: Path) -> None:
    # GIVEN a program whose allocations come from 8 stripped libraries (two frames each)
    libs = []
    for i in range(8):
        src = tmp_path / f"l{i}.c"
        src.write_text("#include <stdlib.h>\n"
                       f"__attribute__((noinline)) static void *in{i}(int n) {{ return malloc(n); }}\n"
                       f"void *lib{i}(int n) {{ return in{i}(n + {i}); }}\n")
        so = tmp_path / f"libl{i}.so"
        subprocess.run(["cc", "-O1", "-fPIC", "-shared", "-fno-omit-frame-pointer", "-o", str(so), str(src)],
                       check=True, timeout=60)
        subprocess.run(["objcopy", "--strip-all", str(so)], check=True)
        libs.append(so)
    main = tmp_path / "main.c"
    main.write_text("#include <stdio.h>\n" + "".join(f"void *lib{i}(int);\n" for i in range(8))
                    + "int main(void) {\n" + "".join(f"  lib{i}(100);\n" for i in range(8)) + "  return 0;\n}\n")
    prog = tmp_path / "prog"
    subprocess.run(["cc", "-g", "-o", str(prog), str(main), *map(str, libs), f"-Wl,-rpath,{tmp_path}"],
                   check=True, timeout=60)
    # WHEN it is recorded
    _db, err = _record(tmp_path, [prog], "-i", "1")
    # THEN the summary names 5 of them, and sums up the rest in one line
    named = [ln for ln in err.splitlines() if ".so:" in ln and "fix:" in ln]
    assert len(named) == 5, err
    assert "... and " in err and " of other modules" in err, err


def test_summary_of_many_processes_shows_the_largest_peaks(tmp_path: Path) -> None:
    # GIVEN a shell that runs a program 8 times (9 processes, each with a peak)
    prog = _build(tmp_path, "prog", "-O0", "-fno-omit-frame-pointer", "-fno-inline")
    script = " ; ".join([str(prog)] * 8)
    # WHEN the shell is recorded
    _db, err = _record(tmp_path, ["/bin/sh", "-c", script], "-i", "1")
    # THEN the summary shows five peaks and counts the rest in one line
    assert sum("largest stacks" in ln for ln in err.splitlines()) == 5, err
    assert "... and 4 more processes with smaller peaks" in err, err


SMALL = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) void *small_alloc(int i) { return malloc(1000 + i); }
int main(void) { void *keep[8]; for (int i = 0; i < 8; i++) keep[i] = small_alloc(i); puts("small"); return 0; }
"""
BIG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) void *big_alloc(size_t n) { void *p = malloc(n); memset(p, 1, n); return p; }
int main(void) { void *keep[16]; for (int i = 0; i < 16; i++) keep[i] = big_alloc(1 << 20); puts("big"); return 0; }
"""


def _small_around_big(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A shell that runs a stripped program holding ~8 KiB three times, then one holding 16 MiB
    (pyenv's shim around python3, in small: shells and tools of ~100 KiB around the program)."""
    small = _strip(_build(tmp_path, "small_full", "-O1", source=SMALL), tmp_path / "small")
    big = _build(tmp_path, "big", "-O1", source=BIG)
    return small, big, ["/bin/sh", "-c", f"{small}; {small}; {small}; {big}"]


def test_smaller_processes_are_named_in_one_line(tmp_path: Path) -> None:
    # GIVEN a big program run by a shell after three small ones (pyenv's shim around python3)
    small, big, argv = _small_around_big(tmp_path)
    # WHEN it is recorded at -i 1 (every allocation: the small ones have peaks too)
    db, err = _record(tmp_path, argv, "-i", "1")
    # THEN the summary shows the big one's peak only, and names the others by executable
    assert sum("largest stacks" in ln for ln in err.splitlines()) == 1, err
    assert "big (pid " in err and "big_alloc" in err, err
    more = [ln for ln in err.splitlines() if "more processes with smaller peaks" in ln]
    # the shell as it was run (sh), not as its link's target is named (dash on Debian)
    assert len(more) == 1 and "(small ×3, sh; heapscope report " in more[0], err
    # ...and its coverage line is the big one's, not a sum over the small ones' RSS too
    seen = next(ln for ln in err.splitlines() if " of RSS " in ln)
    assert re.search(r"seen 16\.\d MiB of RSS \S+ MiB in big \(pid \d+\) \(", seen), seen
    # ...the stripped small program's frames are one line, its three processes' frames summed
    named = [ln for ln in err.splitlines() if f"{small}:" in ln and "fix:" in ln]
    assert len(named) == 1, err
    frames = int(named[0].split(f"{small}: ")[1].split(" frame")[0].replace(",", ""))
    assert frames >= 6, err  # small_alloc and main at least, in each of the three
    # AND report shows the big one in full, the rest in the table's last line
    out = run_process([*HEAPSCOPE, "report", str(db)], timeout=60)
    assert out.returncode == 0, out.describe()
    text = out.stdout.decode()
    sections = [ln for ln in text.splitlines() if ln.startswith("pid ")]
    assert len(sections) == 1 and " big " in sections[0] + " ", text
    assert "... and 4 more processes, each under 1% of the largest's peak and allocations (small ×3, sh)," \
        " not shown: --pid PID shows one, --all-processes every one" in " ".join(text.split()), text  # wrapped
    # ...and every one with --all-processes, or the one asked for with --pid
    every = run_process([*HEAPSCOPE, "report", "--all-processes", str(db)], timeout=60)
    assert sum(ln.startswith("pid ") for ln in every.stdout.decode().splitlines()) == 5, every.describe()
    assert "each under 1%" not in every.stdout.decode()
    one = run_process([*HEAPSCOPE, "report", "--pid", sections[0].split()[1], str(db)], timeout=60)
    assert sum(ln.startswith("pid ") for ln in one.stdout.decode().splitlines()) == 1, one.describe()
    # AND the flamegraph's process picker lists them as report's table: the big one first
    page = tmp_path / "f.html"
    run = run_process([*HEAPSCOPE, "flamegraph", str(db), "-o", str(page)], timeout=60)
    assert run.returncode == 0, run.describe()
    packed = re.search(r'<script id="hs-data" type="text/plain">([^<]*)</script>', page.read_text())
    assert packed is not None
    labels = [p["label"] for p in json.loads(gzip.decompress(base64.b64decode(packed.group(1))))["processes"]]
    assert labels[0] == "all processes" and labels[1].endswith(" big"), labels


def test_leaks_and_diff_default_to_the_largest_process(tmp_path: Path) -> None:
    # GIVEN the shell of small programs and a big one, recorded (the big one holds 16 MiB at its end)
    _small, _big, argv = _small_around_big(tmp_path)
    db, _err = _record(tmp_path, argv, "-i", "1")
    # WHEN its leaks are listed
    out = run_process([*HEAPSCOPE, "leaks", str(db)], timeout=60)
    assert out.returncode == 0, out.describe()
    text = out.stdout.decode()
    # THEN the big one is shown, the small ones named in one line
    sections = [ln for ln in text.splitlines() if ln.startswith("pid ")]
    assert len(sections) == 1 and "  big  " in sections[0], text
    assert "... and 4 more processes, each under 1% of the largest's peak and allocations (small ×3, " in text, text
    # AND a diff of the profile with itself compares the big one's 16 MiB (not the shell's, first in the profile)
    out = run_process([*HEAPSCOPE, "diff", str(db), str(db)], timeout=60)
    assert out.returncode == 0, out.describe()
    assert out.stdout.decode().startswith("space: 16.0 MiB ("), out.describe()
    # AND pprof's header names its executable: the main binaries' mappings come first, the
    # heaviest process's first (it read `File: dash`, the shell that started first)
    if shutil.which("go"):
        pb = tmp_path / "p.pb.gz"
        run = run_process([*HEAPSCOPE, "export", str(db), "--format", "pprof", "-o", str(pb)], timeout=60)
        assert run.returncode == 0, run.describe()
        top = subprocess.run(["go", "tool", "pprof", "-top", str(pb)], capture_output=True, text=True, timeout=120)
        assert top.stdout.startswith("File: big\n"), top.stdout[:500] + top.stderr
