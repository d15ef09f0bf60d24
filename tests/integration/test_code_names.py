"""Frames in code the loader lists in more than one piece, or not at all, are named: an
object's second and third executable segments (node, `-z separate-code` links), the pages of a
file mapped again elsewhere (V8's embedded builtins), and code generated at run time, from the
/tmp/perf-PID.map the runtime writes (node --perf-basic-prof, CPython 3.12+ -X perf). What stays
unnamed is said at the end of `record`, with the flag that names it."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, joined_fixes, run_process
from python_support import installed_pythons

pytestmark = pytest.mark.timeout(240)

NODE = shutil.which("node") or "node"
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

# A named JavaScript function whose Buffers are allocated by node's C++ (malloc, through
# node::NodeArrayBufferAllocator): 2000 x 64 KiB, most of the program's bytes.
BUFFERS_JS = """
const keep = [];
function makeBuffers(n) {
  for (let i = 0; i < n; i++) keep.push(Buffer.allocUnsafeSlow(64 * 1024 + i));
}
makeBuffers(2000);
console.log("done", keep.length);
"""

# far_alloc in a PT_LOAD of its own, the program's second executable segment.
SEGMENTS_C = r"""
#include <stdio.h>
#include <stdlib.h>
void *keep[64];
__attribute__((noinline, section(".fartext"))) void *far_alloc(int i) { return malloc(100000 + i); }
__attribute__((noinline)) void near_caller(int i) { keep[i % 64] = far_alloc(i); }
int main(void) { for (int i = 0; i < 64; i++) near_caller(i); puts("done"); return 0; }
"""

# remapped_alloc's pages mapped a second time from the executable, as V8 maps its builtins,
# and called there: its return address is in a mapping the loader does not list.
REMAP_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef void *(*alloc_fn)(size_t);
void *keep[64];

/* No pc-relative reference: it runs as well from a second mapping of its pages. */
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) void *remapped_alloc(alloc_fn m, size_t n) {
  void *p = m(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

struct where { uintptr_t addr; off_t off; };

static int find(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct where *w = data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && w->addr >= lo && w->addr < lo + ph->p_memsz) {
      w->off = (off_t)(ph->p_offset + (w->addr - lo));
      return 1;
    }
  }
  return 0;
}

int main(void) {
  struct where w = {(uintptr_t)&remapped_alloc, -1};
  dl_iterate_phdr(find, &w);
  long page = sysconf(_SC_PAGESIZE);
  int fd = open("/proc/self/exe", O_RDONLY);
  if (w.off < 0 || fd < 0) return 2;
  off_t aligned = w.off & ~(off_t)(page - 1);
  char *copy = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, aligned);
  if (copy == MAP_FAILED) return 3;
  alloc_fn m = malloc;
  void *(*again)(alloc_fn, size_t) = (void *(*)(alloc_fn, size_t))(copy + (w.off - aligned));
  for (int i = 0; i < 64; i++) keep[i] = again(m, 100000 + (size_t)i);
  puts("done");
  return 0;
}
"""

PY_BLOCKS = """
keep = []
def make_blocks(n):
    for i in range(n):
        keep.append(bytearray(100000 + i))
make_blocks(500)
print("done")
"""


def _in(directory: Path, argv: list[str | Path]) -> list[str | Path]:
    """argv run in `directory`: node's logs (isolate-*-v8.log with --perf-basic-prof) and its
    jitdump go to its working directory."""
    return ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", directory, *argv]


def _record(tmp: Path, argv: list[str | Path]) -> tuple[Path, str]:
    db = tmp / "p.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "--", *map(str, argv)], timeout=180)
    assert run.returncode == 0, run.describe()
    return db, joined_fixes(run.stderr.decode(errors="replace"))


@contextlib.contextmanager
def _perf_maps_removed(db: Path) -> Iterator[None]:
    """The perf maps the recorded processes left in /tmp are removed after the test."""
    try:
        yield None
    finally:
        if db.exists():
            with sqlite3.connect(db) as c:
                for (pid,) in c.execute("SELECT pid FROM process"):
                    with contextlib.suppress(OSError):
                        os.unlink(f"/tmp/perf-{pid}.map")


def _frame_names(db: Path) -> set[str]:
    with sqlite3.connect(db) as c:
        return {str(n) for (n,) in c.execute("SELECT name FROM stack_profile_frame") if n}


def _unnamed_share(tmp: Path, db: Path) -> float:
    """The share of all bytes allocated whose stack has a frame in no loaded object left unnamed."""
    out = tmp / "stacks.txt"
    run = run_process([*HEAPSCOPE, "export", "-f", "collapsed", "--view", "alloc_space", "-o", str(out), str(db)])
    assert run.returncode == 0, run.describe()
    total = unnamed = 0
    for line in out.read_text().splitlines():
        stack, _, value = line.rpartition(" ")
        total += int(value)
        if "[unknown pid " in stack:
            unnamed += int(value)
    assert total > 0
    return unnamed / total


@needs_node
def test_node_native_and_javascript_frames_are_named(tmp_path: Path) -> None:
    # GIVEN a node program allocating Buffers in a named JavaScript function, run with the perf map
    js = tmp_path / "buffers.js"
    js.write_text(BUFFERS_JS)
    db = tmp_path / "p.db"
    with _perf_maps_removed(db):
        # WHEN it is recorded
        db, err = _record(tmp_path, _in(tmp_path, [NODE, "--perf-basic-prof", "--interpreted-frames-native-stack", js]))
        names = _frame_names(db)
        # THEN node's own C++ frames are named (in its second executable segment)
        assert "node::NodeArrayBufferAllocator::AllocateUninitialized(unsigned long)" in names, err
        # AND so is the JavaScript function, from the perf map
        assert any("makeBuffers" in n and "buffers.js" in n for n in names), sorted(names)[:50]
        # AND under 10% of the bytes sit under a frame left unnamed
        assert _unnamed_share(tmp_path, db) < 0.10, err
        with sqlite3.connect(db) as c:
            named = c.execute("SELECT value FROM stats WHERE name = 'jit_frames_named'").fetchone()
        assert named is not None and named[0] > 0


