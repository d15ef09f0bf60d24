"""Custom heaps (issue 16): the C header and the Python API, under the real client.

tests/programs/arena.c reports a bump arena on two custom heaps with known
objects per call path; the Python programs below do the same through
heapscope.heaps. Ground truth comes from the programs themselves.
"""

from __future__ import annotations

import gzip
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, PROGRAMS_DIR, Profile, Views, frame_matches, run_process

INTERVAL = 4096


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """arena.c built against the installed header (`heapscope --include`), as a user would."""
    include = subprocess.run([*HEAPSCOPE, "--include"], capture_output=True, text=True, timeout=60, check=True)
    inc_dir = Path(include.stdout.strip())
    assert (inc_dir / "heapscope.h").is_file(), include.stdout
    out = tmp_path_factory.mktemp("arena") / "arena"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-Wall", "-Wextra", "-Werror",
                    "-I", str(inc_dir), "-I", str(PROGRAMS_DIR), "-o", str(out), str(PROGRAMS_DIR / "arena.c")],
                   check=True, timeout=120)
    return out


def heap_truth(binary: Path) -> dict[tuple[str, str], Views]:
    out = subprocess.run([str(binary), "--print-truth"], capture_output=True, text=True, timeout=30, check=True)
    truth = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "heap":
            truth[(parts[1], parts[2])] = Views(*(int(p) for p in parts[3:]))
        elif parts and parts[0] == "truth":
            truth[("libc.malloc", parts[1])] = Views(*(int(p) for p in parts[2:]))
    assert truth, out.stdout
    return truth


def heap_views(profile: Profile, upid: int, heap: str, function: str) -> Views:
    """The four views of `heap`, summed over the callsites whose stack holds `function`."""
    rows = profile.query(
        """SELECT callsite_id,
                  SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS alloc_space,
                  SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS alloc_objects,
                  SUM(size) AS space, SUM(count) AS objects
           FROM heap_profile_allocation WHERE upid = ? AND heap_name = ? GROUP BY callsite_id""",
        (upid, heap),
    )
    stacks = profile.stacks(upid)
    total = [0, 0, 0, 0]
    for r in rows:
        if any(frame_matches(name, function) for name in stacks.get(r["callsite_id"], [])):
            for i, key in enumerate(("alloc_space", "alloc_objects", "space", "objects")):
                total[i] += r[key]
    return Views(*total)


def heaps_of(profile: Profile, upid: int) -> dict[str, int]:
    rows = profile.query("SELECT heap_name, SUM(size) AS s FROM heap_profile_allocation WHERE upid = ?"
                         " GROUP BY heap_name", (upid,))
    return {r["heap_name"]: r["s"] for r in rows}


@pytest.mark.timeout(120)
def test_arena_exact_at_interval_1(arena, record):
    """Every path of both custom heaps is exact; the ignored frees (never reported,
    another heap's, twice, NULL) change nothing; the malloc heap is unaffected."""
    rec = record([arena], interval=1)
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    upid = profile.only_upid("arena")
    assert set(heaps_of(profile, upid)) == {"libc.malloc", "test.arena", "test.pool"}
    bad = []
    for (heap, fn), want in heap_truth(arena).items():
        got = heap_views(profile, upid, heap, fn)
        if got != want:
            bad.append(f"{heap} {fn}: expected {want}, got {got}")
    assert not bad, "\n".join([*bad, rec.describe(), profile.describe_process(upid)])
    # Each heap's own peak: test.arena peaks before its frees.
    peaks = {r["heap_name"]: r["s"] for r in profile.query(
        "SELECT heap_name, SUM(size) AS s FROM heapscope_peak_allocation WHERE upid = ? GROUP BY heap_name",
        (upid,))}
    assert peaks["test.arena"] == 2000 * 64 + 500 * 208 + 10 * 100000
    assert peaks["test.pool"] == 300 * 32


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", [1, 777])
def test_arena_within_bounds_at_default_interval(arena, record, seed):
    """At 4096 the arena heap's small objects are sampled within 4 SD, its 100000-byte
    ones exactly; test.pool, registered with its own interval 1, stays exact."""
    rec = record([arena], interval=INTERVAL, seed=seed)
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    upid = profile.only_upid("arena")
    truth = heap_truth(arena)
    for fn in ("make_nodes", "make_strings"):
        want = truth[("test.arena", fn)].alloc_space
        got = heap_views(profile, upid, "test.arena", fn).alloc_space
        assert abs(got - want) <= 4 * math.sqrt(INTERVAL * want), (fn, got, want, profile.describe_process(upid))
    assert heap_views(profile, upid, "test.arena", "make_big") == truth[("test.arena", "make_big")]
    assert heap_views(profile, upid, "test.pool", "make_pooled") == truth[("test.pool", "make_pooled")]
    rows = profile.query("SELECT COUNT(*) AS n FROM heap_profile WHERE upid = ? AND heap_name = 'test.pool'", (upid,))
    assert rows[0]["n"] >= 1


