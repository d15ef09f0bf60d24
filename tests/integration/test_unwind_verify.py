"""The client's own CFA walk (client/cfa.c) against libunwind, in real targets under the real
client and producer: with HEAPSCOPE_UNWIND_VERIFY=1 every sample is unwound both ways from the
same frame, libunwind's stack is recorded, and the client prints at exit how many stacks were
compared, the same, given up by our walk (libunwind took over) and different. No stack may
differ, and under --unwinder auto our walk gives up on none: it steps JIT code by its frame
pointer and a signal handler's frames by the kernel's signal frame."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs, run_process
from python_support import installed_pythons

HERE = Path(__file__).resolve().parent
VERIFY = re.compile(rb"heapscope: unwind verify: compared (\d+) same (\d+) fell_back (\d+) differ (\d+)")


def record_verified(tmp_path: Path, cmd: list[str], interval: int) -> tuple[dict[str, int], bytes]:
    env = dict(os.environ, HEAPSCOPE_UNWIND_VERIFY="1")
    db = tmp_path / "profile.db"
    run = run_process([*HEAPSCOPE, "record", "-q", "-o", str(db), "-i", str(interval), "--seed", "7", "--",
                       *cmd], env=env, timeout=240)
    assert run.returncode == 0, run.describe()
    lines = VERIFY.findall(run.stderr)
    assert lines, run.describe()
    total = {"compared": 0, "same": 0, "fell_back": 0, "differ": 0}
    for line in lines:
        for key, value in zip(total, line, strict=True):
            total[key] += int(value)
    assert total["differ"] == 0, run.describe()
    assert total["same"] + total["fell_back"] == total["compared"], total
    return total, run.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "flags",
    [("-O0", "-fno-omit-frame-pointer"), ("-O2", "-fno-omit-frame-pointer"), ("-O2", "-fomit-frame-pointer"),
     ("-O3", "-fomit-frame-pointer")],
    ids=["O0-fp", "O2-fp", "O2-nofp", "O3-nofp"],
)
def test_cfa_walk_equals_libunwind_cxx_mix(tmp_path: Path, flags: tuple[str, ...]) -> None:
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "unwind_mix"
    subprocess.run([cxx, *flags, "-g", "-pthread", "-o", str(exe), str(HERE / "unwind" / "unwind_mix.cpp")],
                   check=True, timeout=120)
    total, stdout = record_verified(tmp_path, [str(exe)], 256)
    assert stdout == b"ok\n"
    # Exceptions, containers, recursion, qsort in 5 threads: thousands of samples, the 20 in the
    # signal handler (raised 20 times, it mallocs 4 KiB) walked through the signal frame too
    assert total["compared"] > 5000, total
    assert total["fell_back"] == 0, total


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["basic", "cxx", "threads", "sampled"])
def test_cfa_walk_equals_libunwind_test_programs(programs: Programs, tmp_path: Path, name: str) -> None:
    total, _ = record_verified(tmp_path, [str(programs.path(name))], 1)
    assert total["compared"] > 50, total
    assert total["fell_back"] == 0, total


# main -> code written at run time (push rbp; mov rbp, rsp; call rdi; pop rbp; ret: no CFI, in
# no loaded object) -> callback -> malloc.
JIT = """
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
void *volatile kept[64];
__attribute__((noinline)) void callback(void) { static int i; kept[i++ & 63] = malloc(4096); }
int main(void) {
  static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
  unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return 1;
  memcpy(p, code, sizeof code);
  void (*jit)(void (*)(void)) = (void (*)(void (*)(void)))(void *)p;
  for (int i = 0; i < 64; i++)
    jit(callback);
  return 0;
}
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flags", [("-O2", "-fomit-frame-pointer"), ("-O0", "-fno-omit-frame-pointer")],
                         ids=["O2-nofp", "O0-fp"])
