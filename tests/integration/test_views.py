"""The views people look at, on real recordings: flamegraph HTML (in headless
chromium), diff, leaks, sql --flamegraph and report --tree/--focus/--ignore.

growth.c's ground truth (its header) gives the expected growth between
`growth 2` and `growth 6` and the leaks of each run; tiny.c's gives the totals.
Browser checks drive Debian's chromium through playwright-core installed in
tests/.node (see .ci/run) and skip, saying why, when either is missing.
Screenshots land in the test's tmp_path.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hs_integration import HEAPSCOPE, Programs, Recorder, run_process

from heapscope.model import VIEWS, Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.writer import ProfileWriter
from heapscope.view.diff import changes, dump_ts, pick_process, read_side
from heapscope.view.leaks import find_leaks
from heapscope.view.report import build_reports

pytestmark = pytest.mark.timeout(180)

NODE_MODULES = Path(os.environ.get("HEAPSCOPE_NODE_MODULES")
                    or Path(__file__).resolve().parents[1] / ".node" / "node_modules")
DRIVER = Path(__file__).resolve().parent / "browser" / "drive.cjs"
CHROMIUM = os.environ.get("HS_CHROMIUM", "/usr/bin/chromium")


def heapscope(*args: object, timeout: float = 120) -> str:
    run = run_process([*HEAPSCOPE, *(str(a) for a in args)], timeout=timeout)
    assert run.returncode == 0, run.describe()
    return run.stdout.decode()


def browser(tmp_path: Path, page: Path, steps: list[dict[str, Any]], timeout_ms: int = 20000) -> dict[str, Any]:
    """Run steps on `page` in headless chromium; fail on any console error or network request."""
    missing = [what for what, ok in (
        (CHROMIUM, Path(CHROMIUM).exists()), ("node", shutil.which("node") is not None),
        (str(NODE_MODULES / "playwright-core"), (NODE_MODULES / "playwright-core").exists()),
    ) if not ok]
    if missing:
        pytest.skip(f"browser test needs {', '.join(missing)} (apt-get install chromium nodejs npm;"
                    f" npm install --prefix tests/.node playwright-core)")
    plan = tmp_path / f"plan-{page.stem}.json"
    plan.write_text(json.dumps({"page": str(page.resolve()), "steps": steps, "timeoutMs": timeout_ms}))
    env = {**os.environ, "HS_NODE_MODULES": str(NODE_MODULES), "HS_CHROMIUM": CHROMIUM}
    proc = subprocess.run(["node", str(DRIVER), str(plan)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["errors"] == [], out["errors"]
    assert out["requests"] == [], f"the page asked the network for {out['requests']}"
    return out


def recorded(record: Recorder, programs: Programs, name: str, *args: str) -> Path:
    rec = record([programs.path(name), *args])
    assert rec.returncode == 0, rec.describe()
    return rec.db


def write_multi_dump_profile(path: Path) -> list[int]:
    """A profile of one process with 4 dumps whose unreleased bytes rise and fall; returns them."""
    w = ProfileWriter(path)
    w.set_metadata("command", "synthetic")
    w.add_mappings([(1, Mapping("aa", 0, 0, 0x1000, 0x9000, 0, "/usr/bin/server"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main")), (2, Frame(MappingId(1), 0x20, "handle_request")),
                  (3, Frame(MappingId(1), 0x30, "cache_put"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3)])
    p = ProcessInfo(Upid(1), pid=42, ppid=1, name="server", cmdline="server", exe="/usr/bin/server", uid=0,
                    start_ts=0)
    w.add_process(p)
    w.set_process_flags(p, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=1,
                                        orig_sampling_interval_bytes=1))
    w.add_dump(1, 0, 1_000_000_000, "periodic", [(2, 10, 1000), (3, 5, 5000)], "libc.malloc")
    w.add_dump(1, 1_000_000_000, 2_000_000_000, "periodic", [(3, 5, 5000)], "libc.malloc")
    w.add_dump(1, 2_000_000_000, 3_000_000_000, "periodic", [(3, -8, -8000)], "libc.malloc")
    w.add_dump(1, 3_000_000_000, 4_000_000_000, "exit", [(2, 1, 24000)], "libc.malloc")
    w.commit()
    w.close()
    return [6000, 11000, 3000, 27000]


def write_big_profile(path: Path, callsites: int = 200_000, seed: int = 7) -> None:
    """A profile with `callsites` distinct callsites (a random tree over 4,000 functions
    in three libraries), every leaf allocating, two dumps."""
    rng = random.Random(seed)
    w = ProfileWriter(path)
    libs = ["/usr/bin/bigapp", "/usr/lib/libengine.so", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    w.add_mappings([(i + 1, Mapping(f"{i:02x}", 0, 0, 0x1000 * (i + 1), 0x1000 * (i + 2), 0, lib))
                    for i, lib in enumerate(libs)])
    nfun = 4000
    w.add_frames([(f + 1, Frame(MappingId(1 + f % 3), 0x100 + f * 16,
                                f"ns{f % 37}::Component{f % 113}::method_{f}")) for f in range(nfun)])
    rows: list[tuple[int, int, int | None, int]] = [(1, 0, None, 1)]
    depth = {1: 0}
    for cs in range(2, callsites + 1):
        parent = max(1, cs - 1 - int(rng.expovariate(1 / 40))) if rng.random() < 0.9 else rng.randint(1, cs - 1)
        depth[cs] = depth[parent] + 1
        rows.append((cs, depth[cs], parent, rng.randint(1, nfun)))
    w.add_callsites(rows)
    p = ProcessInfo(Upid(1), pid=7, ppid=1, name="bigapp", cmdline="bigapp", exe=libs[0], uid=0, start_ts=0)
    w.add_process(p)
    first = [(cs, rng.randint(1, 50), rng.randint(16, 50_000)) for cs in range(1, callsites + 1)]
    w.add_dump(1, 0, 1_000_000_000, "periodic", first, "libc.malloc")
    w.add_dump(1, 1_000_000_000, 2_000_000_000, "exit",
               [(cs, -1, -min(size, 16)) for cs, _, size in first[::3]], "libc.malloc")
    w.commit()
    w.close()


# --- leaks, diff, sql, report --------------------------------------------------------------


def test_leaks_of_a_program_with_known_leaks(record: Recorder, programs: Programs) -> None:
    db = recorded(record, programs, "growth", "3")
    with open_profile(db) as prof:
        [pl] = find_leaks(prof)
    got = [(leak.stack[0].function, leak.bytes, leak.objects) for leak in pl.leaks]
    # GIVEN growth 3 keeps shrink_pool 5 x 2000, steady 10 x 500, grow_cache 3 x 1000 and frees temp_work
    assert got == [("shrink_pool", 10000, 5), ("steady", 5000, 10), ("grow_cache", 3000, 3)]
    assert all(leak.stack[1].function == "main" for leak in pl.leaks)
    assert pl.reason.startswith("end (dump 1 of 1, exit,")
    out = heapscope("leaks", db)
    assert "temp_work" not in out
    assert out.index("shrink_pool") < out.index("steady") < out.index("grow_cache")
    assert "17.6 KiB in 18 allocations never freed" in out


def test_leaks_none_when_everything_is_freed(record: Recorder, programs: Programs) -> None:
    db = recorded(record, programs, "growth", "8")  # shrink_pool empty; but cache and steady kept
    with open_profile(db) as prof:
        [pl] = find_leaks(prof)
    assert {leak.stack[0].function for leak in pl.leaks} == {"grow_cache", "steady"}


def test_diff_of_two_runs(record: Recorder, programs: Programs, tmp_path: Path) -> None:
    before = recorded(record, programs, "growth", "2")
    after = recorded(record, programs, "growth", "6")
    sides = []
    for db in (before, after):
        with open_profile(db) as prof:
            proc = pick_process(prof, None)
            ts, label = dump_ts(prof, proc, None)
            sides.append(read_side(prof, proc, ts, label))
    before_side, after_side = sides
    by_leaf = {c.path[-1][0]: (c.before, c.after) for c in changes(before_side, after_side, "space")}
    assert by_leaf == {"grow_cache": (2000, 6000), "shrink_pool": (12000, 4000)}
    deltas = {c.path[-1][0]: c.delta for c in changes(before_side, after_side, "alloc_objects")}
    assert deltas == {"grow_cache": 4, "shrink_pool": -4, "temp_work": 4}

    html = tmp_path / "diff.html"
    out = heapscope("diff", before, after, "--dump-a", "end", "--dump-b", "end", "-o", html)
    growths, shrinks = out.split("largest shrinks:")
    assert "+3.9 KiB" in growths and "grow_cache" in growths and "shrink_pool" not in growths
    assert "-7.8 KiB" in shrinks and "shrink_pool" in shrinks
    assert "steady" not in out
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "[window.heapscope.dumpCount(), window.heapscope.rootTotal('space')]"},
        {"do": "hoverFrame", "name": "grow_cache"},
        {"do": "eval", "js": "document.getElementById('tip').innerText"},
        {"do": "screenshot", "path": str(tmp_path / "diff.png")},
    ])
    assert res["results"][0] == [2, 5000 + 6000 + 4000]
    assert "+3.9 KiB" in res["results"][2]


def test_diff_of_two_dumps_of_one_profile(tmp_path: Path) -> None:
    db = tmp_path / "multi.db"
    write_multi_dump_profile(db)
    out = heapscope("diff", db, "--dump-a", "2", "--dump-b", "-1")
    assert "space: 10.7 KiB (dump 2/4) -> 26.4 KiB (dump 4/4), +15.6 KiB" in out
    assert "handle_request" in out.split("largest shrinks:")[0]
    assert "cache_put" in out.split("largest shrinks:")[1]


def test_sql_flamegraph_and_shell(record: Recorder, programs: Programs) -> None:
    db = recorded(record, programs, "tiny")
    out = heapscope("sql", db, "--flamegraph",
                    "SELECT name, cumulative_size, cumulative_alloc_count FROM experimental_flamegraph"
                    " WHERE name IN ('main', 'tiny_half', 'tiny_free') ORDER BY name")
    rows = [line.split() for line in out.splitlines()[2:-1]]
    assert rows == [["main", "115000", "35"], ["tiny_free", "0", "20"], ["tiny_half", "5000", "4"]]
    header = heapscope("sql", db, "--flamegraph", "--focus", "KEEP").splitlines()[0].split()
    assert header[:6] == ["id", "ts", "upid", "profile_type", "focus_str", "depth"]
    assert header[-3:] == ["parent_id", "source_file", "line_number"]
    run = run_process([*HEAPSCOPE, "sql", str(db)], input=(
        b".tables\nSELECT COUNT(*)\n  FROM process;\n.flamegraph\n"
        b"SELECT name FROM experimental_flamegraph WHERE size = 100000;\n.quit\nSELECT 'not reached';\n"))
    text = run.stdout.decode()
    assert run.returncode == 0, run.describe()
    assert "heap_profile_allocation" in text and "stack_profile_callsite" in text
    assert "tiny_big" in text and "not reached" not in text


def test_report_tree_focus_ignore(record: Recorder, programs: Programs) -> None:
    db = recorded(record, programs, "tiny")
    tree = heapscope("report", db, "--tree", "--min-percent", "0")
    lines = [line for line in tree.splitlines() if "[" in line]
    main = next(line for line in lines if re.search(r" main  \[", line))
    big = next(line for line in lines if re.search(r" tiny_big  \[", line))
    assert main.startswith("  112.3 KiB") and big.index("tiny_big") > main.index("main")
    with open_profile(db) as prof:
        [r] = build_reports(prof, "space", focus=re.compile("tiny_(keep|half)"))
        assert r.view_total == 15000
        [r] = build_reports(prof, "alloc_objects", ignore=re.compile("^tiny_big$"))
        assert r.view_total == 34
    out = heapscope("report", db, "--ignore", "tiny_big")
    assert "\n  space:         14.6 KiB\n" in out


# --- flamegraph HTML in a browser ------------------------------------------------------------


def test_flamegraph_page_of_a_real_profile(record: Recorder, programs: Programs, tmp_path: Path) -> None:
    db = recorded(record, programs, "tiny")
    html = tmp_path / "tiny.html"
    heapscope("flamegraph", db, "-o", html)
    text = html.read_text()
    assert "<script src" not in text and "http://" not in text and "https://" not in text
    with open_profile(db) as prof:
        # the page opens at the peak, for every view
        expected = {v: build_reports(prof, v, dump="peak")[0].view_total for v in VIEWS}
    totals_js = "Object.fromEntries(['space','alloc_space','objects','alloc_objects']" \
                ".map(v => [v, window.heapscope.rootTotal(v)]))"
    res = browser(tmp_path, html, [
        {"do": "eval", "js": totals_js},
        {"do": "screenshot", "path": str(tmp_path / "flame.png")},
        {"do": "type", "selector": "#search", "text": "tiny_ke"},
        {"do": "waitFor", "js": "window.heapscope.matchText() !== ''"},
        {"do": "eval", "js": "window.heapscope.matchText()"},
        {"do": "screenshot", "path": str(tmp_path / "search.png")},
        {"do": "type", "selector": "#search", "text": ""},
        {"do": "clickFrame", "name": "tiny_half"},
        {"do": "eval", "js": "[window.heapscope.zoomName(), document.getElementById('crumbs').innerText]"},
        {"do": "click", "selector": "#views button[data-view='alloc_objects']"},
        {"do": "click", "selector": "#layout button[data-layout='icicle']"},
        {"do": "click", "selector": "#reset"},
        {"do": "hoverFrame", "name": "tiny_keep"},
        {"do": "eval", "js": "document.getElementById('tip').innerText"},
        {"do": "screenshot", "path": str(tmp_path / "icicle.png")},
        {"do": "eval", "js": "document.querySelectorAll('#tl circle').length"},
    ])
    r = res["results"]
    assert r[0] == expected
    assert r[4] == "1 frames match · 9.8 KiB (8.7% of all)"
    assert r[8][0] == "tiny_half" and r[8][1].split("›")[-1].strip() == "tiny_half"
    tip = r[13]
    assert "tiny_keep" in tip and "tiny.c:" in tip and "total" in tip and "10 (" in tip
    assert r[15] == 2  # one dump and the peak: two points


def test_flamegraph_timeline_selects_a_dump(tmp_path: Path) -> None:
    db = tmp_path / "multi.db"
    unreleased = write_multi_dump_profile(db)
    html = tmp_path / "multi.html"
    heapscope("flamegraph", db, "-o", html)
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "document.querySelectorAll('#tl circle.pt').length"},
        {"do": "eval", "js": "window.heapscope.data().processes[0].dumps.map(d => d.totals.space)"},
        {"do": "click", "selector": "#tl circle[data-dump='1']"},
        {"do": "eval", "js": "[window.heapscope.state.dump, window.heapscope.rootTotal('space')]"},
        {"do": "screenshot", "path": str(tmp_path / "timeline.png")},
    ])
    assert res["results"][0] == 4
    assert res["results"][1] == unreleased
    assert res["results"][3] == [1, unreleased[1]]


def write_two_process_profile(path: Path) -> None:
    """server (pid 42): dumps of 1000 then 0 bytes, its peak 9000 bytes at 1.5 s; worker (pid 43):
    one dump of 500 bytes and no peak rows (a profile of before the peak table)."""
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("aa", 0, 0, 0x1000, 0x9000, 0, "/usr/bin/server"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main")), (2, Frame(MappingId(1), 0x20, "handle_request")),
                  (3, Frame(MappingId(1), 0x30, "cache_put"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3)])
    for upid, pid, name in ((1, 42, "server"), (2, 43, "worker")):
        p = ProcessInfo(Upid(upid), pid=pid, ppid=1, name=name, cmdline=name, exe=f"/usr/bin/{name}", uid=0,
                        start_ts=0)
        w.add_process(p)
        w.set_process_flags(p, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=1,
                                            orig_sampling_interval_bytes=1))
    w.add_dump(1, 0, 1_000_000_000, "periodic", [(2, 10, 1000)], "libc.malloc")
    w.add_dump(1, 1_000_000_000, 2_000_000_000, "exit", [(2, -10, -1000), (3, 8, 8000), (3, -8, -8000)],
               "libc.malloc")
    w.add_peak(1, 1_500_000_000, "libc.malloc",
               [(2, 10, 1000, 10, 1000, 1000, 1000), (3, 8, 8000, 8, 8000, 8000, 8000)])
    w.add_dump(2, 0, 1_000_000_000, "exit", [(3, 5, 500)], "libc.malloc")
    w.commit()
    w.close()


def test_flamegraph_opens_at_the_peak_of_all_processes(tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    write_two_process_profile(db)
    html = tmp_path / "two.html"
    heapscope("flamegraph", db, "-o", html)
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "[...document.querySelectorAll('#proc option')].map(o => o.textContent)"},
        {"do": "eval", "js": "[window.heapscope.rootTotal('space'), window.heapscope.rootTotal('objects')]"},
        {"do": "screenshot", "path": str(tmp_path / "all.png")},
        {"do": "eval", "js": "window.heapscope.data().processes[1].dumps.map(d => d.label)"},
        {"do": "eval", "js": "window.heapscope.data().processes[1].start"},
    ])
    r = res["results"]
    # THEN the page opens on "all processes": server at its peak (9000) and worker at its end (500)
    assert r[0] == ["all processes", "pid 42 server", "pid 43 worker"]
    assert r[1] == [9500, 23]
    # AND server's timeline has its dumps and its peak, between them, where the page opens it
    assert r[3] == ["dump 1", "peak", "dump 2"] and r[4] == 1


def write_long_continuous_profile(path: Path, dumps: int) -> None:
    """One process dumped `dumps` times, as a long `-c` recording is: dump k (1-based) adds k
    bytes at cache_put; its peak, 10**6 bytes at handle_request, falls between dumps 3 and 4."""
    w = ProfileWriter(path)
    w.set_metadata("command", "long")
    w.add_mappings([(1, Mapping("aa", 0, 0, 0x1000, 0x9000, 0, "/usr/bin/server"))])
    w.add_frames([(1, Frame(MappingId(1), 0x10, "main")), (2, Frame(MappingId(1), 0x20, "handle_request")),
                  (3, Frame(MappingId(1), 0x30, "cache_put"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3)])
    p = ProcessInfo(Upid(1), pid=42, ppid=1, name="server", cmdline="server", exe="/usr/bin/server", uid=0,
                    start_ts=0)
    w.add_process(p)
    w.set_process_flags(p, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=1,
                                        orig_sampling_interval_bytes=1))
    second = 1_000_000_000
    for k in range(1, dumps + 1):
        w.add_dump(1, (k - 1) * second, k * second, "exit" if k == dumps else "periodic", [(3, 1, k)], "libc.malloc")
    w.add_peak(1, 3 * second + second // 2, "libc.malloc", [(2, 1, 10**6, 1, 10**6, 10**6, 10**6)])
    w.commit()
    w.close()


def _page_data(html: Path) -> dict[str, Any]:
    packed = re.search(r'id="hs-data"[^>]*>([A-Za-z0-9+/=]+)<', html.read_text())
    assert packed, "no packed data in the page"
    import base64
    import gzip
    data: dict[str, Any] = json.loads(gzip.decompress(base64.b64decode(packed.group(1))))
    return data


def test_flamegraph_of_a_long_continuous_recording_carries_a_capped_timeline(tmp_path: Path) -> None:
    # GIVEN a process dumped 250 times (a day of `-c` dumps would be tens of thousands)
    db = tmp_path / "long.db"
    write_long_continuous_profile(db, 250)
    # WHEN its flamegraph is written with the default cap, with --dump 7, and with every dump
    capped, at7, every = tmp_path / "capped.html", tmp_path / "at7.html", tmp_path / "every.html"
    said = heapscope("flamegraph", db, "-o", capped)
    heapscope("flamegraph", db, "-o", at7, "--dump", "7")
    heapscope("flamegraph", db, "-o", every, "--max-dumps", "0")
    # THEN the page carries 100 dumps evenly spread from the first to the last, and the peak
    data = _page_data(capped)
    (proc,) = data["processes"]
    labels = [d["label"] for d in proc["dumps"]]
    kept = [int(x.split()[1]) for x in labels if x != "peak"]
    assert len(kept) == 100 and kept[0] == 1 and kept[-1] == 250 and kept == sorted(kept)
    gaps = {b - a for a, b in itertools.pairwise(kept)}
    assert gaps <= {2, 3}
    # (the peak, at 3.5 s, between the kept dumps around it: dumps 2 and 3 are left out)
    at = labels.index("peak")
    assert labels.count("peak") == 1 and labels[at - 1:at + 2] == ["dump 1", "peak", "dump 4"]
    # AND each kept dump holds what the process held then (every dump before it summed), the peak its own
    for d in proc["dumps"]:
        want = 10**6 if d["label"] == "peak" else sum(range(1, int(d["label"].split()[1]) + 1))
        assert d["totals"]["space"] == want, d["label"]
    assert labels[proc["start"]] == "peak"
    # AND the page and the command say how many were left out, and how to see them all
    line = "timeline: 150 dumps of 1 process left out"
    assert line in data["subtitle"] and data["subtitle"].startswith("long; ")
    assert line in said and "--max-dumps 0" in said
    # AND a dump asked for is kept and opened at, whatever the spread
    d7 = _page_data(at7)["processes"][0]
    assert d7["dumps"][d7["start"]]["label"] == "dump 7" and d7["dumps"][d7["start"]]["totals"]["space"] == 28
    # AND --max-dumps 0 carries every dump, and says nothing left out
    full = _page_data(every)
    assert len(full["processes"][0]["dumps"]) == 251 and "left out" not in full["subtitle"]


def test_flamegraph_max_dumps_below_zero_is_one_clear_line(tmp_path: Path) -> None:
    db = tmp_path / "long.db"
    write_long_continuous_profile(db, 3)
    run = run_process([*HEAPSCOPE, "flamegraph", str(db), "-o", str(tmp_path / "x.html"), "--max-dumps", "-1"])
    assert run.returncode != 0 and "--max-dumps -1" in run.stderr.decode()
    assert "Traceback" not in run.stderr.decode() and not (tmp_path / "x.html").exists()


def test_flamegraph_of_200k_callsites_is_small_and_fast(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    write_big_profile(db)
    html = tmp_path / "big.html"
    t0 = time.monotonic()
    heapscope("flamegraph", db, "-o", html)
    write_s = time.monotonic() - t0
    size = html.stat().st_size
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "[window.heapscope.loadMs, window.heapscope.data().processes[0].depth.length]"},
        {"do": "eval", "js": "(() => { const t = performance.now();"
                             " document.querySelector(\"#views button[data-view='alloc_space']\").click();"
                             " return performance.now() - t; })()"},
        {"do": "screenshot", "path": str(tmp_path / "big.png")},
    ])
    load_ms, nodes = res["results"][0]
    print(f"200k callsites: html {size / 1e6:.2f} MB, written in {write_s:.1f} s, page ready in"
          f" {res['readyMs']} ms (data decoded and drawn in {load_ms:.0f} ms), {nodes} nodes,"
          f" view switch {res['results'][1]:.0f} ms")
    assert nodes > 150_000  # little merging: the random tree rarely repeats a (parent, function) pair
    assert res["readyMs"] < 3000
    assert res["results"][1] < 1000
    assert size < 8_000_000


def test_flamegraph_of_one_heap_shows_no_heap_picker(record: Recorder, programs: Programs, tmp_path: Path) -> None:
    # GIVEN a profile with one heap (libc.malloc)
    db = recorded(record, programs, "tiny")
    from heapscope.store.select import heap_names
    from heapscope.view.flamegraph import payload
    from heapscope.view.flamegraph_heaps import heap_graphs
    with open_profile(db) as prof:
        assert heap_names(prof) == ["libc.malloc"]
        heaps, at = heap_graphs(prof)
        data = payload(heaps[at].graphs, title="t", heaps=heaps, heap=at)
    # THEN the page data has no heap list: there is nothing to pick
    assert "heaps" not in data and "heap" not in data
    # AND in the browser the heap field takes no room, while the process field shows
    html = tmp_path / "one.html"
    heapscope("flamegraph", db, "-o", html)
    res = browser(tmp_path, html, [
        {"do": "eval", "js": "[getComputedStyle(document.getElementById('heap-field')).display,"
                             " document.getElementById('heap-field').getBoundingClientRect().width,"
                             " document.getElementById('proc').getBoundingClientRect().width > 0]"},
        {"do": "screenshot", "path": str(tmp_path / "one.png")},
    ])
    assert res["results"][0] == ["none", 0, True]
