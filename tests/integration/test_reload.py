"""A library loaded where an unloaded one was (a plugin host's dlclose, then dlopen): each is
named and symbolized as itself, with its own build id and its own mapping, also when both are
one path on disk (a plugin rebuilt between its loads) and when every return address of the
second's stack is one of the first's (one call site in the host, one layout in the plugins)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, PROGRAMS_DIR, Profile, Programs, Recorder, Views, frame_matches

from heapscope.symbolize.elfinfo import read_elf_info
from heapscope.symbolize.llvm import find_llvm_symbolizer

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(find_llvm_symbolizer() is None, reason="llvm-symbolizer not installed (Debian package `llvm`)"),
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler"),
]

BLOCKS, BLOCK = 64, 64 * 1024  # reload.c's PLUGIN_BLOCKS and PLUGIN_BLOCK
TIMEOUT_S = 120


def _plugin(d: Path, name: str) -> Path:
    """reload.c built as the plugin `name` (its function name_alloc)."""
    out = d / f"lib{name}.so"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-fPIC", "-shared", "-Wl,--build-id=sha1",
                    f"-DPLUGIN={name}", "-o", str(out), str(PROGRAMS_DIR / "reload.c")],
                   check=True, timeout=TIMEOUT_S)
    return out


def _mappings_of(profile: Profile, function: str) -> set[tuple[str, str]]:
    """(mapping name, build id) of every frame named `function`."""
    rows = profile.query("SELECT f.name AS fn, m.name AS name, m.build_id AS build_id FROM stack_profile_frame f"
                         " JOIN stack_profile_mapping m ON m.id = f.mapping")
    return {(r["name"], r["build_id"]) for r in rows if frame_matches(r["fn"], function)}


@pytest.mark.parametrize(("same_path", "libc_dlclose"), [(False, False), (True, False), (False, True)],
                         ids=["two-files", "one-path-rebuilt", "libc-dlclose"])
def test_a_library_loaded_where_an_unloaded_one_was_is_named_as_itself(
        programs: Programs, record: Recorder, tmp_path: Path, same_path: bool, libc_dlclose: bool) -> None:
    # GIVEN two plugins of one size and layout, alpha and bravo (other names, other build ids),
    # and a host that loads alpha, calls it, unloads it, then loads bravo and calls it from the
    # same call site; with same_path both are loaded from one path, each copied there first;
    # with libc_dlclose the host unloads with the C library's dlclose, not the client's (as
    # in a process the client attached to later), and calls bravo from another function
    alpha, bravo = _plugin(tmp_path, "alpha"), _plugin(tmp_path, "bravo")
    ids = {name: read_elf_info(lib).build_id for name, lib in (("alpha", alpha), ("bravo", bravo))}
    assert ids["alpha"] and ids["bravo"] and ids["alpha"] != ids["bravo"]
    loaded = tmp_path / "plugin.so"
    argv: list[str | Path] = [programs.path("reload"), *(["--libc-dlclose"] if libc_dlclose else []),
                              alpha, "alpha", bravo, "bravo", *([loaded] if same_path else [])]
    # WHEN it is recorded, every allocation sampled
    rec = record(argv, extra=["-q"], timeout=TIMEOUT_S)
    assert rec.returncode == 0, rec.describe()
    bases = dict(re.findall(r"base (\w+) (0x[0-9a-f]+)", rec.stdout.decode()))
    assert set(bases) == {"alpha", "bravo"}, rec.describe()
    if bases["alpha"] != bases["bravo"]:
        pytest.skip(f"the loader placed bravo at {bases['bravo']}, not where alpha was ({bases['alpha']})")
    if same_path:
        # alpha's file is gone from its path at the end (bravo is there): symbolized by its build id
        # from where it was built, as a user points `symbolize` at a build directory
        r = subprocess.run([*HEAPSCOPE, "symbolize", str(rec.db), "--binary-path", str(tmp_path), "--index"],
                           capture_output=True, timeout=TIMEOUT_S)
        assert r.returncode == 0, r.stderr.decode()
    # THEN alpha's bytes are alpha_alloc's and bravo's bravo_alloc's, every byte
    profile = rec.profile()
    upid = profile.only_upid("reload")
    want = Views(BLOCKS * BLOCK, BLOCKS, BLOCKS * BLOCK, BLOCKS)
    assert profile.views_of(upid, "alpha_alloc") == want, profile.describe_process(upid)
    assert profile.views_of(upid, "bravo_alloc") == want, profile.describe_process(upid)
    # and each function's frames are in a mapping of its own library, by its build id
    path = {"alpha": str(loaded if same_path else alpha), "bravo": str(loaded if same_path else bravo)}
    for name in ("alpha", "bravo"):
        assert _mappings_of(profile, f"{name}_alloc") == {(path[name], ids[name])}
    # and the replacement is counted
    assert profile.stats(upid)["modules_replaced"] >= 1