@needs_node
def test_node_javascript_frames_are_named_from_its_jitdump(tmp_path: Path) -> None:
    # GIVEN node writing perf's jitdump (--perf-prof: jit-PID.dump in its working directory, mapped
    # executable for profilers to find) and no perf map
    js = tmp_path / "buffers.js"
    js.write_text(BUFFERS_JS)
    # WHEN it is recorded
    db, err = _record(tmp_path, _in(tmp_path, [NODE, "--perf-prof", "--interpreted-frames-native-stack", js]))
    # THEN the JavaScript function is named from the jitdump, and little is left unnamed
    assert list(tmp_path.glob("jit-*.dump")), "node wrote no jitdump"
    names = _frame_names(db)
    assert any("makeBuffers" in n and "buffers.js" in n for n in names), (sorted(names)[:50], err)
    assert _unnamed_share(tmp_path, db) < 0.10, err
    # AND that held with two images of one pid, sh's exec'd by node: sh's end, seen at the pid's
    # exit like node's and in either order, read no jitdump and must not erase what node's read
    with sqlite3.connect(db) as c:
        images = c.execute("SELECT pid, name FROM process ORDER BY upid").fetchall()
    assert len(images) == 2 and images[1][1] == "node" and images[0][0] == images[1][0], images


@needs_node
def test_node_without_a_perf_map_is_told_the_flag(tmp_path: Path) -> None:
    js = tmp_path / "buffers.js"
    js.write_text(BUFFERS_JS)
    # WHEN node runs JIT code without writing a perf map
    db, err = _record(tmp_path, _in(tmp_path, [NODE, js]))
    # THEN the end of record counts its unnamed frames and gives the flag that names them
    line = next((ln for ln in err.splitlines() if "[unknown pid " in ln and "fix:" in ln), None)
    assert line is not None, err
    assert "node --perf-basic-prof" in line and "python -X perf" in line, line
    # AND `stats` counts them
    with sqlite3.connect(db) as c:
        rows = dict(c.execute("SELECT name, value FROM stats WHERE name LIKE 'jit_frames_%'").fetchall())
    assert rows["jit_frames_unnamed"] > 0 and rows["jit_frames_named"] == 0, rows
    # AND its native frames are named all the same
    assert "node::NodeArrayBufferAllocator::AllocateUninitialized(unsigned long)" in _frame_names(db)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_frames_in_a_second_executable_segment_are_named(tmp_path: Path) -> None:
    # GIVEN a program linked with far_alloc in an executable PT_LOAD of its own
    src = tmp_path / "segments.c"
    src.write_text(SEGMENTS_C)
    prog = tmp_path / "segments"
    subprocess.run(["cc", "-O1", "-g", "-fno-omit-frame-pointer", "-Wl,-z,separate-code",
                    "-Wl,--section-start=.fartext=0x4000000", "-o", str(prog), str(src)],
                   check=True, timeout=120, capture_output=True)
    loads = subprocess.run(["readelf", "-lW", str(prog)], check=True, capture_output=True, text=True).stdout
    assert sum(1 for ln in loads.splitlines() if ln.split()[:1] == ["LOAD"] and " R E " in ln) >= 2, loads
    # WHEN it is recorded
    db, err = _record(tmp_path, [prog])
    # THEN the frame in the second segment has its name, as has its caller in the first
    names = _frame_names(db)
    assert {"far_alloc", "near_caller"} <= names, (sorted(names), err)
    assert not any(n.startswith(("segments+0x", "[unknown")) for n in names), sorted(names)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_frames_in_a_second_mapping_of_a_file_are_named(tmp_path: Path) -> None:
    # GIVEN a program that maps its own code a second time and allocates from there
    src = tmp_path / "remap.c"
    src.write_text(REMAP_C)
    prog = tmp_path / "remap"
    subprocess.run(["cc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", str(prog), str(src)],
                   check=True, timeout=120, capture_output=True)
    # WHEN it is recorded
    db, err = _record(tmp_path, [prog])
    # THEN the frame in the second mapping is named as in the first, and nothing is left unnamed
    names = _frame_names(db)
    assert "remapped_alloc" in names, (sorted(names), err)
    assert "[unknown pid " not in err, err


def _cpython_312() -> Path | None:
    for exe in installed_pythons():
        parts = exe.parent.parent.name.split(".")
        if exe.parent.parent.name[:2] == "3." and len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) >= 12:
            return exe
    return None


CPYTHON_312 = _cpython_312()


@pytest.mark.skipif(CPYTHON_312 is None, reason="no CPython 3.12+ in pyenv (`pyenv versions`): -X perf needs 3.12")
def test_cpython_perf_trampolines_are_named(tmp_path: Path) -> None:
    assert CPYTHON_312 is not None
    script = tmp_path / "blocks.py"
    script.write_text(PY_BLOCKS)
    db = tmp_path / "p.db"
    with _perf_maps_removed(db):
        # WHEN CPython 3.12+ runs with its perf trampolines (code it generates at run time)
        db, err = _record(tmp_path, [CPYTHON_312, "-X", "perf", script])
        # THEN the trampoline of the allocating function is named from the perf map
        names = _frame_names(db)
        assert any(n.startswith("py::make_blocks:") for n in names), (sorted(names)[:50], err)
        assert "[unknown pid " not in err, err
