"""Many machines: rows/s into chDB, bytes per pushed profile, push and scrape latency on loopback.

A synthetic profile written with the real ProfileWriter (one process, CALLSITES
leaf callsites of depth 8-24 over 2,000 functions in 4 libraries, DUMPS
continuous dumps, each touching every callsite), and optionally a real
recording of tests/programs/sampled at the default interval (--real).

    python benchmarks/fleet.py [--callsites N] [--dumps N] [--real]
    python benchmarks/fleet.py --overhead [--rounds N] [--ops N]

Measured: ClickHouse rows built and inserted per second into chDB (the whole
`heapscope export --format clickhouse --to chdb:DIR` path, in process); gzip
pprof bytes per pushed dump; wall time per push to a loopback Pyroscope-shaped
and Parca server (tests/fleet_support.py); time per /debug/pprof/heap answer.

--overhead: what `record --serve` (a scraper fetching /debug/pprof/heap every
second) and `record --push` (a loopback Pyroscope, a push per 10 s dump) add to
the wall time of a recording of benchmarks/alloc_bench.c (1 thread, -O2),
against the same `record -c 10000` without them. Rounds are interleaved (each
round runs the three in a rotated order) and medians reported with the
spread and the machine's load average, since the machine may be shared; also
the bytes of each pushed pprof and the ClickHouse rows/s of the last plain
recording. benchmarks/run.py runs this as its `fleet` section.

The scraper is what Prometheus or Parca is: one long-lived client in another
process (here a thread of this one, which is not part of the measured
recording), one GET a second. CPU is split between heapscope's own process
and its children (the target): read from /proc when the recording has exited
but is not yet reaped (waitid WNOWAIT), so that what a scrape costs heapscope
(its added CPU over the scrapes it answered) is seen apart from the noise of
the target's CPU; and the time the target waited for ring space
(client_blocked_us), which is where a stalled producer would show.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from heapscope.fleet import clickhouse, pprof_source  # noqa: E402
from heapscope.fleet.push import Pusher, PushItem  # noqa: E402
from heapscope.hosts.serve import PprofServer, Snapshot  # noqa: E402
from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid  # noqa: E402
from heapscope.store.reader import open_profile  # noqa: E402
from heapscope.store.writer import ProfileWriter  # noqa: E402


def build(path: Path, callsites: int, dumps: int) -> None:
    rng = random.Random(7)
    w = ProfileWriter(path)
    w.set_metadata("interval", 4096)
    w.set_metadata("started_unix_ns", time.time_ns())
    w.set_metadata("started_monotonic_ns", 0)
    info = ProcessInfo(upid=Upid(1), pid=4242, ppid=1, name="big", cmdline="/usr/bin/big", exe="/usr/bin/big",
                       uid=0, start_ts=1)
    w.add_process(info)
    w.set_process_flags(info, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=4096,
                                           orig_sampling_interval_bytes=4096))
    libs = ["/usr/bin/big", "/usr/lib/libone.so", "/usr/lib/libtwo.so", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    w.add_mappings((i + 1, Mapping(f"{i:02x}" * 20, 0x1000, 0, 0x400000 * (i + 1), 0x400000 * (i + 1) + 0x200000,
                                   0, name)) for i, name in enumerate(libs))
    w.add_frames((i + 1, Frame(MappingId(i % 4 + 1), 0x1000 + 16 * i, f"function_{i}")) for i in range(2000))
    children: dict[tuple[int | None, int], int] = {}
    rows: list[tuple[int, int, int | None, int]] = []
    leaves: list[int] = []
    while len(leaves) < callsites:
        parent: int | None = None
        for d in range(rng.randint(8, 24)):
            frame = rng.randrange(2000) + 1 if d > 2 else d + 1
            node = children.get((parent, frame))
            if node is None:
                node = children[(parent, frame)] = len(rows) + 1
                rows.append((node, d, parent, frame))
            parent = node
        assert parent is not None
        leaves.append(parent)
    w.add_callsites(rows)
    for n in range(dumps):
        ts = (n + 1) * 1_000_000_000
        deltas = []
        for leaf in leaves:
            size = rng.choice((16, 64, 256, 4096))
            deltas.append((leaf, 2, 2 * size))
            deltas.append((leaf, -1, -size))
        w.add_dump(1, ts - 1_000_000_000, ts, "periodic", deltas, "libc.malloc")
    w.close()


def record_real(tmp: Path) -> Path:
    import importlib.util
    import subprocess

    spec = importlib.util.spec_from_file_location("programs_build", ROOT / "tests" / "programs" / "build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    binary = mod.build("sampled")
    db = tmp / "sampled.db"
    subprocess.run([sys.executable, "-m", "heapscope", "record", "-q", "-o", str(db), "-c", "20", "--", str(binary)],
                   check=True, timeout=300)
    return db


def clickhouse_rate(db: Path, tmp: Path) -> tuple[int, float, float]:
    """(rows, seconds to build rows alone, seconds to build and insert into chDB)."""
    with open_profile(db) as p:
        t0 = time.perf_counter()
        n = sum(1 for _ in clickhouse.rows(p, host="bench"))
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        clickhouse.write(p, f"chdb:{tmp / 'ch'}", host="bench")
        total_s = time.perf_counter() - t0
    return n, build_s, total_s


def pprof_sizes(db: Path) -> list[int]:
    with open_profile(db) as p:
        proc = p.processes()[0]
        return [len(pprof_source.build(p, pid=proc.info.pid, dump=i + 1).data)
                for i in range(len(p.dumps(proc.info.upid)))]


def push_times(db: Path, url_kind: str, tmp: Path, count: int = 10) -> list[float]:
    from fleet_support import ParcaServer, PyroscopeServer, parca_messages

    with open_profile(db) as p:
        data = pprof_source.build(p).data
    server = ParcaServer(parca_messages(tmp / "proto")) if url_kind == "parca" else PyroscopeServer()
    times = []
    try:
        pusher = Pusher(server.url, {"service": "bench"}, queue_size=1)
        for i in range(count):
            t0 = time.perf_counter()
            pusher.submit(PushItem(data, time.time_ns(), time.time_ns(), (), f"bench {i}"))
            server.wait_for(i + 1, timeout=60)
            times.append(time.perf_counter() - t0)
        pusher.close()
    finally:
        server.close()
    return times


def scrape_times(db: Path, count: int = 5) -> tuple[list[float], list[float]]:
    """(wall, CPU) seconds per /debug/pprof/heap answer; the server runs in this process, so
    process_time() around a request is what answering it cost (and the client's small part)."""
    times, cpus = [], []
    with PprofServer(lambda: Snapshot(db), "127.0.0.1:0") as s:
        for _ in range(count):
            t0, c0 = time.perf_counter(), time.process_time()
            with urllib.request.urlopen(s.url + "heap", timeout=120) as r:
                r.read()
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    return times, cpus


CONFIGS = ["plain", "serve + scrape 1/s", "push every 10 s"]


@dataclass
class Overhead:
    """What --overhead measured: per configuration, wall and CPU (heapscope and the target) per round."""

    ops: int
    rounds: int
    walls: dict[str, list[float]]
    cpus: dict[str, list[float]]
    own_cpus: dict[str, list[float]]  # heapscope's process alone
    blocked_ms: dict[str, list[float]]  # client_blocked_us of the recording, in ms
    scrapes: list[int]
    pushes: list[int]
    push_bytes: list[int]  # the pprof of each push received, as sent
    loads: list[float]
    real_rows: tuple[int, float, float] | None  # clickhouse_rate of the last plain recording

    def added(self, config: str) -> float:
        """Median wall of config over the plain recording's, minus 1."""
        return statistics.median(self.walls[config]) / statistics.median(self.walls["plain"]) - 1

    def spread(self) -> float:
        """(max - min) / median of the plain recording's walls: the noise the added figures sit in."""
        w = self.walls["plain"]
        return (max(w) - min(w)) / statistics.median(w)

    def table(self) -> list[str]:
        plain, plain_cpu = statistics.median(self.walls["plain"]), statistics.median(self.cpus["plain"])
        plain_own = statistics.median(self.own_cpus["plain"])
        lines = [f"alloc_bench 1 thread, {self.ops:,} ops; {self.rounds} interleaved rounds; load average (1 min) "
                 f"{min(self.loads):.1f}-{max(self.loads):.1f} on {os.cpu_count()} cores", "",
                 "| recording | median wall s | min-max s | added wall (median) | median CPU s (all) | added CPU |"
                 " heapscope's own CPU s (median) | added | target waited for ring space ms (max) |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for c in CONFIGS:
            w, u, own = self.walls[c], self.cpus[c], self.own_cpus[c]
            added = "" if c == "plain" else f"{(statistics.median(w) / plain - 1) * 100:+.1f}%"
            added_cpu = "" if c == "plain" else f"{statistics.median(u) - plain_cpu:+.2f} s"
            added_own = "" if c == "plain" else f"{statistics.median(own) - plain_own:+.3f} s"
            lines.append(f"| {c} | {statistics.median(w):.2f} | {min(w):.2f}-{max(w):.2f} | {added} | "
                         f"{statistics.median(u):.2f} | {added_cpu} | {statistics.median(own):.3f} | {added_own} | "
                         f"{max(self.blocked_ms[c]):.1f} |")
        size = f"{statistics.median(self.push_bytes):,.0f} B median" if self.push_bytes else "n/a"
        per_scrape = ""
        if self.scrapes and statistics.median(self.scrapes) > 0:
            extra = statistics.median(self.own_cpus["serve + scrape 1/s"]) - plain_own
            per_scrape = f" heapscope's added CPU per scrape: {extra / statistics.median(self.scrapes) * 1000:.1f} ms."
        lines += ["", f"Scrapes answered per run: {self.scrapes}; profiles pushed per run: {self.pushes}; "
                  f"pprof per pushed profile: {size}.{per_scrape}"]
        return lines


def own_cpu(pid: int) -> float:
    """CPU seconds of process `pid` itself (all its threads, not its children), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (proc(5))


def blocked_ms(db: Path) -> float:
    """client_blocked_us of every process of the profile, in ms."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (us,) = con.execute("SELECT COALESCE(SUM(value), 0) FROM stats WHERE name = 'client_blocked_us'").fetchone()
    finally:
        con.close()
    return int(us) / 1000


def overhead(rounds: int, ops: int, heapscope: list[str] | None = None) -> Overhead:
    import http.client
    import subprocess
    import threading

    from fleet_support import PyroscopeServer, free_port

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        exe = tmp / "alloc_bench"
        src = ROOT / "benchmarks" / "alloc_bench.c"
        subprocess.run(["cc", "-O2", "-g", "-pthread", "-Wall", "-o", str(exe), str(src)], check=True)
        pyroscope = PyroscopeServer()
        base = [*(heapscope or [sys.executable, "-m", "heapscope"]), "record", "-q", "--force", "-c", "10000"]
        target = ["--", str(exe), "1", str(ops)]
        res = Overhead(ops, rounds, {c: [] for c in CONFIGS}, {c: [] for c in CONFIGS},
                       {c: [] for c in CONFIGS}, {c: [] for c in CONFIGS}, [], [], [], [os.getloadavg()[0]], None)
        try:
            for r in range(rounds):
                order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
                for config in order:
                    db = tmp / f"{config.split()[0]}.db"
                    argv = [*base, "-o", str(db)]
                    stop = threading.Event()
                    scraper = None
                    before = len(pyroscope.received)
                    env = dict(os.environ)
                    if config.startswith("serve"):
                        port = free_port()
                        argv += ["--serve", f"127.0.0.1:{port}"]
                        done = [0]
                        # --serve answers only with its token: the scraper is given the one record takes
                        token = env["HEAPSCOPE_SERVE_TOKEN"] = secrets.token_urlsafe(16)

                        def scrape(port: int = port, done: list[int] = done, stop: threading.Event = stop,
                                   token: str = token) -> None:
                            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                            while not stop.wait(1.0):
                                try:
                                    conn.request("GET", "/debug/pprof/heap",
                                                 headers={"Authorization": f"Bearer {token}"})
                                    with conn.getresponse() as resp:
                                        resp.read()
                                    done[0] += 1 if resp.status == 200 else 0
                                except (OSError, http.client.HTTPException):
                                    conn.close()  # not listening yet, or the recording just ended
                            conn.close()
                        scraper = threading.Thread(target=scrape, daemon=True)
                    elif config.startswith("push"):
                        argv += ["--push", pyroscope.url, "--label", "service=bench"]
                    t0 = time.perf_counter()
                    proc = subprocess.Popen([*argv, *target], stdout=subprocess.DEVNULL, env=env)
                    if scraper is not None:
                        scraper.start()
                    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: /proc is there
                    wall = time.perf_counter() - t0
                    own = own_cpu(proc.pid)
                    _, status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    res.walls[config].append(wall)
                    res.cpus[config].append(usage.ru_utime + usage.ru_stime)
                    res.own_cpus[config].append(own)
                    res.blocked_ms[config].append(blocked_ms(db))
                    stop.set()
                    if scraper is not None:
                        scraper.join()
                        res.scrapes.append(done[0])
                    if config.startswith("push"):
                        res.pushes.append(len(pyroscope.received) - before)
                        res.push_bytes += [len(x.profile) for x in pyroscope.received[before:]]
                    if proc.returncode != 0:
                        raise RuntimeError(f"{config}: exit status {proc.returncode}")
                res.loads.append(os.getloadavg()[0])
        finally:
            pyroscope.close()
        plain_db = tmp / "plain.db"
        if plain_db.exists():
            (tmp / "ch").mkdir()
            res.real_rows = clickhouse_rate(plain_db, tmp / "ch")
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--overhead", action="store_true", help="measure record --serve / --push against a plain record")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=40_000_000, help="alloc_bench operations per run (--overhead)")
    ap.add_argument("--callsites", type=int, default=20_000)
    ap.add_argument("--dumps", type=int, default=10)
    ap.add_argument("--real", action="store_true", help="also record tests/programs/sampled and measure it")
    args = ap.parse_args()
    if args.overhead:
        print("\n".join(overhead(args.rounds, args.ops).table()))
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        profiles = {"synthetic": tmp / "synthetic.db"}
        build(profiles["synthetic"], args.callsites, args.dumps)
        if args.real:
            profiles["sampled (real, -c 20)"] = record_real(tmp)
        print("| profile | ClickHouse rows | rows/s built | rows/s built + inserted (chDB) | pprof bytes/dump"
              " (median) | push Pyroscope ms | push Parca ms | /debug/pprof/heap ms | its CPU ms |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, db in profiles.items():
            sub = tmp / name.split()[0]
            sub.mkdir()
            n, build_s, total_s = clickhouse_rate(db, sub)
            sizes = pprof_sizes(db)
            pyro = statistics.median(push_times(db, "pyroscope", sub)) * 1000
            parca = statistics.median(push_times(db, "parca", sub)) * 1000
            walls, cpus = scrape_times(db)
            scrape, scrape_cpu = statistics.median(walls) * 1000, statistics.median(cpus) * 1000
            print(f"| {name} | {n:,} | {n / build_s:,.0f} | {n / total_s:,.0f} | {statistics.median(sizes):,.0f}"
                  f" | {pyro:.1f} | {parca:.1f} | {scrape:.1f} | {scrape_cpu:.1f} |")


if __name__ == "__main__":
    main()
