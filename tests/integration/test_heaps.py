"""Custom heaps: the C header and the Python API, under the real client.

tests/programs/arena.c reports a bump arena on two custom heaps with known
objects per call path; the Python programs below do the same through
heapscope.heaps. Ground truth comes from the programs themselves.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, PROGRAMS_DIR, Profile, Recorder, Views, frame_matches, run_process

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


def heap_process(profile: Profile, heap: str) -> int:
    """The one process with dumps of `heap` (an editable install's import may run a build
    child under the interpreter: it is profiled too, without the heap)."""
    rows = profile.query("SELECT DISTINCT upid FROM heap_profile WHERE heap_name = ?", (heap,))
    assert len(rows) == 1, (heap, rows)
    return int(rows[0]["upid"])


def heaps_of(profile: Profile, upid: int) -> dict[str, int]:
    rows = profile.query("SELECT heap_name, SUM(size) AS s FROM heap_profile_allocation WHERE upid = ?"
                         " GROUP BY heap_name", (upid,))
    return {r["heap_name"]: r["s"] for r in rows}


@pytest.mark.timeout(120)
def test_arena_exact_at_interval_1(arena: Path, record: Recorder) -> None:
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
def test_arena_within_bounds_at_default_interval(arena: Path, record: Recorder, seed: int) -> None:
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
def test_arena_not_profiled_is_a_no_op(arena: Path, record: Recorder) -> None:
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

    for bad in ("", "x" * 32, "has space", "caf\\u00e9", "libc.malloc", "all", "a/b"):
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
        assert reg(b"all", ctypes.c_uint64(0)) == 0
    fill_buffers(pool)
    drop_buffers(pool)
    pool.free(0x999999)       # never reported: ignored
    pool.free(0x10000)        # freed twice: ignored
    pool.alloc(0, 8); pool.alloc(1 << 60, 8)  # out of range: ignored
    print("done")
""")


@pytest.mark.timeout(120)
def test_python_api(record: Recorder, tmp_path: Path) -> None:
    script = tmp_path / "pyheap.py"
    script.write_text(PY_PROGRAM)
    plain = run_process([sys.executable, script])
    assert plain.returncode == 0 and plain.stdout == b"disabled\ndone\n", plain.describe()
    rec = record([sys.executable, script], interval=1)
    assert rec.returncode == 0 and rec.stdout == b"enabled\ndone\n", rec.describe()
    profile = rec.profile()
    upid = heap_process(profile, "py.buffers")
    rows = profile.query("SELECT SUM(size) AS s, SUM(count) AS n,"
                         " SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a FROM heap_profile_allocation"
                         " WHERE upid = ? AND heap_name = 'py.buffers'", (upid,))
    assert (rows[0]["a"], rows[0]["s"], rows[0]["n"]) == (400 * 48, 300 * 48, 300), profile.describe_process(upid)


@pytest.mark.timeout(120)
def test_heap_views_and_exports(arena: Path, record: Recorder, tmp_path: Path) -> None:
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
def test_python_threads_share_a_heap_exactly(record: Recorder, tmp_path: Path) -> None:
    """Four threads on one heap (ctypes drops the GIL: the calls really overlap):
    the heap's lock and its own sequence keep every view exact at -i 1."""
    script = tmp_path / "threaded.py"
    script.write_text(THREADED)
    rec = record([sys.executable, script], interval=1)
    assert rec.returncode == 0 and rec.stdout == b"enabled\n", rec.describe()
    profile = rec.profile()
    upid = heap_process(profile, "py.shared")
    rows = profile.query("SELECT SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a, SUM(size) AS s,"
                         " SUM(count) AS n FROM heap_profile_allocation WHERE upid = ? AND heap_name = 'py.shared'",
                         (upid,))
    assert (rows[0]["a"], rows[0]["s"], rows[0]["n"]) == (4 * 3000 * 32, 4 * 1500 * 32, 4 * 1500)
    stats = profile.stats(upid)
    assert stats["custom_heap_sequence_gaps"] == 0 and stats["custom_heap_samples"] == 12000, stats