@pytest.mark.timeout(60)
def test_arena_not_profiled_is_a_no_op(arena, record):
    """Without record the calls find no client: same output, same status."""
    plain = run_process([arena])
    assert plain.returncode == 0, plain.describe()
    assert plain.stdout.startswith(b"arena: 1241600 bytes used, checksum "), plain.stdout
    rec = record([arena], interval=INTERVAL)
    assert rec.returncode == 0 and rec.stdout.startswith(plain.stdout), rec.describe()


PY_PROGRAM = textwrap.dedent("""\
    import ctypes, sys
    import heapscope.heaps as heaps

    def fill_buffers(pool):
        for i in range(400):
            pool.alloc(0x10000 + 64 * i, 48)

    def drop_buffers(pool):
        for i in range(0, 400, 4):
            pool.free(0x10000 + 64 * i)

    for bad in ("", "x" * 32, "has space", "caf\\u00e9", "libc.malloc", "a/b"):
        try:
            heaps.register(bad)
        except ValueError:
            pass
        else:
            sys.exit("accepted bad name %r" % bad)
    pool = heaps.register("py.buffers")
    assert heaps.register("py.buffers").id == pool.id
    print("enabled" if pool.enabled else "disabled")
    if pool.enabled:  # the C side refuses bad names too
        reg = ctypes.CDLL(None).heapscope_heap_register_v1
        reg.restype = ctypes.c_uint32
        assert reg(b"bad name", ctypes.c_uint64(0)) == 0
        assert reg(b"y" * 40, ctypes.c_uint64(0)) == 0
        assert reg(None, ctypes.c_uint64(0)) == 0
    fill_buffers(pool)
    drop_buffers(pool)
    pool.free(0x999999)       # never reported: ignored
    pool.free(0x10000)        # freed twice: ignored
    pool.alloc(0, 8); pool.alloc(1 << 60, 8)  # out of range: ignored
    print("done")
""")


@pytest.mark.timeout(120)
def test_python_api(record, tmp_path):
    script = tmp_path / "pyheap.py"
    script.write_text(PY_PROGRAM)
    plain = run_process([sys.executable, script])
    assert plain.returncode == 0 and plain.stdout == b"disabled\ndone\n", plain.describe()
    rec = record([sys.executable, script], interval=1)
    assert rec.returncode == 0 and rec.stdout == b"enabled\ndone\n", rec.describe()
    profile = rec.profile()
    (upid,) = [r["upid"] for r in profile.processes()]
    rows = profile.query("SELECT SUM(size) AS s, SUM(count) AS n,"
                         " SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a FROM heap_profile_allocation"
                         " WHERE upid = ? AND heap_name = 'py.buffers'", (upid,))
    assert (rows[0]["a"], rows[0]["s"], rows[0]["n"]) == (400 * 48, 300 * 48, 300), profile.describe_process(upid)


