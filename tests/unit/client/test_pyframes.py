"""client/pyframes.c and pycode.c: the CPython frame walker, against every installed CPython.

- Layout: pyframes_layout.c, compiled against each version's own headers,
  prints offsetof/sizeof of every field the walker's layout row uses next to
  the row; they must be equal.
- Behaviour: pyframes_probe.c (pyframes.c in a test-only library) is loaded
  with ctypes by pyframes_target.py under each CPython; it walks the calling
  thread's frames (GIL released) from nested functions, methods, generators,
  coroutines, a thread, lambdas, comprehensions, C callbacks, a fork child and
  a deep recursion. Lines come from bookkeeping/pylines.py here, outside the
  target; (qualname, file, line) per frame must equal the sys._getframe()
  chain exactly.
- Unknown versions (3.14, a free-threaded 3.13, 2.7) are "unsupported": no
  frames, one clear status line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from python_support import installed_pythons

from heapscope.bookkeeping.pylines import LineTable

HERE = Path(__file__).resolve().parent
CLIENT_DIR = HERE.parents[2] / "src" / "heapscope" / "client"
#: The walker and the copying of code objects (pyframes.h), built together.
WALKER = [str(CLIENT_DIR / "pyframes.c"), str(CLIENT_DIR / "pycode.c")]


PYTHONS = installed_pythons()

ENTRY = 1
WALK_NOSTATE, WALK_TRUNCATED = 1, 2


def _cc() -> str:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def _includes(python: Path) -> list[str]:
    """The -I flags of that interpreter's own headers (via its sysconfig)."""
    res = subprocess.run(
        [str(python), "-c",
         "import sysconfig as s; print(s.get_paths()['include']); print(s.get_config_var('CONFINCLUDEPY'))"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    dirs = dict.fromkeys(res.stdout.split())
    return [f"-I{d}" for d in dirs]


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_layout_rows_match_headers(python: Path, tmp_path: Path) -> None:
    exe = tmp_path / "layout"
    subprocess.run(
        [_cc(), "-std=gnu11", "-Wall", "-D_GNU_SOURCE", *_includes(python), f"-I{CLIENT_DIR}",
         str(HERE / "pyframes_layout.c"), *WALKER, "-o", str(exe), "-ldl", "-lpthread"],
        check=True, timeout=120,
    )
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    rows = [line.split() for line in res.stdout.splitlines()]
    wrong = [r for r in rows if len(r) == 3 and r[1] != r[2]]
    assert res.returncode == 0 and not wrong, res.stdout
    assert len(rows) > 25


@pytest.fixture(scope="module")
def probe_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pyframes") / "probe.so"
    subprocess.run(
        [_cc(), "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-D_GNU_SOURCE",
         "-Wall", "-Wextra", "-Werror", f"-I{CLIENT_DIR}", str(HERE / "pyframes_probe.c"),
         *WALKER, "-o", str(out), "-ldl", "-lpthread"],
        check=True, timeout=120,
    )
    return out


def resolve(walk: str) -> tuple[list[tuple[str, str, int | None]], list[int], int]:
    """The probe's text -> ([(qualname, file, line)], [flags], why)."""
    frames: list[tuple[str, str, int | None]] = []
    flags: list[int] = []
    why = -1
    for line in walk.splitlines():
        parts = line.split("\t")
        if parts[0] == "why":
            why = int(parts[1])
            continue
        flag, lasti, first, fmt, name, file, table = parts
        decoded = LineTable.decode(int(fmt), bytes.fromhex(table), int(first))
        frames.append((name, file, decoded.line(int(lasti))))
        flags.append(int(flag))
    return frames, flags, why


@pytest.fixture(scope="module")
def runs(probe_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    # A non-ASCII script path: file names go through the latin-1 str kind.
    script = tmp_path_factory.mktemp("pyframes") / "cible_été.py"
    script.write_text((HERE / "pyframes_target.py").read_text(encoding="utf-8"), encoding="utf-8")
    out: dict[str, dict[str, Any]] = {}
    for python in PYTHONS:
        res = subprocess.run([str(python), str(script), str(probe_lib)], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        out[str(python)] = json.loads(res.stdout)
    return out


CASES = ["nested", "method", "staticmethod", "generator", "async", "thread", "lambda", "listcomp", "map",
         "sorted-key", "deep", "latin1-name", "ucs2-name", "ucs4-name", "fork"]


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_walk_matches_getframe(python: Path, runs: dict[str, dict[str, Any]]) -> None:
    run = runs[str(python)]
    assert run["state"] == 1, run["status"]
    assert "layout known" in run["status"]
    assert run["eval_range_known"] == 1
    assert run["keys_ok"] == 1
    assert sorted(run["cases"]) == sorted(CASES)
    for label in CASES:
        case = run["cases"][label]
        frames, flags, why = resolve(case["walk"])
        expected = [tuple(f) for f in case["expected"]]
        assert case["n"] == len(frames) > 1, label
        # Frame 0 is capture() itself, at two different lines (the walk and
        # the chain call); every frame above it must be equal.
        assert frames[0][0] == "capture" and expected[0][0] == "capture", label
        if label == "deep":
            assert case["n"] == 256 and why == WALK_TRUNCATED
            assert frames[1:] == expected[1:256], label
        else:
            assert why == 0, label
            assert frames[1:] == expected[1:], (label, frames, expected)
        # Activation boundaries: one eval activation per frame before 3.11;
        # from 3.11 Python-to-Python calls share one, C callbacks start one.
        minor = run["version"][1]
        if minor <= 10:
            assert all(f & ENTRY for f in flags), label
        else:
            assert label == "deep" or flags[-1] & ENTRY, label  # <module>, run by PyRun_*
        if minor >= 11 and label == "nested":
            assert [f & ENTRY for f in flags] == [0, 0, 0, 0, 0, ENTRY]  # capture c b a main <module>
        if minor >= 11 and label in ("map", "sorted-key"):
            assert flags[1] & ENTRY, label  # the lambda, called from C


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_walk_memo_tells_recycled_code_objects_apart(python: Path, probe_lib: Path) -> None:
    """A code object freed and a new one made at its address, run by a frame
    at the same place and instruction: the walk memo must not hand out the
    old one's key (it re-reads the fields the key is made of)."""
    res = subprocess.run([str(python), str(HERE / "pyframes_recycle.py"), str(probe_lib)], capture_output=True,
                         text=True, timeout=100)
    assert res.returncode == 0, res.stderr
    same, bad = map(int, res.stdout.split())
    assert bad == 0, res.stdout
    assert same > 100, res.stdout  # the case this is about did happen (pymalloc reuses a freed block first)


LONG_NAME = r'''
import ctypes, sys
p = ctypes.CDLL(sys.argv[1])
p.probe_detect()
p.probe_walk.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
buf = ctypes.create_string_buffer(1 << 16)
scope = {"p": p, "buf": buf}
name = sys.argv[2]
exec(compile(f"def {name}():\n    return p.probe_walk(buf, len(buf))\n", sys.argv[3], "exec"), scope)
print(scope[name]())
sys.stdout.write(buf.value.decode("utf-8", "surrogateescape"))
'''


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_long_names_are_cut_to_the_buffer(python: Path, probe_lib: Path) -> None:
    """A name and a file name longer than the probe's buffers (512 and 1024
    bytes) come out as their first 512 and 1024 bytes; shorter ones whole."""
    for name, file in (("f" + "x" * 700, "/tmp/" + "d" * 1500 + ".py"), ("g" * 40, "/tmp/short.py")):
        res = subprocess.run([str(python), "-c", LONG_NAME, str(probe_lib), name, file], capture_output=True,
                             text=True, timeout=100)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert int(lines[0]) >= 2, res.stdout
        fields = lines[1].split("\t")
        assert fields[4] == name[:512] and fields[5] == file[:1024], (len(fields[4]), len(fields[5]))


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_unknown_versions_are_unsupported(python: Path, runs: dict[str, dict[str, Any]]) -> None:
    run = runs[str(python)]
    (st14, n14, w14, s14), (stft, nft, wft, sft), (st27, n27, w27, s27) = run["unsupported"]
    assert (st14, n14, w14) == (2, 0, f"why\t{WALK_NOSTATE}\n")
    assert s14 == "python frames: off, CPython 3.14 has an unknown layout: stacks are native-only"
    assert (stft, nft, wft) == (2, 0, f"why\t{WALK_NOSTATE}\n")
    assert sft == "python frames: off, CPython 3.13 is a free-threaded build: stacks are native-only"
    assert (st27, n27) == (2, 0)
    assert "2.7 has an unknown layout" in s27
    assert run["redetected"] == 1


@pytest.mark.timeout(120)
def test_no_allocation_or_lock_in_the_walker(tmp_path: Path) -> None:
    """What pyframes.o calls: no allocator, no lock, no stdio in the hook
    paths; only the detection side uses the loader."""
    obj = tmp_path / "pyframes.o"
    subprocess.run([_cc(), "-std=gnu11", "-O2", "-fPIC", "-D_GNU_SOURCE", "-nostdlib", "-r", *WALKER,
                    "-o", str(obj)], check=True, timeout=60)
    res = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, timeout=30, check=True)
    undefined = {line.split()[-1].split("@")[0] for line in res.stdout.splitlines() if line.strip()}
    allowed = {"dlsym", "dlopen", "dladdr1", "dl_iterate_phdr", "snprintf", "strtoul", "strncmp", "strrchr",
               "memcmp", "memcpy", "memset", "pthread_self", "_GLOBAL_OFFSET_TABLE_", "__stack_chk_fail"}
    assert undefined <= allowed, undefined - allowed


# Run with the PROBE_PRELOAD build in LD_PRELOAD: every malloc() walks.
WORKLOAD = r'''
import asyncio, json, multiprocessing, sys, threading

def gen(n):
    for i in range(n):
        yield {"k": [i] * (i % 7), "s": str(i) * 3}

def enc(n=3000):
    return sum(len(json.dumps(d)) for d in gen(n))

async def co(i):
    await asyncio.sleep(0)
    return [str(j) for j in range(i * 50)]

async def amain():
    return sum(len(x) for x in await asyncio.gather(*(co(i) for i in range(40))))

class K:
    def deep(self, k):
        return self.deep(k - 1) if k else enc(300)

def compiled(i):
    # code objects made and dropped at one depth: a new one often lands
    # where the last one was (the walk memo must not take one for the other)
    src = f"def f{i}():\n    return [str(x) * {i % 4} for x in range({200 + i % 5})]\nr = f{i}()\n"
    scope = {}
    exec(compile(src, f"<gen{i % 3}>", "exec"), scope)
    return len(scope["r"])

if __name__ == "__main__":
    out = []
    threads = [threading.Thread(target=lambda: out.append(enc())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sorted(out), asyncio.run(amain()), len([[x] * 10 for x in range(20000)]))
    print(K().deep(200), K().deep(60), sum(compiled(i) for i in range(400)))
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            print(method, pool.map(enc, [10, 20, 30]))
'''


@pytest.fixture(scope="module")
def preload_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pyframes") / "preload.so"
    subprocess.run(
        [_cc(), "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-D_GNU_SOURCE", "-DPROBE_PRELOAD",
         "-Wall", "-Wextra", "-Werror", f"-I{CLIENT_DIR}", str(HERE / "pyframes_probe.c"),
         *WALKER, "-o", str(out), "-ldl", "-lpthread"],
        check=True, timeout=120,
    )
    return out


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_walk_inside_every_malloc(python: Path, preload_lib: Path, tmp_path: Path) -> None:
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    plain = subprocess.run([str(python), str(script)], capture_output=True, text=True, timeout=240)
    env = {**os.environ, "LD_PRELOAD": str(preload_lib), "PROBE_EVERY": "1"}
    probed = subprocess.run([str(python), str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert plain.returncode == probed.returncode == 0, probed.stderr
    assert probed.stdout == plain.stdout
    # One line per process that ran its destructors (the main one; pool
    # workers leave through os._exit).
    counts = [dict(zip(line.split()[1::2], map(int, line.split()[2::2]), strict=True))
              for line in probed.stderr.splitlines() if line.startswith("probe: ")]
    assert counts, probed.stderr
    for c in counts:
        assert c["state"] == 1 and c["invalid"] == 0 and c["code_fail"] == 0, c
        # the sampler's walk, memo and all, gave the plain walk's frames and hash every time
        assert c["keyed_bad"] == 0, c
    assert counts[-1]["reused"] > counts[-1]["walks"], counts[-1]
    assert counts[-1]["walks"] > 1000 and counts[-1]["frames"] > 10 * counts[-1]["walks"] // 2, counts[-1]


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(120)
def test_walk_cost_is_printed(probe_lib: Path) -> None:
    """Not an assertion on speed: prints the mean walk time at depth ~30 for
    the record (pytest -s)."""
    code = ("import ctypes, sys; p = ctypes.CDLL(sys.argv[1]); p.probe_bench.restype = ctypes.c_double;"
            "p.probe_bench.argtypes = [ctypes.c_int]; p.probe_detect();"
            "f = lambda k: f(k - 1) if k else p.probe_bench(100000); print(f(28))")
    for python in PYTHONS:
        res = subprocess.run([str(python), "-c", code, str(probe_lib)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        print(f"{python}: {float(res.stdout):.0f} ns per walk of 30 frames")


def _libpython(python: Path) -> Path | None:
    res = subprocess.run(
        [str(python), "-c", "import sysconfig as s; print(s.get_config_var('LIBDIR'), s.get_config_var('INSTSONAME'))"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    libdir, soname = res.stdout.split()
    lib = Path(libdir) / soname
    return lib if lib.exists() and ".so" in soname else None


@pytest.mark.skipif(not PYTHONS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("python", PYTHONS, ids=str)
def test_embedded_interpreter_dlopened_local(python: Path, preload_lib: Path,
                                             build_program: Callable[..., Path]) -> None:
    """A host dlopen()s libpython RTLD_LOCAL after start-up: detection finds
    it on the second call, and the walks inside malloc() see its frames."""
    lib = _libpython(python)
    if lib is None:
        pytest.skip(f"{python} has no shared libpython")
    host = build_program("pyframes_embed.c", "-ldl")
    env = {**os.environ, "LD_PRELOAD": str(preload_lib), "PROBE_EVERY": "1"}
    res = subprocess.run([str(host), str(lib)], capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    # (C's stdio and Python's sys.stdout flush in their own order)
    assert sorted(res.stdout.splitlines()) == ["after 1", "before 0", "sum 35556000"], res.stdout
    line = [x for x in res.stderr.splitlines() if x.startswith("probe: ")][-1].split()
    c = dict(zip(line[1::2], map(int, line[2::2]), strict=True))
    # 19990 strings of 800 bytes or more (those of i < 10 are 400 bytes:
    # pymalloc's), each allocated under 3 frames (<genexpr>, embedded_work,
    # <module>).
    assert c["invalid"] == 0 and c["code_fail"] == 0 and c["frames"] >= 3 * 19990, c