@pytest.mark.timeout(60)
def test_arena_with_a_dormant_client_is_a_no_op(arena: Path) -> None:
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
def test_header_compiles_cleanly(tmp_path: Path, compiler: list[str]) -> None:
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


# -- default views show one heap; the others are listed and picked ---------------------------

ARENA_PEAK = 2000 * 64 + 500 * 208 + 10 * 100000  # test.arena at its own peak (arena.c)
POOL_PEAK = 300 * 32


def heap_peak_bytes(profile: Profile, upid: int) -> dict[str, int]:
    return {r["heap_name"]: r["s"] for r in profile.query(
        "SELECT heap_name, SUM(size) AS s FROM heapscope_peak_allocation WHERE upid = ? GROUP BY heap_name", (upid,))}


def pprof_samples(path: Path) -> list[tuple[dict[str, str], list[int]]]:
    """(string labels, values) of every sample of a gzip pprof file."""
    from export_support import decode, packed_ints

    fields = decode(gzip.decompress(path.read_bytes()))
    strings = [v.decode() for k, v in fields if k == 6 and isinstance(v, bytes)]
    out = []
    for k, v in fields:
        if k != 2 or not isinstance(v, bytes):
            continue
        labels, values = {}, []
        for sk, sv in decode(v):
            if sk == 2 and isinstance(sv, bytes):
                values = packed_ints(sv)
            elif sk == 3 and isinstance(sv, bytes):
                lab = dict(decode(sv))
                if 2 in lab:
                    labels[strings[int(lab[1])]] = strings[int(lab[2])]
        out.append((labels, values))
    return out


