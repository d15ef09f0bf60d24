"""symbolize.locate on programs compiled here: the lookup order, build-id refusal,
.gnu_debuglink with its CRC check, and the index mode."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from symbolize_progs import (
    INLINED_SOURCE,
    OTHER_SOURCE,
    SplitBuild,
    build_id,
    build_id_path,
    compile_cxx,
    needs_toolchain,
    split_debug,
)

from heapscope.symbolize.elfinfo import file_crc32, read_elf_info
from heapscope.symbolize.locate import Locator

pytestmark = [needs_toolchain, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> SplitBuild:
    d = tmp_path_factory.mktemp("locate")
    (d / "full").mkdir()
    return split_debug(compile_cxx(INLINED_SOURCE, d / "full" / "prog"), d / "split", debuglink=True)


def test_lookup_order_is_the_documented_one() -> None:
    # GIVEN two binary-path directories and a library inside an APK
    locator = Locator(["/sym/a", "/sym/b"], debug_roots=["/dbg"])
    # WHEN the candidate files are listed
    got = list(locator.candidates("/system/lib/base.apk!foo.so", "abcd1234"))
    # THEN they follow heapprofd's five steps per directory, then the path, then the debug root
    assert got == [
        "/sym/a/system/lib/base.apk!foo.so", "/sym/a/system/lib/foo.so", "/sym/a/base.apk!foo.so",
        "/sym/a/foo.so", "/sym/a/.build-id/ab/cd1234.debug",
        "/sym/b/system/lib/base.apk!foo.so", "/sym/b/system/lib/foo.so", "/sym/b/base.apk!foo.so",
        "/sym/b/foo.so", "/sym/b/.build-id/ab/cd1234.debug",
        "/system/lib/base.apk!foo.so",
        "/dbg/.build-id/ab/cd1234.debug",
    ]


def test_elf_info_of_split_files(build: SplitBuild) -> None:
    # GIVEN a program split into a stripped binary with a debuglink and a debug file
    stripped, debug = read_elf_info(build.stripped), read_elf_info(build.debug)
    # THEN both keep the build id; only the debug file has DWARF; the link names it with its CRC
    assert stripped.build_id == debug.build_id == build.build_id
    assert (stripped.has_dwarf, debug.has_dwarf) == (False, True)
    assert (stripped.debuglink, stripped.debuglink_crc) == ("prog.debug", file_crc32(build.debug))


def test_debug_file_found_by_build_id_under_binary_path(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN the recorded binary is stripped and DIR/.build-id/xx/rest.debug holds its debug file
    recorded = tmp_path / "bin" / "prog"
    recorded.parent.mkdir()
    shutil.copy(build.stripped, recorded)  # no debug file next to it: the debuglink leads nowhere
    sym = tmp_path / "sym"
    shutil.copy(build.debug, build_id_path(sym, build.build_id))
    # WHEN it is located without and with the binary path
    alone = Locator([], debug_roots=[]).locate(str(recorded), build.build_id)
    found = Locator([str(sym)], debug_roots=[]).locate(str(recorded), build.build_id)
    # THEN only the binary path finds DWARF; alone, the right file is found without debug info
    assert (alone.status, alone.debug_file, alone.matched) == ("no_debug_info", "", [str(recorded)])
    assert found.status == "found"
    assert found.debug_file == str(build_id_path(sym, build.build_id))


def test_file_of_another_build_is_never_used(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN DIR + the recorded path holds a rebuild of the program (other build id, with DWARF)
    sym = tmp_path / "sym"
    recorded = "/opt/app/prog"
    other = compile_cxx(OTHER_SOURCE, tmp_path / "other")
    (sym / "opt" / "app").mkdir(parents=True)
    shutil.copy(other, sym / "opt" / "app" / "prog")
    # WHEN the mapping is located
    got = Locator([str(sym)], debug_roots=[]).locate(recorded, build.build_id)
    # THEN the rebuild is refused and reported with its build id
    assert got.status == "build_id_mismatch"
    assert got.debug_file == ""
    assert got.mismatches == [(str(sym / "opt" / "app" / "prog"), build_id(other))]
    # AND with the right debug file under .build-id as well, that one wins
    shutil.copy(build.debug, build_id_path(sym, build.build_id))
    got = Locator([str(sym)], debug_roots=[]).locate(recorded, build.build_id)
    assert (got.status, got.debug_file) == ("found", str(build_id_path(sym, build.build_id)))


def test_debuglink_next_to_binary_and_in_dot_debug(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN the stripped binary with its debug file beside it, then only in .debug/
    d = tmp_path / "app"
    d.mkdir()
    shutil.copy(build.stripped, d / "prog")
    shutil.copy(build.debug, d / "prog.debug")
    locator = Locator([], debug_roots=[])
    got = locator.locate(str(d / "prog"), build.build_id)
    assert (got.status, got.debug_file) == ("found", str(d / "prog.debug"))
    (d / ".debug").mkdir()
    (d / "prog.debug").rename(d / ".debug" / "prog.debug")
    got = Locator([], debug_roots=[]).locate(str(d / "prog"), build.build_id)
    assert (got.status, got.debug_file) == ("found", str(d / ".debug" / "prog.debug"))


def test_debuglink_in_debug_root_directory(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN a debug root holding ROOT/<binary's directory>/prog.debug (Debian's layout for debuglinks)
    d = tmp_path / "app"
    d.mkdir()
    shutil.copy(build.stripped, d / "prog")
    root = tmp_path / "debugroot"
    (root / str(d).lstrip("/")).mkdir(parents=True)
    shutil.copy(build.debug, root / str(d).lstrip("/") / "prog.debug")
    # WHEN located with that debug root
    got = Locator([], debug_roots=[str(root)]).locate(str(d / "prog"), build.build_id)
    # THEN the link is followed there
    assert (got.status, got.debug_file) == ("found", str(root / str(d).lstrip("/") / "prog.debug"))


def test_debuglink_refused_when_debug_file_is_of_another_build(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN the stripped binary whose debuglink target beside it is the debug file of a rebuild
    d = tmp_path / "app"
    d.mkdir()
    shutil.copy(build.stripped, d / "prog")
    other = split_debug(compile_cxx(OTHER_SOURCE, tmp_path / "other"), tmp_path / "othersplit")
    shutil.copy(other.debug, d / "prog.debug")
    # WHEN located
    got = Locator([], debug_roots=[]).locate(str(d / "prog"), build.build_id)
    # THEN the debug file is refused by build id and reported; only the stripped binary is left
    assert (got.status, got.debug_file) == ("no_debug_info", "")
    assert got.mismatches == [(str(d / "prog.debug"), other.build_id)]


def test_debuglink_crc_checked_without_build_ids(tmp_path: Path) -> None:
    # GIVEN a program built without build id, split with a debuglink (the CRC is all that ties them)
    full = compile_cxx(INLINED_SOURCE, tmp_path / "prog", "-Wl,--build-id=none")
    split = split_debug(full, tmp_path / "split", debuglink=True)
    assert split.build_id == ""
    found = Locator([], debug_roots=[]).locate(str(split.stripped), "")
    assert (found.status, found.debug_file) == ("found", str(split.debug))
    # WHEN the debug file changes (a byte appended: still ELF, another CRC)
    with split.debug.open("ab") as f:
        f.write(b"\0")
    got = Locator([], debug_roots=[]).locate(str(split.stripped), "")
    # THEN it is refused
    assert (got.status, got.debug_file) == ("no_debug_info", "")
    assert got.mismatches == [(str(split.debug), "(CRC differs)")]


def test_index_matches_by_build_id_whatever_the_name(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN a tree with the debug file under an unrelated name, deep down, next to a rebuild
    sym = tmp_path / "sym"
    (sym / "x" / "y").mkdir(parents=True)
    shutil.copy(build.debug, sym / "x" / "y" / "whatever.bin")
    shutil.copy(compile_cxx(OTHER_SOURCE, tmp_path / "other"), sym / "prog")
    (sym / "notes.txt").write_text("not ELF")
    # WHEN located by index, and by the plain lookup order
    indexed = Locator([str(sym)], index=True, debug_roots=[])
    got = indexed.locate("/opt/app/prog", build.build_id)
    plain = Locator([str(sym)], debug_roots=[]).locate("/opt/app/prog", build.build_id)
    # THEN the index finds it by build id and counts the two ELF files; the lookup order only sees the rebuild
    assert indexed.index is not None and indexed.index.files == 2
    assert (got.status, got.debug_file) == ("found", str(sym / "x" / "y" / "whatever.bin"))
    assert plain.status == "build_id_mismatch"


def test_pseudo_mappings_are_not_files() -> None:
    assert Locator([]).locate("[vdso]", "").status == "not_a_file"
