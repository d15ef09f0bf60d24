"""Libraries the loader names by a relative path (`LD_LIBRARY_PATH=.`, dlopen("./plugin.so")):
the profile names them by their absolute path (the client joins its working directory to the
loader's name), so `heapscope symbolize` names their frames from any directory, and a profile
that still holds a relative name is symbolized from the directory it names (the build id
checks the file) or listed as unsymbolized, never skipped as "not a file"."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE

from heapscope.symbolize.llvm import find_llvm_symbolizer

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(find_llvm_symbolizer() is None, reason="llvm-symbolizer not installed (Debian package `llvm`)"),
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler"),
]

PLUGIN = """
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) void *plug_alloc(size_t n) { void *p = malloc(n); memset(p, 1, n); return p; }
"""
# dlopen()s ./plugin.so (by its relative path), or links libplug.so (found through LD_LIBRARY_PATH=.).
HOST = """
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
void *plug_alloc(size_t n);
int main(void) {
#ifdef DLOPEN
  void *h = dlopen("./plugin.so", RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\\n", dlerror()); return 2; }
  void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(h, "plug_alloc");
#else
  void *(*alloc)(size_t) = plug_alloc;
#endif
  volatile void *kept = alloc(1 << 20);
  (void)kept;
  return 0;
}
"""
TIMEOUT_S = 120


def _cc(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["cc", "-g", "-O1", "-fno-omit-frame-pointer", "-Wl,--build-id=sha1", *map(str, args)],
                   check=True, cwd=cwd, timeout=TIMEOUT_S)


def _build(d: Path, how: str) -> list[str]:
    """The program in `d`, and the command that runs it from there."""
    (d / "plugin.c").write_text(PLUGIN)
    (d / "host.c").write_text(HOST)
    if how == "dlopen":
        _cc("-fPIC", "-shared", "-o", "plugin.so", "plugin.c", cwd=d)
        _cc("-DDLOPEN", "-o", "host", "host.c", "-ldl", cwd=d)
        return ["./host"]
    _cc("-fPIC", "-shared", "-o", "libplug.so", "plugin.c", cwd=d)
    _cc("-o", "host", "host.c", "-L.", "-lplug", cwd=d)
    return ["env", "LD_LIBRARY_PATH=.", "./host"]


def _plugin_frames(db: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT m.name, f.name FROM stack_profile_frame f"
                           " JOIN stack_profile_mapping m ON m.id = f.mapping"
                           " WHERE m.name LIKE '%plug%'").fetchall()


@pytest.mark.parametrize("how", ["dlopen", "LD_LIBRARY_PATH"])
def test_a_library_loaded_by_a_relative_path_is_named_from_another_directory(tmp_path: Path, how: str) -> None:
    # GIVEN a program that loads its library by a relative path, recorded from its directory
    d = tmp_path / "app"
    d.mkdir()
    command = _build(d, how)
    db = tmp_path / "p.db"
    r = subprocess.run([*HEAPSCOPE, "record", "-q", "-i", "1", "--no-symbolize", "-o", str(db), "--", *command],
                       cwd=d, capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    # THEN the profile names the library by its absolute path
    lib = d / ("plugin.so" if how == "dlopen" else "libplug.so")
    frames = _plugin_frames(db)
    assert frames and {m for m, _ in frames} == {str(lib)}
    # and `heapscope symbolize` run from elsewhere names its function
    r = subprocess.run([*HEAPSCOPE, "symbolize", str(db)], cwd="/", capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    assert "plug_alloc" in {n for _, n in _plugin_frames(db)}


def test_a_relative_name_left_in_a_profile_is_tried_from_the_current_directory(tmp_path: Path) -> None:
    # GIVEN a profile whose mapping still holds the loader's relative name (as recorded by a
    # heapscope that stored it so)
    d = tmp_path / "app"
    d.mkdir()
    command = _build(d, "dlopen")
    db = tmp_path / "p.db"
    r = subprocess.run([*HEAPSCOPE, "record", "-q", "-i", "1", "--no-symbolize", "-o", str(db), "--", *command],
                       cwd=d, capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    with sqlite3.connect(db) as con:
        con.execute("UPDATE stack_profile_mapping SET name = './plugin.so' WHERE name LIKE '%plugin.so'")
    # WHEN it is symbolized from another directory: it is listed as unsymbolized, not skipped
    r = subprocess.run([*HEAPSCOPE, "symbolize", str(db)], cwd="/", capture_output=True, timeout=TIMEOUT_S)
    assert "plugin.so" in r.stdout.decode() + r.stderr.decode()
    assert "not a file" not in r.stdout.decode() + r.stderr.decode()
    assert "plug_alloc" not in {n for _, n in _plugin_frames(db)}
    # and from the directory it names: its function is named
    r = subprocess.run([*HEAPSCOPE, "symbolize", str(db)], cwd=d, capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    assert "plug_alloc" in {n for _, n in _plugin_frames(db)}