@pytest.fixture(scope="module")
def arena_db(arena: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """arena recorded at -i 1 (libc.malloc, test.arena, test.pool)."""
    db = tmp_path_factory.mktemp("arena_db") / "arena.db"
    run = run_process([*HEAPSCOPE, "record", "-q", "-i", "1", "-o", db, "--", arena], timeout=120)
    assert run.returncode == 0, run.describe()
    return db


@pytest.mark.timeout(120)
def test_default_report_shows_the_malloc_heap_and_lists_the_others(arena_db: Path) -> None:
    """The pool's 4 MiB block is in libc.malloc and its objects in test.arena: the default report
    shows libc.malloc alone (nothing twice), lists each heap with its own peak, --heap all merges."""
    from heapscope.store.reader import open_profile
    from heapscope.store.select import default_heap, select_heap
    from heapscope.view.report import build_reports

    with open_profile(arena_db) as prof:
        assert default_heap(prof) == "libc.malloc"
        (upid,) = [p.info.upid for p in prof.processes()]
        raw = prof.sql_connection().execute(
            "SELECT heap_name, SUM(size) FROM heapscope_peak_allocation WHERE upid = ? GROUP BY heap_name",
            (upid,)).fetchall()
        peaks = {str(h): int(s) for h, s in raw}
        assert peaks["test.arena"] == ARENA_PEAK and peaks["test.pool"] == POOL_PEAK, peaks
        assert select_heap(prof, None) == "libc.malloc"
        (default,) = build_reports(prof, "space")
        assert default.view_total == peaks["libc.malloc"]
        assert select_heap(prof, "all") is None
        (merged,) = build_reports(prof, "space")
        assert merged.view_total == sum(peaks.values())
        assert select_heap(prof, "test.pool") == "test.pool"
        (pool,) = build_reports(prof, "space")
        assert pool.view_total == POOL_PEAK and "make_pooled" in [*pool.common, *(r.function for r in pool.rows)]
    text = run_process([*HEAPSCOPE, "report", arena_db, "--top", "50"])
    assert text.returncode == 0, text.describe()
    head, body = text.stdout.decode().split("\n\n", 1)
    assert re.search(r"test\.arena\s+1\.2 MiB\s+2510 samples", head), head
    assert "showing: libc.malloc" in head and "make_nodes" not in body and "arena_new" in body, text.stdout
    merged_text = run_process([*HEAPSCOPE, "report", arena_db, "--heap", "all", "--top", "50"]).stdout.decode()
    assert "counted twice" in merged_text and "make_nodes" in merged_text and "arena_new" in merged_text


@pytest.mark.timeout(120)
def test_record_summary_names_the_heap_and_lists_the_others(arena: Path, record: Recorder) -> None:
    rec = record([arena], interval=1)
    assert rec.returncode == 0, rec.describe()
    err = rec.stderr.decode()
    assert re.search(r"arena \(pid \d+\): peak 4\.0 MiB sampled unreleased in libc\.malloc", err), err
    assert "other heaps, each at its own peak (report --heap NAME): test.arena 1.2 MiB, test.pool 9.4 KiB" in err


@pytest.mark.timeout(120)
def test_exports_default_to_one_heap_and_take_heap(arena_db: Path, tmp_path: Path) -> None:
    """pprof, speedscope, collapsed: the default heap (pprof: every sample labelled with its heap);
    --heap all in pprof: every heap, each sample labelled; perfetto: every heap under its name."""
    def export(fmt: str, *extra: str) -> Path:
        out = tmp_path / f"{fmt}-{'-'.join(extra) or 'default'}.out"
        run = run_process([*HEAPSCOPE, "export", arena_db, "-f", fmt, "-o", out, *extra])
        assert run.returncode == 0, run.describe()
        return out

    default = pprof_samples(export("pprof"))
    assert default and {lab.get("heap") for lab, _ in default} == {"libc.malloc"}, default
    every = pprof_samples(export("pprof", "--heap", "all"))
    by_heap: dict[str, int] = {}
    for lab, values in every:
        by_heap[lab["heap"]] = by_heap.get(lab["heap"], 0) + values[3]  # inuse_space at each heap's peak
    assert by_heap["test.arena"] == ARENA_PEAK and by_heap["test.pool"] == POOL_PEAK, by_heap
    assert by_heap["libc.malloc"] == sum(v[3] for _, v in default)
    for fmt in ("collapsed", "speedscope"):
        text = export(fmt).read_text()
        assert "arena_new" in text and "make_nodes" not in text, fmt
        assert "make_nodes" in export(fmt, "--heap", "test.arena").read_text()
    trace = export("perfetto").read_bytes()
    assert all(name in trace for name in (b"libc.malloc", b"test.arena", b"test.pool"))
    one = export("perfetto", "--heap", "test.pool").read_bytes()
    assert b"test.pool" in one and b"test.arena" not in one


@pytest.mark.timeout(180)
def test_flamegraph_heap_picker_in_the_browser(arena_db: Path, tmp_path: Path) -> None:
    """Every heap is in the page; it opens at libc.malloc, the picker switches heaps (the same
    process stays selected) and back, the merged entry holds them all."""
    from test_views import browser

    html = tmp_path / "heaps.html"
    run = run_process([*HEAPSCOPE, "flamegraph", arena_db, "-o", html])
    assert run.returncode == 0, run.describe()
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('space'),"
                             " [...document.querySelectorAll('#heap option')].map((o) => o.textContent),"
                             " document.getElementById('heap-field').hidden]"},
        {"do": "select", "selector": "#heap", "label": "test.arena"},
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('space'),"
                             " window.heapscope.frameCentre('make_nodes') !== null,"
                             " window.heapscope.frameCentre('arena_new') !== null]"},
        {"do": "select", "selector": "#heap", "label": "test.pool"},
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('objects')]"},
        {"do": "select", "selector": "#heap", "label": "all heaps merged (pools counted twice)"},
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('space')]"},
        {"do": "select", "selector": "#heap", "label": "libc.malloc"},
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('space'),"
                             " window.heapscope.frameCentre('make_nodes') === null]"},
        {"do": "screenshot", "path": str(tmp_path / "heaps.png")},
    ])
    r = res["results"]
    malloc_total = r[0][1]
    assert r[0] == ["libc.malloc", malloc_total, ["libc.malloc", "test.arena", "test.pool",
                                                  "all heaps merged (pools counted twice)"], False], r[0]
    assert malloc_total >= 4 * 1024 * 1024
    assert r[2] == ["test.arena", ARENA_PEAK, True, False], r[2]
    assert r[4] == ["test.pool", 300], r[4]
    assert r[6] == ["all", malloc_total + ARENA_PEAK + POOL_PEAK], r[6]
    assert r[8] == ["libc.malloc", malloc_total, True], r[8]
    one = tmp_path / "pool.html"
    run = run_process([*HEAPSCOPE, "flamegraph", arena_db, "--heap", "test.pool", "-o", one])
    assert run.returncode == 0, run.describe()
    opened = browser(tmp_path, one, [{"do": "eval", "js": "window.heapscope.heapName()"}])
    assert opened["results"] == ["test.pool"]