@pytest.mark.timeout(120)
def test_heap_views_and_exports(arena, record, tmp_path):
    rec = record([arena], interval=1)
    assert rec.returncode == 0, rec.describe()
    db = str(rec.db)
    report = run_process([*HEAPSCOPE, "report", db])
    assert report.returncode == 0, report.describe()
    text = report.stdout.decode()
    for name in ("libc.malloc", "test.arena", "test.pool"):
        assert name in text.split("\n\n")[0], text
    one = run_process([*HEAPSCOPE, "report", db, "--heap", "test.arena", "--top", "50"])
    assert one.returncode == 0 and b"make_nodes" in one.stdout and b"make_pooled" not in one.stdout, one.describe()
    bad = run_process([*HEAPSCOPE, "report", db, "--heap", "nope"])
    assert bad.returncode == 2 and bad.stderr.count(b"\n") == 1 and b"test.pool" in bad.stderr, bad.describe()
    pprof = tmp_path / "pool.pb.gz"
    out = run_process([*HEAPSCOPE, "export", db, "-f", "pprof", "--heap", "test.pool", "-o", pprof])
    assert out.returncode == 0, out.describe()
    raw = gzip.decompress(pprof.read_bytes())
    assert b"\x32\x04heap" in raw and b"test.pool" in raw and b"make_nodes" not in raw
    trace = tmp_path / "all.pftrace"
    out = run_process([*HEAPSCOPE, "export", db, "-f", "perfetto", "-o", trace])
    assert out.returncode == 0, out.describe()
    data = trace.read_bytes()
    assert b"test.arena" in data and b"test.pool" in data and b"libc.malloc" in data
    html = tmp_path / "f.html"
    out = run_process([*HEAPSCOPE, "flamegraph", db, "--heap", "test.pool", "-o", html])
    assert out.returncode == 0 and html.stat().st_size > 0, out.describe()


THREADED = textwrap.dedent("""\
    import threading
    import heapscope.heaps as heaps

    pool = heaps.register("py.shared")
    def worker(k):
        base = (k + 1) << 32
        for i in range(3000):
            pool.alloc(base + 16 * i, 32)
        for i in range(0, 3000, 2):
            pool.free(base + 16 * i)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("enabled" if pool.enabled else "disabled")
""")


@pytest.mark.timeout(120)
def test_python_threads_share_a_heap_exactly(record, tmp_path):
    """Four threads on one heap (ctypes drops the GIL: the calls really overlap):
    the heap's lock and its own sequence keep every view exact at -i 1."""
    script = tmp_path / "threaded.py"
    script.write_text(THREADED)
    rec = record([sys.executable, script], interval=1)
    assert rec.returncode == 0 and rec.stdout == b"enabled\n", rec.describe()
    profile = rec.profile()
    (upid,) = [r["upid"] for r in profile.processes()]
    rows = profile.query("SELECT SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a, SUM(size) AS s,"
                         " SUM(count) AS n FROM heap_profile_allocation WHERE upid = ? AND heap_name = 'py.shared'",
                         (upid,))
    assert (rows[0]["a"], rows[0]["s"], rows[0]["n"]) == (4 * 3000 * 32, 4 * 1500 * 32, 4 * 1500)
    stats = profile.stats(upid)
    assert stats["custom_heap_sequence_gaps"] == 0 and stats["custom_heap_samples"] == 12000, stats


@pytest.mark.timeout(60)
def test_arena_with_a_dormant_client_is_a_no_op(arena):
    """The client preloaded but no session (no HEAPSCOPE_SOCKET): register finds the
    functions, they answer 0, and the program runs as without them."""
    import heapscope

    lib = Path(heapscope.__file__).parent / "client" / "libheapscope.so"
    plain = run_process([arena])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEAPSCOPE_")}
    dormant = subprocess.run([str(arena)], env={**env, "LD_PRELOAD": str(lib)}, capture_output=True, timeout=30)
    assert dormant.returncode == 0 and dormant.stdout == plain.stdout, dormant


@pytest.mark.timeout(120)
@pytest.mark.parametrize("compiler", [["cc", "-x", "c", "-std=c11", "-pedantic"], ["c++", "-x", "c++", "-std=c++17"]])
def test_header_compiles_cleanly(tmp_path, compiler):
    """The installed header builds warning-free as strict C11 (no _GNU_SOURCE: RTLD_DEFAULT
    comes from its fallback) and as C++."""
    include = subprocess.run([*HEAPSCOPE, "--include"], capture_output=True, text=True, timeout=60, check=True)
    src = tmp_path / "use.txt"
    src.write_text("#include <heapscope.h>\nint main(void) { uint32_t h = heapscope_heap_register(\"x.y\");\n"
                   "  int v = 0; heapscope_heap_alloc(h, &v, sizeof v); heapscope_heap_free(h, &v);\n"
                   "  return (int)heapscope_heap_register_interval(\"x.z\", 1); }\n")
    out = subprocess.run([*compiler, "-Wall", "-Wextra", "-Werror", "-I", include.stdout.strip(), "-o",
                          str(tmp_path / "use"), str(src)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    run = run_process([tmp_path / "use"])
    assert run.returncode == 0, run.describe()  # not profiled: register gave 0
