"""symbolize.missing: why a target cannot be preloaded, the fix named for an unsymbolized
module, and the shallow-stack rule of --unwinder fp."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from heapscope.symbolize.missing import (
    debug_archive_advice,
    fix_for,
    is_mostly_shallow,
    mostly_shallow,
    owning_package,
    owning_packages,
    preload_blocker,
    unsymbolized_modules,
)
from heapscope.symbolize.profile import MappingReport, SymbolizeReport

pytestmark = pytest.mark.timeout(120)

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")


def _cc(tmp: Path, *flags: str) -> Path:
    src = tmp / "p.c"
    src.write_text("int main(void) { return 0; }\n")
    out = tmp / "p"
    subprocess.run(["cc", *flags, "-o", str(out), str(src)], check=True, timeout=60, capture_output=True)
    return out


@needs_cc
def test_dynamic_program_has_no_blocker(tmp_path: Path) -> None:
    assert preload_blocker(str(_cc(tmp_path))) is None


@needs_cc
def test_static_program_is_named(tmp_path: Path) -> None:
    try:
        prog = _cc(tmp_path, "-static")
    except subprocess.CalledProcessError:
        pytest.skip("no static libc")
    why = preload_blocker(str(prog))
    assert why is not None and "statically linked" in why


@needs_cc
def test_setuid_bit_of_another_user_is_named(tmp_path: Path) -> None:
    prog = _cc(tmp_path)
    os.chmod(prog, 0o4755)
    # our own setuid file does not change the effective uid: the loader keeps LD_PRELOAD
    assert preload_blocker(str(prog)) is None
    if os.geteuid() == 0:
        os.chown(prog, 65534, -1)
        os.chmod(prog, 0o4755)
        why = preload_blocker(str(prog))
        assert why is not None and "setuid" in why


def test_scripts_and_missing_files_have_no_blocker(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    assert preload_blocker(str(script)) is None
    assert preload_blocker(str(tmp_path / "nope")) is None
    assert preload_blocker(sys.executable) is None


def test_shallow_rule() -> None:
    assert mostly_shallow([1, 1, 2, 5]) == (3, 4)
    # a stack that ends where every walk ends (main called from glibc's start) is complete
    assert mostly_shallow([2, 2, 1, 5], ["__libc_start_call_main", "start_thread", "", "f"]) == (1, 4)
    assert is_mostly_shallow(3, 4) and not is_mostly_shallow(2, 4) and not is_mostly_shallow(0, 0)


def test_fix_names_what_would_help(tmp_path: Path) -> None:
    report = SymbolizeReport("llvm-symbolizer")
    report.mappings = [
        MappingReport(1, str(tmp_path / "mine"), "ab" * 20, frames=5, outcome="no_debug_info", named=1),
        MappingReport(2, "[vdso]", "", frames=3, outcome="not_a_file"),
        MappingReport(3, str(tmp_path / "done"), "cd" * 20, frames=2, outcome="symbolized", named=2),
    ]
    mods = unsymbolized_modules(report)
    assert [(m.module, m.frames) for m in mods] == [(str(tmp_path / "mine"), 4)]
    assert "--binary-path" in mods[0].fix and "DEBUGINFOD_URLS" in mods[0].fix
    report.debuginfod = ["http://127.0.0.1:1"]
    report.debuginfod_missing = {"ab" * 20: "http://127.0.0.1:1: not found"}
    assert "no debuginfod server had it (http://127.0.0.1:1: not found)" in fix_for(report.mappings[0], report)
    report.mappings[0].outcome = "no_symbolizer"
    assert "llvm-symbolizer" in fix_for(report.mappings[0], report)


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian system")
def test_owning_package_of_a_system_file() -> None:
    libc = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6")
                 if os.path.exists(p)), None)
    if libc is None:
        pytest.skip("no x86_64 libc")
    assert owning_package(libc) == "libc6"
    assert owning_package("/nonexistent/file") == ""
    both = owning_packages([libc, "/usr" + libc if not libc.startswith("/usr/") else libc[4:], "/nonexistent"])
    assert set(both.values()) == {"libc6"} and len(both) == 2


def test_a_name_with_a_nul_has_no_package() -> None:
    """Found by the readers fuzz target: a NUL in a mapping's name (a damaged or imported
    profile) made report's question to dpkg end in ValueError from os.path.realpath."""
    assert owning_packages(["/usr/bin/pr\0g", "relative"]) == {}
    assert owning_package("/lib/libc.so.6\0") == ""


def test_damaged_elf_headers_are_no_verdict(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\x02\x00")
    assert preload_blocker(str(short)) is None
    huge = tmp_path / "huge"
    # ELF64, ET_EXEC, program headers far past the end of the file
    huge.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\x02\x00\x3e\x00" + b"\0" * 12
                     + (1 << 40).to_bytes(8, "little") + b"\0" * 14 + b"\x38\x00\x05\x00" + b"\0" * 8)
    assert preload_blocker(str(huge)) is None


# --- the debug archive the -dbgsym fix needs --------------------------------------------------------

DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\nUBUNTU_CODENAME=noble\n'
FIX = "install its debug symbols: apt install git-dbgsym (Debian's debug archive; -dbg on older releases)"


def test_debian_advice_gives_the_debug_archive_line_of_its_release(tmp_path: Path) -> None:
    # GIVEN a stock Debian 12 whose apt has only the main archive
    sources = tmp_path / "sources.list"
    sources.write_text("deb http://deb.debian.org/debian bookworm main\n")
    # WHEN a fix names a -dbgsym package
    lines = debug_archive_advice([FIX], "p.db", DEBIAN, [str(sources)])
    # THEN the advice adds bookworm's debug archive, and the debuginfod server that needs no install
    assert "deb http://deb.debian.org/debian-debug/ bookworm-debug main" in lines[1]
    assert "sudo apt update" in lines[1]
    assert lines[2].endswith("DEBUGINFOD_URLS=https://debuginfod.debian.net heapscope symbolize p.db")


def test_ubuntu_advice_gives_ddebs_and_its_keyring(tmp_path: Path) -> None:
    lines = debug_archive_advice([FIX], "p.db", UBUNTU, [])
    assert "sudo apt install ubuntu-dbgsym-keyring" in lines[1]
    assert "deb http://ddebs.ubuntu.com noble main" in lines[1] and "noble-updates" in lines[1]
    assert "\n" not in "".join(lines)  # one shell line: printf's \n, not a newline
    assert "https://debuginfod.ubuntu.com" in lines[2]


def test_no_advice_when_apt_has_the_archive_no_fix_needs_it_or_another_distribution(tmp_path: Path) -> None:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debug.sources").write_text("Types: deb\nURIs: http://deb.debian.org/debian-debug/\nSuites: bookworm-debug\n")
    assert debug_archive_advice([FIX], "p.db", DEBIAN, [str(d)]) == []
    assert debug_archive_advice(["build it with -g"], "p.db", DEBIAN, []) == []
    assert debug_archive_advice([FIX], "p.db", "ID=fedora\nVERSION_ID=40\n", []) == []