@pytest.mark.timeout(60)
def test_a_profile_with_one_heap_has_no_picker(tmp_path: Path) -> None:
    """No custom heaps: the page data and report are as before (no heap list, no picker)."""
    from heapscope.model import ProcessInfo, Upid
    from heapscope.store.reader import open_profile
    from heapscope.store.select import default_heap, heap_names, select_heap
    from heapscope.store.writer import ProfileWriter
    from heapscope.view.flamegraph import payload
    from heapscope.view.flamegraph_heaps import heap_graphs

    db = tmp_path / "one.db"
    w = ProfileWriter(db)
    w.add_process(ProcessInfo(Upid(1), 42, 1, "x", "x", "/x", 0, 1))
    w.commit()
    w.close()
    with open_profile(db) as prof:
        assert heap_names(prof) == [] and default_heap(prof) is None and select_heap(prof, None) is None
        heaps, at = heap_graphs(prof)
        assert "heaps" not in payload(heaps[at].graphs, title="t", heaps=heaps, heap=at)


# -- attach (record -p): heaps registered before it come by registering again ---------------------

ATTACH_PROGRAM = r"""
#include <heapscope.h>
#include <stdio.h>

static char pool[1 << 16];

__attribute__((noinline)) static void fill_pool(uint32_t heap) {
  for (int i = 0; i < 100; i++)
    heapscope_heap_alloc(heap, pool + 64 * i, 48);
}

int main(void) {
  uint32_t heap = heapscope_heap_register("att.pool"); /* not profiled yet: 0 */
  printf("ready %u\n", (unsigned)heap);
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (line[0] == 'r') { /* the program's own choice: register again while the id is 0 */
      if (heap == 0)
        heap = heapscope_heap_register("att.pool");
      printf("heap %d\n", heap != 0);
    } else if (line[0] == 'a') {
      fill_pool(heap);
      printf("filled\n");
    } else if (line[0] == 'q') {
      break;
    }
    fflush(stdout);
  }
  return 0;
}
"""


def attach_and_register_again(argv: list[str], db: Path) -> None:
    """Runs the dialogue of ATTACH_PROGRAM / ATTACH_PY: attach to the started
    target, fill its pool while its heap id is 0, register again, fill again,
    detach, and check the summary says what the attach could not see."""
    import signal

    from test_sessions import Proc

    target = Proc(argv)
    rec = None
    try:
        target.out.wait_for(lambda s: s == "ready 0", "target start")
        rec = Proc([*HEAPSCOPE, "-v", "record", "-i", "1", "-o", str(db), "-p", str(target.p.pid)])
        rec.err.wait_for(lambda s: "attached to pid" in s, "the attach")
        target.send("a")  # on heap 0: nothing
        target.out.wait_for(lambda s: s == "filled", "the fill on heap 0")
        target.send("r")
        target.out.wait_for(lambda s: s == "heap 1", "the heap registered again")
        target.send("a")
        target.out.wait_for(lambda s: s == "filled", "the fill on the heap")
        rec.p.send_signal(signal.SIGINT)  # detach
        assert rec.wait() == 0, "\n".join(rec.err.seen)
        rec.err.wait_for(lambda s: "custom heaps registered before the attach are not seen" in s, "the summary line")
        target.send("q")
        assert target.wait() == 0
    finally:
        target.kill()
        if rec is not None:
            rec.kill()