def test_jit_frames_are_stepped_by_their_frame_pointer(tmp_path: Path, flags: tuple[str, ...]) -> None:
    # GIVEN a program whose allocations are made below a frame of code it wrote at run time
    src = tmp_path / "jit.c"
    src.write_text(JIT)
    exe = tmp_path / "jit"
    subprocess.run(["cc", *flags, "-g", "-o", str(exe), str(src)], check=True, timeout=60)
    # WHEN it is recorded under --unwinder auto, each stack checked against libunwind's
    total, _ = record_verified(tmp_path, [str(exe)], 1)
    # THEN our walk stepped the JIT frame by its frame pointer on every one: none given up
    assert total["compared"] >= 64 and total["fell_back"] == 0, total
    # AND, recorded as users do, every stack reaches main through the JIT frame
    db = tmp_path / "plain.db"
    run = run_process([*HEAPSCOPE, "record", "-q", "-o", str(db), "-i", "1", "--", str(exe)], timeout=120)
    assert run.returncode == 0, run.describe()
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT callsite_id, SUM(count) FROM heap_profile_allocation WHERE size = count * 4096"
                           " AND heap_name = 'libc.malloc'"
                           " GROUP BY callsite_id").fetchall()
        assert sum(n for _, n in rows) == 64, rows
        for cs, _ in rows:
            names = []
            while cs is not None:
                parent, name = con.execute(
                    "SELECT c.parent_id, f.name FROM stack_profile_callsite c"
                    " JOIN stack_profile_frame f ON f.id = c.frame_id WHERE c.id = ?", (cs,)).fetchone()
                names.append(name)
                cs = parent
            assert "callback" in names and "main" in names, names
            assert names.index("main") - names.index("callback") == 2, names  # the JIT frame between


def _cpython_312() -> Path | None:
    for exe in installed_pythons():
        version = exe.parent.parent.name.split(".")
        if len(version) >= 2 and version[0] == "3" and version[1].isdigit() and int(version[1]) >= 12:
            return exe
    return None


@pytest.mark.timeout(300)
def test_cpython_perf_trampolines_end_the_stack_as_libunwind_does(tmp_path: Path) -> None:
    # GIVEN CPython 3.12+ with its perf trampolines: code written at run time that keeps no
    # frame pointer (sub $8, %rsp; call *%rcx), so that rbp is no frame base there
    python = _cpython_312()
    if python is None:
        pytest.skip("no CPython 3.12+ in pyenv (`pyenv versions`): -X perf needs 3.12")
    script = tmp_path / "blocks.py"
    script.write_text("keep = []\nfor i in range(300):\n    keep.append(bytearray(100000 + i))\n")
    # WHEN it is recorded under --unwinder auto, each stack checked against libunwind's
    total, _ = record_verified(tmp_path, [str(python), "-X", "perf", str(script)], 4096)
    # THEN every stack is libunwind's, none given up on (they had all gone to a frame-pointer
    # walk from the start, which found none of the interpreter's frames)
    assert total["compared"] >= 300 and total["fell_back"] == 0, total


DEEP = """
#include <stdlib.h>
void *volatile kept[64];
__attribute__((noinline)) void *leaf(int i) { return kept[i] = malloc(4096 + (size_t)i); }
__attribute__((noinline)) void *mid(int i) { void *p = leaf(i); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) void *top(int i) { void *p = mid(i); __asm__ volatile("" ::: "memory"); return p; }
int main(void) { for (int i = 0; i < 64; i++) top(i); return 0; }
"""


@pytest.mark.timeout(120)
def test_auto_without_libunwind_walks_with_cfa_and_says_so(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("cc") is None:
        pytest.skip("hiding libunwind in a mount namespace of our own needs root, unshare and cc")
    # GIVEN a program without frame pointers, and libunwind hidden from the client (/dev/null bound
    # over it in a mount namespace of the test's own: its dlopen fails)
    src = tmp_path / "deep.c"
    src.write_text(DEEP)
    prog = tmp_path / "deep"
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-o", str(prog), str(src)], check=True, timeout=60)
    libs = [p for d in ("/lib", "/usr/lib", "/lib64", "/usr/lib64") for p in Path(d).glob("**/libunwind.so.8")]
    hide = " && ".join(f"mount --bind /dev/null {p}" for p in libs) or "true"
    db = tmp_path / "p.db"
    # WHEN it is recorded under --unwinder auto
    run = run_process(["unshare", "-m", "sh", "-c", f'mount --make-rprivate / && {hide} && exec "$@"', "sh",
                       *HEAPSCOPE, "record", "-i", "1", "-o", str(db), "--", str(prog)], timeout=90)
    if run.returncode != 0 and b"unshare" in run.stderr:
        pytest.skip(f"no mount namespace here: {run.stderr.decode().strip()}")
    # THEN the CFA walk takes its stacks, all of them deep, and the summary says which unwinder
    # walked them, without blaming frame pointers
    assert run.returncode == 0, run.describe()
    err = run.stderr.decode()
    assert "unwinder CFA walk" in err, err
    assert "shallow stacks" not in err, err
    with sqlite3.connect(db) as con:
        names = {n for (n,) in con.execute("SELECT name FROM stack_profile_frame WHERE name IS NOT NULL")}
    assert {"leaf", "mid", "top", "main"} <= names, sorted(names)
