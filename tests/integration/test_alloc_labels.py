"""Allocation labels end to end (docs/labels.md): a C server-like program labelling each
request with its tenant (tests/programs/labelled.c, the header's push/pop) and a Python
program with threads and asyncio tasks (tests/programs/python/labelled.py), recorded at
-i 1 so that every figure is exact; truth from the programs themselves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, PROGRAMS_DIR, Profile, Recorder, run_process


def built(tmp_path_factory: pytest.TempPathFactory, name: str, sources: tuple[str, ...] = ()) -> Path:
    """A program of tests/programs built against the installed header, as a user would: `name`.c,
    or its `sources` (paths in tests/programs)."""
    include = subprocess.run([*HEAPSCOPE, "--include"], capture_output=True, text=True, timeout=60, check=True)
    out = tmp_path_factory.mktemp(name) / name
    files = [str(PROGRAMS_DIR / f) for f in sources or (f"{name}.c",)]
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-pthread", "-Wall", "-Wextra",
                    "-Werror", "-I", include.stdout.strip(), "-o", str(out), *files], check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built(tmp_path_factory, "labelled")


def truth_of(argv: list[str], key: str = "tenant") -> dict[str, list[int]]:
    out = subprocess.run([*argv, "--print-truth"], capture_output=True, text=True, timeout=60, check=True)
    return {p[1]: [int(x) for x in p[2:]] for p in (line.split() for line in out.stdout.splitlines())
            if p and p[0] == key}


def per_tenant(profile: Profile, heap: str, key: str = "tenant") -> dict[str, tuple[int, int]]:
    rows = profile.query(
        "SELECT l.value AS v, SUM(CASE WHEN a.size > 0 THEN a.size ELSE 0 END) AS alloc, SUM(a.size) AS unrel"
        " FROM heapscope_label_allocation a JOIN heapscope_label l ON l.upid = a.upid"
        " AND l.label_set_id = a.label_set_id AND l.key = ? WHERE a.heap_name = ? GROUP BY l.value", (key, heap))
    return {r["v"]: (r["alloc"], r["unrel"]) for r in rows}


def test_c_labels_per_tenant_are_exact(labelled: Path, tmp_path: Path) -> None:
    rec = Recorder(tmp_path)([labelled])
    assert rec.returncode == 0, rec.describe()
    truth = truth_of([str(labelled)])
    profile = rec.profile()
    got = per_tenant(profile, "libc.malloc")
    assert got == {t: (v[0], v[1]) for t, v in truth.items()}, (got, truth)
    routes = truth_of([str(labelled)], "route")
    got = per_tenant(profile, "libc.malloc", "route")
    assert got == {r: (v[0], v[1]) for r, v in routes.items()}, (got, routes)
    # The seed's table still holds every sample: the labelled rows are a part of its rows.
    total = profile.query("SELECT SUM(size) AS s FROM heap_profile_allocation")[0]["s"]
    assert total >= sum(v[1] for v in truth.values()) + 4 * 100
    # The report's table says the same, and --label keeps one tenant's allocations only.
    out = run_process([*HEAPSCOPE, "report", str(rec.db), "--by-label", "tenant"], timeout=60)
    assert out.returncode == 0, out.describe()
    text = out.stdout.decode()
    assert re.search(r"133\.0 KiB\s+1\.9 MiB\s+initech", text), text
    assert "(no tenant)" in text and "handle_request" in text
    leaks = run_process([*HEAPSCOPE, "leaks", str(rec.db), "--label", "tenant=globex"], timeout=60)
    assert leaks.returncode == 0, leaks.describe()
    assert f"{truth['globex'][1] / 1024:.1f} KiB" in leaks.stdout.decode(), leaks.stdout
    bad = run_process([*HEAPSCOPE, "report", str(rec.db), "--label", "tenant"], timeout=60)
    assert bad.returncode == 2 and b"KEY=VALUE" in bad.stderr and b"Traceback" not in bad.stderr, bad.describe()
    none = run_process([*HEAPSCOPE, "flamegraph", str(rec.db), "--label", "tenant=nobody", "-o",
                        str(tmp_path / "f.html")], timeout=60)
    assert none.returncode == 2 and b"values of tenant: acme, globex, initech" in none.stderr, none.describe()
    assert not (tmp_path / "f.html").exists()


def test_c_first_pushes_during_the_headers_first_lookup_are_applied(tmp_path_factory: pytest.TempPathFactory,
                                                                    tmp_path: Path) -> None:
    """Workers that start together push their first label while another one's push is still
    in the header's first lookup of the client (labelfirst.c holds that lookup until they all
    pushed): each finds the client itself, so no push is refused and every thread's block is
    booked under its own tenant (they were unlabelled, one run in thirty, in labelled.c)."""
    program = built(tmp_path_factory, "labelfirst")
    rec = Recorder(tmp_path)([program])
    assert rec.returncode == 0, rec.describe()
    assert rec.stdout == b"pushes 0 0 0 0 0 0 0 0\n", rec.describe()
    truth = truth_of([str(program)])
    assert per_tenant(rec.profile(), "libc.malloc") == {t: (v[0], v[1]) for t, v in truth.items()}, truth


def test_c_push_and_pop_in_two_source_files_pair_up(tmp_path_factory: pytest.TempPathFactory,
                                                     tmp_path: Path) -> None:
    """A push in one translation unit and its pop in another (labelsplit/): the pop reaches the
    client the push found (the header's state is one per executable), so what is allocated after
    it is unlabelled; it had stayed under the tenant, the pop a no-op in its file."""
    program = built(tmp_path_factory, "labelsplit", ("labelsplit/main.c", "labelsplit/pop.c"))
    rec = Recorder(tmp_path)([program])
    assert rec.returncode == 0, rec.describe()
    truth = truth_of([str(program)])
    assert per_tenant(rec.profile(), "libc.malloc") == {t: (v[0], v[1]) for t, v in truth.items()}, truth


def test_python_labels_follow_threads_and_tasks(tmp_path: Path) -> None:
    script = PROGRAMS_DIR / "python" / "labelled.py"
    rec = Recorder(tmp_path)([sys.executable, script])
    assert rec.returncode == 0, rec.describe()
    truth = truth_of([sys.executable, str(script)])
    got = per_tenant(rec.profile(), "python.pymalloc")
    assert set(got) == set(truth), got
    for tenant, (size,) in truth.items():
        # The payloads exactly, plus each bytearray's object and the list's growth: a task that
        # took another tenant's label would be off by a whole 100 kB payload or more.
        assert size <= got[tenant][0] <= size * 1.03, (tenant, got[tenant], size)
    # --label over the default heaps of a Python program (libc.malloc + python.pymalloc).
    out = run_process([*HEAPSCOPE, "report", str(rec.db), "--label", "tenant=acme", "--view", "alloc_space",
                       "--pid", str(_pid(rec.profile()))], timeout=60)
    assert out.returncode == 0, out.describe()
    m = re.search(r"alloc_space:\s+([\d.]+) KiB", out.stdout.decode())
    assert m is not None, out.stdout
    assert truth["acme"][0] <= float(m.group(1)) * 1024 <= truth["acme"][0] * 1.03 + 52, out.stdout


FOUND = """
import heapscope, heapscope._labels as fast
with heapscope.label(tenant="acme") as block:
    print("found", fast.found(), "bound", block._entered[-1][1] != 0)
"""


def test_python_blocks_call_the_client_directly_only_when_profiled(tmp_path: Path) -> None:
    """heapscope._labels (a block's direct C call into the client) finds the client's bind
    under record and the block's context is bound; without record it finds nothing and the
    block binds nothing."""
    rec = Recorder(tmp_path)([sys.executable, "-c", FOUND])
    assert rec.returncode == 0, rec.describe()
    assert b"found True bound True" in rec.stdout, rec.describe()
    plain = run_process([sys.executable, "-c", FOUND], timeout=60)
    assert plain.returncode == 0, plain.describe()
    assert b"found False bound False" in plain.stdout, plain.describe()


LOOK_AGAIN = """
import ctypes, os
import heapscope._labels as fast
from heapscope.launch import client_library_path
text = b"tenant\\0acme\\0"
fast.bind(0, text, 1)  # the first call looks, and finds no client
ctypes.CDLL(client_library_path(), mode=os.RTLD_GLOBAL)  # loaded since, as an attach loads it
seen = []
for _ in range(5000):
    fast.bind(0, text, 1)
    seen.append(fast.found())
print("found at", seen.index(True) if True in seen else -1)
"""


def test_python_blocks_look_for_a_client_loaded_since_every_4096_calls(tmp_path: Path) -> None:
    """A client loaded after the first block (an attach) is found by the 4096th call after
    it, not before: the calls between are one branch each."""
    out = run_process([sys.executable, "-c", LOOK_AGAIN], timeout=60)
    assert out.returncode == 0, out.describe()
    assert b"found at 4095" in out.stdout, out.describe()


def _pid(profile: Profile) -> int:
    """The Python program's pid (an editable install's import may run a build child too)."""
    rows = profile.query("SELECT p.pid FROM process p JOIN heapscope_label l ON l.upid = p.upid LIMIT 1")
    return int(rows[0]["pid"])


def test_overflow_past_the_cap_is_counted_and_said(labelled: Path, tmp_path: Path) -> None:
    rec = Recorder(tmp_path)([labelled, "sets", "1100"])
    assert rec.returncode == 0, rec.describe()
    stats = rec.profile().stats()
    assert stats["label_set_overflow"] == 1100 - 1024, stats
    assert b"labels: 76 samples came past the cap of 1024 label sets" in rec.stderr, rec.describe()
    out = run_process([*HEAPSCOPE, "report", str(rec.db), "--by-label", "heapscope.overflow"], timeout=60)
    assert re.search(r"19\.0 KiB\s+19\.0 KiB\s+true", out.stdout.decode()), out.stdout


@pytest.fixture(scope="module")
def labelled_db(labelled: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rec = Recorder(tmp_path_factory.mktemp("labelled_db"))([labelled])
    assert rec.returncode == 0, rec.describe()
    return rec.db


def _export(db: Path, tmp_path: Path, fmt: str, name: str, *extra: str) -> Path:
    """The state at the end (where the truth's unreleased bytes are); ClickHouse writes every dump."""
    out = tmp_path / name
    end = ("--dump", "end") if fmt != "clickhouse" else ()
    run = run_process([*HEAPSCOPE, "export", str(db), "--format", fmt, *end, "-o", str(out), *extra], timeout=60)
    assert run.returncode == 0, run.describe()
    return out


def test_pprof_samples_carry_the_labels(labelled: Path, labelled_db: Path, tmp_path: Path) -> None:
    truth = truth_of([str(labelled)])
    out = _export(labelled_db, tmp_path, "pprof", "p.pb.gz")
    if shutil.which("go") is None:
        pytest.skip("go not installed: `go tool pprof -tags` not run")
    tags = subprocess.run(["go", "tool", "pprof", "-tags", "-sample_index=inuse_space", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert tags.returncode == 0, tags.stderr
    for tenant, (_alloc, unreleased) in truth.items():
        # pprof's kB are 1024 bytes.
        assert re.search(rf"{unreleased / 1024:.1f}kB \(\s*[\d.]+%\): {tenant}\n", tags.stdout), tags.stdout
    assert "/r0" in tags.stdout and "/r1" in tags.stdout


def test_otlp_samples_carry_the_labels(labelled: Path, labelled_db: Path, tmp_path: Path) -> None:
    profiles_pb2 = pytest.importorskip("opentelemetry.proto.profiles.v1development.profiles_pb2")
    truth = truth_of([str(labelled)])
    data = profiles_pb2.ProfilesData()
    data.ParseFromString(_export(labelled_db, tmp_path, "otlp", "p.otlp").read_bytes())
    strings, attrs = data.dictionary.string_table, data.dictionary.attribute_table
    got: dict[str, int] = {}
    for rp in data.resource_profiles:
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                if strings[prof.sample_type.type_strindex] != "inuse_space":
                    continue
                for s in prof.samples:
                    for i in s.attribute_indices:
                        if strings[attrs[i].key_strindex] == "tenant":
                            value = attrs[i].value.string_value
                            got[value] = got.get(value, 0) + sum(s.values)
    assert got == {t: v[1] for t, v in truth.items()}


def test_clickhouse_rows_carry_the_labels(labelled: Path, labelled_db: Path, tmp_path: Path) -> None:
    truth = truth_of([str(labelled)])
    script = _export(labelled_db, tmp_path, "clickhouse", "rows.sql").read_text()
    got: dict[str, int] = {}
    for line in script.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            tenant = row["labels"].get("tenant")
            if tenant is not None and row["dump"] == max_dump(script):
                got[tenant] = got.get(tenant, 0) + row["space"]
    assert got == {t: v[1] for t, v in truth.items()}


def max_dump(script: str) -> int:
    return max(int(json.loads(line)["dump"]) for line in script.splitlines() if line.startswith("{"))


def test_the_c_api_refuses_what_it_cannot_carry_and_stays_paired(labelled: Path, tmp_path: Path) -> None:
    # Not profiled: every push answers -1 (no client), and the program runs as without heapscope.
    alone = run_process([labelled, "api"], timeout=60)
    assert alone.returncode == 0 and alone.stdout == b"bad_key -1 too_long -1 ok -1 deepest -1 past -1\n"
    rec = Recorder(tmp_path)([labelled, "api"])
    assert rec.returncode == 0, rec.describe()
    assert rec.stdout == b"bad_key -1 too_long -1 ok 0 deepest 0 past -1\n", rec.describe()
    got = per_tenant(rec.profile(), "libc.malloc")
    assert got == {"deep": (4000, 4000)}, got


@pytest.mark.timeout(300)
def test_a_push_to_pyroscope_carries_the_labels(labelled: Path, labelled_db: Path, tmp_path: Path) -> None:
    from fleet_support import PyroscopeServer

    server = PyroscopeServer()
    try:
        run = run_process([*HEAPSCOPE, "push", str(labelled_db), server.url], timeout=120)
        received = list(server.received)
    finally:
        server.close()
    assert run.returncode == 0, run.describe()
    (got,) = received
    if shutil.which("go") is None:
        pytest.skip("go not installed: `go tool pprof -tags` not run")
    f = tmp_path / "received.pb.gz"
    f.write_bytes(got.profile)
    tags = subprocess.run(["go", "tool", "pprof", "-tags", str(f)], capture_output=True, text=True, timeout=300)
    for tenant in truth_of([str(labelled)]):
        assert f": {tenant}\n" in tags.stdout, tags.stdout + tags.stderr