@pytest.mark.timeout(120)
def test_attach_gets_a_heap_registered_again(tmp_path: Path) -> None:
    """A heap registered before the attach (id 0) is not seen; registering it again after the
    attach finds the client (the header looks up again while not found) and every allocation
    after that is booked exactly; the summary and stats say what attach cannot see."""
    import shutil

    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (apt-get install gdb)")
    include = subprocess.run([*HEAPSCOPE, "--include"], capture_output=True, text=True, timeout=60, check=True)
    src = tmp_path / "attach_heap.c"
    src.write_text(ATTACH_PROGRAM)
    exe = tmp_path / "attach_heap"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-Wall", "-Werror", "-I", include.stdout.strip(),
                    "-o", str(exe), str(src)], check=True, timeout=120)
    db = tmp_path / "att.db"
    attach_and_register_again([str(exe)], db)
    profile = Profile(db)
    upid = heap_process(profile, "att.pool")
    stats = profile.stats(upid)
    # Custom heaps' stacks are walked as malloc's are: libunwind alone gave none in some attached
    # sessions (1 run in 8: every sample "[no frames]")
    assert stats.get("unwinding_errors", 0) == 0, stats
    assert heap_views(profile, upid, "att.pool", "fill_pool") == Views(100 * 48, 100, 100 * 48, 100)
    assert stats["custom_heaps_after_attach"] == 1 and stats["custom_heap_samples"] == 100, stats


ATTACH_PY = textwrap.dedent("""\
    import sys
    import heapscope.heaps as heaps

    def fill_pool(pool):
        for i in range(100):
            pool.alloc(0x10000 + 64 * i, 48)

    pool = heaps.register("att.py")
    print("ready", pool.id, flush=True)
    for line in sys.stdin:
        if line.startswith("r"):
            if not pool.enabled:
                pool = heaps.register("att.py")  # looks the client up again while not found
            print("heap", int(pool.enabled), flush=True)
        elif line.startswith("a"):
            fill_pool(pool)
            print("filled", flush=True)
        elif line.startswith("q"):
            break
""")


@pytest.mark.timeout(120)
def test_attach_python_heap_registered_again(tmp_path: Path) -> None:
    """The same from Python: heapscope.heaps.register looks the functions up again until found."""
    import shutil

    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (apt-get install gdb)")
    script = tmp_path / "attach_heap.py"
    script.write_text(ATTACH_PY)
    db = tmp_path / "attpy.db"
    attach_and_register_again([sys.executable, str(script)], db)
    profile = Profile(db)
    upid = heap_process(profile, "att.py")
    rows = profile.query("SELECT SUM(size) AS s, SUM(count) AS n FROM heap_profile_allocation"
                         " WHERE upid = ? AND heap_name = 'att.py'", (upid,))
    assert (rows[0]["s"], rows[0]["n"]) == (100 * 48, 100), profile.describe_process(upid)


@pytest.mark.timeout(120)
def test_fleet_outputs_count_each_heap_once(arena_db: Path, tmp_path: Path) -> None:
    """ClickHouse rows: one heap per row with that heap's own values (not the heaps' sum);
    pprof pushed or served (pprof_source.build on a profile as the fleet opens it): the default heap."""
    from heapscope.fleet import clickhouse, pprof_source
    from heapscope.store.reader import open_profile
    from heapscope.store.select import select_heap

    with open_profile(arena_db) as prof:
        (upid,) = [p.info.upid for p in prof.processes()]
        end = {}
        for heap in ("libc.malloc", "test.arena", "test.pool"):
            select_heap(prof, heap)
            end[heap] = sum(v.space for v in prof.callsite_values(upid).values())
        select_heap(prof, "all")
        got: dict[tuple[str, int], int] = {}
        for row in clickhouse.rows(prof, host="h"):
            key = (row["heap"], row["dump"])
            got[key] = got.get(key, 0) + row["space"]
        assert got == {(h, 1): v for h, v in end.items()}, (got, end)
        select_heap(prof, None)
        built = pprof_source.build(prof)
    out = tmp_path / "fleet.pb.gz"
    out.write_bytes(built.data)
    samples = pprof_samples(out)
    assert samples and {lab.get("heap") for lab, _ in samples} == {"libc.malloc"}


@pytest.mark.timeout(120)
def test_leaks_and_diff_take_heap(arena_db: Path) -> None:
    """leaks and diff show the default heap, say so, and take --heap."""
    leaks = run_process([*HEAPSCOPE, "leaks", arena_db, "--top", "50"])
    assert leaks.returncode == 0, leaks.describe()
    text = leaks.stdout.decode()
    assert text.startswith("heap: libc.malloc (others: test.arena, test.pool; --heap NAME)") and "make_" not in text
    arena_leaks = run_process([*HEAPSCOPE, "leaks", arena_db, "--heap", "test.arena", "--top", "50"]).stdout.decode()
    assert "make_nodes" in arena_leaks and "arena_new" not in arena_leaks, arena_leaks
    diff = run_process([*HEAPSCOPE, "diff", arena_db, arena_db, "--heap", "test.pool", "--dump-a", "end",
                        "--dump-b", "end"])
    assert diff.returncode == 0 and b"space: 4.7 KiB" in diff.stdout, diff.describe()
    # by default both peaks, as report shows them
    report = run_process([*HEAPSCOPE, "report", arena_db, "--heap", "test.pool"]).stdout.decode()
    peak = re.search(r"space:\s+(\S+ \S+)", report)
    diff = run_process([*HEAPSCOPE, "diff", arena_db, arena_db, "--heap", "test.pool"])
    assert peak is not None and f"space: {peak.group(1)} (arena.db peak at ".encode() in diff.stdout, \
        (report, diff.describe())
    bad = run_process([*HEAPSCOPE, "diff", arena_db, arena_db, "--heap", "nope"])
    assert bad.returncode == 2 and b"no heap named 'nope'" in bad.stderr, bad.describe()


@pytest.mark.timeout(120)
def test_the_example_arena(record: Recorder, tmp_path: Path) -> None:
    """examples/arena/arena.c builds as its comment says, runs alike with and without record,
    and its last round (5000 tokens of 48 bytes, 500 names of 112) is live at the end."""
    include = subprocess.run([*HEAPSCOPE, "--include"], capture_output=True, text=True, timeout=60, check=True)
    exe = tmp_path / "arena"
    src = Path(__file__).resolve().parents[2] / "examples" / "arena" / "arena.c"
    subprocess.run(["cc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-I", include.stdout.strip(), "-o", str(exe),
                    str(src)], check=True, timeout=120)
    plain = run_process([exe])
    rec = record([exe], interval=1)
    assert plain.returncode == 0 and rec.returncode == 0 and rec.stdout == plain.stdout, rec.describe()
    profile = rec.profile()
    upid = heap_process(profile, "example.arena")
    assert heaps_of(profile, upid)["example.arena"] == 5000 * 48 + 500 * 112


@pytest.mark.timeout(180)
def test_flamegraph_picker_with_a_heap_a_process_lacks(tmp_path: Path) -> None:
    """Two processes, only the second has app.pool: the page opened on the first (--pid) says
    that heap has no dump there, draws nothing, and comes back to libc.malloc; without --pid
    the picker goes from 'all processes' to app.pool's only process."""
    from test_views import browser

    from heapscope.model import Frame, Mapping, MappingId, ProcessInfo, Upid
    from heapscope.store.writer import ProfileWriter

    db = tmp_path / "two.db"
    w = ProfileWriter(db)
    w.add_mappings([(1, Mapping("", 0, 0, 0, 0, 0, "p"))])
    w.add_frames([(1, Frame(MappingId(1), 0, "from_malloc")), (2, Frame(MappingId(1), 0, "from_pool"))])
    w.add_callsites([(1, 0, None, 1), (2, 0, None, 2)])
    for upid, pid in ((1, 101), (2, 102)):
        w.add_process(ProcessInfo(Upid(upid), pid, 1, f"p{pid}", f"p{pid}", f"/p{pid}", 0, 1))
        w.add_dump(upid, 0, 10, "exit", [(1, 1, 1000 * upid)], "libc.malloc")
    w.add_dump(2, 0, 10, "exit", [(2, 3, 300)], "app.pool")
    w.commit()
    w.close()
    one = tmp_path / "one.html"
    run = run_process([*HEAPSCOPE, "flamegraph", db, "--pid", "101", "-o", one])
    assert run.returncode == 0, run.describe()
    res = browser(tmp_path, one, [
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('space')]"},
        {"do": "select", "selector": "#heap", "label": "app.pool"},
        {"do": "eval", "js": "[window.heapscope.heapName(), document.getElementById('status').textContent,"
                             " window.heapscope.frameCentre('from_malloc')]"},
        {"do": "select", "selector": "#heap", "label": "libc.malloc"},
        {"do": "eval", "js": "[window.heapscope.heapName(), window.heapscope.rootTotal('space')]"},
    ])
    r = res["results"]
    assert r[0] == ["libc.malloc", 1000] and r[4] == ["libc.malloc", 1000], r
    assert r[2] == ["app.pool", "no process has a dump of heap app.pool", None], r
    both = tmp_path / "both.html"
    assert run_process([*HEAPSCOPE, "flamegraph", db, "-o", both]).returncode == 0
    res = browser(tmp_path, both, [
        {"do": "eval", "js": "[window.heapscope.processLabels(), window.heapscope.rootTotal('space')]"},
        {"do": "select", "selector": "#heap", "label": "app.pool"},
        {"do": "eval", "js": "[window.heapscope.processLabels(), window.heapscope.rootTotal('space')]"},
    ])
    r = res["results"]
    # (largest peak first, as report's table: p102 holds 2000 B of libc.malloc, p101 1000)
    assert r[0] == [["all processes", "pid 102 p102", "pid 101 p101"], 3000], r
    assert r[2] == [["pid 102 p102"], 300], r


PLAIN_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  printf("ready 0\n");
  fflush(stdout);
  char line[64];
  static void *keep[100];
  while (fgets(line, sizeof line, stdin)) {
    if (line[0] == 'a') {
      for (int i = 0; i < 100; i++) keep[i] = malloc(48);
      printf("filled\n");
    } else if (line[0] == 'q') {
      break;
    }
    fflush(stdout);
  }
  return keep[0] == NULL;
}
"""


@pytest.mark.timeout(120)
def test_attach_to_a_program_without_custom_heaps_says_nothing_of_them(tmp_path: Path) -> None:
    """The attach note on custom heaps is said only where it applies: a program that does not
    use heapscope.h gets no such line and no custom heap stats."""
    import shutil
    import signal

    from test_sessions import Proc

    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (apt-get install gdb)")
    src, exe, db = tmp_path / "plain.c", tmp_path / "plain", tmp_path / "plain.db"
    src.write_text(PLAIN_PROGRAM)
    subprocess.run(["cc", "-O0", "-g", "-o", str(exe), str(src)], check=True, timeout=120)
    target = Proc([exe])
    rec = None
    try:
        target.out.wait_for(lambda s: s == "ready 0", "target start")
        rec = Proc([*HEAPSCOPE, "-v", "record", "-i", "1", "-o", db, "-p", str(target.p.pid)])
        rec.err.wait_for(lambda s: "attached to pid" in s, "the attach")
        target.send("a")
        target.out.wait_for(lambda s: s == "filled", "the fill")
        rec.p.send_signal(signal.SIGINT)  # detach
        assert rec.wait() == 0, "\n".join(rec.err.seen)
        rec.err.wait_for(lambda s: "next: heapscope report" in s, "the summary's end")
        assert not any("custom heaps" in line for line in rec.err.seen), "\n".join(rec.err.seen)
        target.send("q")
        assert target.wait() == 0
    finally:
        target.kill()
        if rec is not None:
            rec.kill()
    profile = Profile(db)
    [upid] = [r["upid"] for r in profile.query("SELECT upid FROM process")]
    assert "custom_heaps_after_attach" not in profile.stats(upid)
