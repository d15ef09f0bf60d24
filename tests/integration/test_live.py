"""`heapscope live` driven in tmux: a real terminal, real keys, the screen read back.

The targets (tests/programs/steps.c, threadsteps.c, lifetimes.c) take one step per line the
test writes into a FIFO, so each phase starts when the test says so. Every wait polls
`tmux capture-pane` (or a file) until what is expected appears, with a
deadline; each test runs its own tmux server and kills it at the end.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs

from heapscope.producer.config import DEFAULT_INTERVAL
from heapscope.store.reader import open_profile
from heapscope.store.select import select_heap
from heapscope.units import format_bytes
from heapscope.view import lifetimes as lt
from heapscope.view.report import build_reports

POLL_S = 0.05  # between two looks at the screen: a poll interval, not a synchronisation
_servers = itertools.count()


class Tmux:
    """One tmux server (its own socket) with one 160x45 pane running `argv`."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.socket = f"heapscope-test-{os.getpid()}-{next(_servers)}"
        self.status = cwd / "status"
        command = f"{shlex.join(argv)}; echo $? > {shlex.quote(str(self.status))}"
        self._tmux("-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "45", "-c", str(cwd),
                   "sh", "-c", command, ";", "set-option", "remain-on-exit", "on")

    def _tmux(self, *args: str) -> str:
        # Without COLUMNS/LINES (pytest may set them): the view must take the pane's size.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        run = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30, env=env)
        assert run.returncode == 0, f"tmux {' '.join(args)}: {run.stderr}"
        return run.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def wait_for(self, what: str | Callable[[str], object], timeout: float = 60) -> str:
        """The screen, once `what` (a text, or a test of the screen) is on it."""
        test = what if callable(what) else (lambda screen: what in screen)
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if test(screen):
                return screen
            if time.monotonic() > deadline:
                pytest.fail(f"not on the screen within {timeout} s: {what!r}\n--- screen ---\n{screen}")
            time.sleep(POLL_S)

    def exit_status(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while not (self.status.exists() and self.status.read_text().endswith("\n")):
            if time.monotonic() > deadline:
                pytest.fail(f"heapscope live did not exit within {timeout} s\n--- screen ---\n{self.screen()}")
            time.sleep(POLL_S)
        return int(self.status.read_text())

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)

    def live_pid(self) -> int:
        """heapscope's pid: the child of the pane's shell."""
        (shell,) = self._tmux("list-panes", "-F", "#{pane_pid}").split()
        children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])


def wait_gone(pid: int, timeout: float = 30) -> None:
    """Until `pid` is no more (or a zombie: our child only if the test started it; here, never)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        if time.monotonic() > deadline:
            status = Path(f"/proc/{pid}/status").read_text()
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"pid {pid} still there {timeout} s after its end was due\n{status}")
        time.sleep(POLL_S)


class Fifo:
    """The writing end of the target's control FIFO, opened once the target reads it."""

    def __init__(self, path: Path, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as e:
                if e.errno != errno.ENXIO or time.monotonic() > deadline:
                    raise  # ENXIO: nobody reads it yet
            time.sleep(POLL_S)
        os.set_blocking(self.fd, True)

    def step(self) -> None:
        os.write(self.fd, b"\n")

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def live(programs: Programs, tmp_path: Path) -> Iterator[Callable[..., tuple[Tmux, Fifo]]]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; .ci/run does)")
    pytest.importorskip("textual", reason="needs textual: pip install '.[live]'")
    opened: list[Tmux | Fifo] = []

    def start(*options: str, program: str = "steps", interval: int | None = 1) -> tuple[Tmux, Fifo]:
        """interval None: the default one."""
        ctl = tmp_path / "ctl"
        os.mkfifo(ctl)
        sampling = [] if interval is None else ["-i", str(interval)]
        # The FIFO by its name in the pane's directory: a short status line, its figures on the screen
        tmux = Tmux([*HEAPSCOPE, "live", *sampling, "-o", "live.db", *options, "--", str(programs.path(program)),
                     ctl.name], tmp_path)
        opened.append(tmux)
        fifo = Fifo(ctl)
        opened.append(fifo)
        return tmux, fifo

    yield start
    for x in reversed(opened):
        x.close()


def first_row(screen: str) -> str:
    """The table's first row (the line under its header)."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if "function" in line and "called from" in line:
            return lines[i + 1] if i + 1 < len(lines) else ""
    return ""


def row_of(screen: str, function: str) -> str:
    return next((line for line in screen.splitlines() if re.search(rf"\s{function}\s", line)), "")


def table_functions(screen: str) -> list[str]:
    """The function column of every row of the table, top to bottom."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if "function" in line and "called from" in line)
    col = lines[start].index("function")
    out = []
    for line in lines[start + 1:]:
        cells = line[col:].split()
        if not cells or line.lstrip().startswith("─"):
            break
        out.append(cells[0])
    return out


def pick_thread(tmux: Tmux, label: str) -> None:
    """Open the thread picker and take the choice whose line holds `label`."""
    tmux.keys("t")
    screen = tmux.wait_for("all threads")
    lines = screen.splitlines()
    first = next(i for i, line in enumerate(lines) if "all threads" in line)
    at = next(i for i, line in enumerate(lines) if i >= first and label in line)
    tmux.keys("Home", *["Down"] * (at - first), "Enter")
    tmux.wait_for(lambda s: "all threads" not in s)


def totals(db: Path, functions: tuple[str, ...] = ("grow_one", "grow_two")) -> dict[str, dict[str, int]]:
    """Per function: the four views of `heapscope report --dump end` (self values)."""
    out: dict[str, dict[str, int]] = {}
    with open_profile(db) as p:
        for view in ("space", "objects", "alloc_space", "alloc_objects"):
            for r in build_reports(p, view, dump="end"):
                for row in r.rows:
                    if row.function in functions and row.self_value:
                        out.setdefault(row.function, {})[view] = row.self_value
    return out


@pytest.mark.timeout(300)
def test_phases_keys_and_quit(live: Callable[..., tuple[Tmux, Fifo]], tmp_path: Path) -> None:
    tmux, fifo = live()
    tmux.wait_for("threads [t]: all")
    fifo.step()  # step 1: grow_one keeps 1000 x 1000 bytes
    screen = tmux.wait_for(lambda s: row_of(s, "grow_one").split()[:3] == ["976.6", "KiB", "1,000"])
    assert "step 1 done" in screen and "main" in row_of(screen, "grow_one"), screen
    fifo.step()  # step 2: grow_two keeps 100 x 50000 bytes, now the top row
    tmux.wait_for(lambda s: "grow_two" in first_row(s) and first_row(s).split()[:3] == ["4.8", "MiB", "100"])
    tmux.keys("3")  # sort by allocated bytes
    tmux.wait_for("allocated ▼")
    fifo.step()  # step 3: grow_one's blocks freed; still allocated, nothing unreleased
    screen = tmux.wait_for(lambda s: row_of(s, "grow_one").split()[:4] == ["0", "B", "0", "976.6"])
    assert "grow_two" in first_row(screen)
    tmux.keys("p")  # the one process
    tmux.wait_for(re.compile(r"process \[p\]: \d+ steps").search)
    tmux.keys("t")  # the picker: one thread, main's (named after the program); escape leaves it
    screen = tmux.wait_for("all threads")
    assert re.search(r"\d+ steps\s+\d", screen), screen
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "all threads" not in s and "threads [t]: all" in s)
    tmux.keys("d")
    tmux.wait_for("dump written to live.db")
    tmux.keys("f")
    tmux.wait_for("flamegraph written to live.live-1.html")
    assert b'<meta name="generator" content="heapscope">' in (tmp_path / "live.live-1.html").read_bytes()[:2048]
    tmux.keys("q")
    tmux.wait_for("view closed: profiling stopped; waiting for pid")
    assert not tmux.status.exists()  # the target runs on, and heapscope waits for it
    fifo.step()  # step 4: the target exits
    assert tmux.exit_status() == 0
    screen = tmux.wait_for("profile written to live.db")
    assert "step 4 done" in screen
    with open_profile(tmp_path / "live.db") as p:
        (proc,) = p.processes()
        assert [d.reason for d in p.dumps(proc.info.upid)] == ["signal", "signal", "end"]
    # Every step was taken before q: the truth of steps.c, whole.
    assert totals(tmp_path / "live.db") == {
        "grow_one": {"alloc_space": 1000000, "alloc_objects": 1000},
        "grow_two": {"space": 5000000, "objects": 100, "alloc_space": 5000000, "alloc_objects": 100},
    }


def shown_at(screen: str) -> float:
    """The elapsed seconds of the snapshot on the screen (the status line's)."""
    m = re.search(r"([\d.]+) s\s+[\d,]+ samples", screen)
    assert m, screen
    return float(m.group(1))


@pytest.mark.timeout(300)
def test_counts_are_the_reports_estimates(live: Callable[..., tuple[Tmux, Fifo]], tmp_path: Path) -> None:
    """At the default interval the count columns are estimated objects, not samples: for steps.c's
    grow_one (1000 blocks of 1000 bytes, each sampled with probability p = 1 - e^(-1000/I)) the
    figure is near 1000, and it is `report --view objects`'s for the same state (the same
    estimate on the same sampled counts and sizes). At interval 1 they are the exact counts
    (test_phases_keys_and_quit)."""
    tmux, fifo = live(interval=None)
    tmux.wait_for("objects held")
    fifo.step()  # step 1: grow_one keeps 1000 x 1000 bytes; the target then waits for the next step
    tmux.wait_for(lambda s: "step 1 done" in s and row_of(s, "grow_one") != "")
    # A dump drains every record of step 1; a snapshot taken after the screen said so has them all.
    tmux.keys("d")
    dumped = shown_at(tmux.wait_for("dump written to live.db"))
    screen = tmux.wait_for(lambda s: shown_at(s) > dumped and row_of(s, "grow_one") != "")
    cells = row_of(screen, "grow_one").split()
    held, allocated = int(cells[2].replace(",", "")), int(cells[5].replace(",", ""))
    tmux.keys("q")
    tmux.wait_for("view closed: profiling stopped; waiting for pid")
    for _ in range(3):
        fifo.step()
    assert tmux.exit_status() == 0
    tmux.wait_for("profile written to live.db")
    # THEN the screen's figures are the report's (the end dump: profiling stopped at q, after step 1)
    reported = totals(tmp_path / "live.db")["grow_one"]
    assert (held, allocated) == (reported["objects"], reported["alloc_objects"]), (cells, reported)
    # AND within the estimate's error of the truth (five standard errors of the one-size estimate;
    # the raw sample count, about 1000 p = 217, is far outside)
    p = -math.expm1(-1000 / DEFAULT_INTERVAL)
    stderr = math.sqrt(1000 * (1 - p) / p)
    assert held == allocated and abs(held - 1000) <= 5 * stderr, (held, stderr)


@pytest.mark.timeout(300)
def test_target_exit_closes_the_view(live: Callable[..., tuple[Tmux, Fifo]], tmp_path: Path) -> None:
    tmux, fifo = live()
    tmux.wait_for("threads [t]: all")
    fifo.step()
    tmux.wait_for(lambda s: "grow_one" in first_row(s))
    for _ in range(3):
        fifo.step()
    assert tmux.exit_status() == 0
    screen = tmux.wait_for("profile written to live.db")
    assert "waiting for pid" not in screen
    assert totals(tmp_path / "live.db")["grow_two"]["space"] == 5000000


@pytest.mark.timeout(300)
def test_thread_filter(live: Callable[..., tuple[Tmux, Fifo]], tmp_path: Path) -> None:
    """threadsteps.c: hs-alpha, hs-beta and main allocate from alpha_work, beta_work and main_work.
    Filtering on one thread leaves only its function; "all threads" brings every row back."""
    tmux, fifo = live(program="threadsteps")
    tmux.wait_for("threads [t]: all")
    fifo.step()  # step 1: the three allocate, the threads live on
    truth = {"alpha_work": [*format_bytes(300000).split(), "300"], "beta_work": [*format_bytes(800000).split(), "40"],
             "main_work": [*format_bytes(30000).split(), "10"]}
    screen = tmux.wait_for(lambda s: all(row_of(s, f).split()[:3] == v for f, v in truth.items()))
    assert "step 1 done" in screen
    # Each thread alone: only its own function (main also has pthread_create's own allocations)
    for name, function in (("hs-beta", "beta_work"), ("hs-alpha", "alpha_work")):
        pick_thread(tmux, f" {name} ")

        def alone(s: str, name: str = name, function: str = function) -> bool:
            return table_functions(s) == [function] and re.search(rf"threads \[t\]: \d+ {name}\s", s) is not None

        screen = tmux.wait_for(alone)
        assert row_of(screen, function).split()[:3] == truth[function], screen
    pick_thread(tmux, " threadsteps ")
    screen = tmux.wait_for(lambda s: "threads [t]: " in s and "main_work" in table_functions(s))
    functions = table_functions(screen)
    assert functions[0] == "main_work" and "alpha_work" not in functions and "beta_work" not in functions, screen
    # All threads again: every row is back
    pick_thread(tmux, "all threads")
    screen = tmux.wait_for(lambda s: "threads [t]: all" in s and len(table_functions(s)) >= 3)
    assert table_functions(screen)[:3] == ["beta_work", "alpha_work", "main_work"], screen
    fifo.step()  # step 2: the threads end and the target exits; the view closes by itself
    assert tmux.exit_status() == 0
    tmux.wait_for("profile written to live.db")
    # The profile is a plain recording's (threads are live-only): the truth of threadsteps.c
    assert totals(tmp_path / "live.db", ("alpha_work", "beta_work", "main_work")) == {
        f: {"space": n * size, "objects": n, "alloc_space": n * size, "alloc_objects": n}
        for f, n, size in (("alpha_work", 300, 1000), ("beta_work", 40, 20000), ("main_work", 10, 3000))}


@pytest.mark.timeout(300)
def test_terminal_hang_up_ends_live(live: Callable[..., tuple[Tmux, Fifo]], tmp_path: Path) -> None:
    """The terminal closes under live (its tmux server killed): the SIGHUP goes to the target,
    which dies of it, and live then ends too, its profile written, although its view can no
    longer write to the terminal (it stayed up until SIGKILL: Textual's close waited forever on
    a terminal that had hung up)."""
    tmux, fifo = live()
    tmux.wait_for("threads [t]: all")
    fifo.step()  # step 1: grow_one keeps 1000 x 1000 bytes
    tmux.wait_for(lambda s: row_of(s, "grow_one").split()[:3] == ["976.6", "KiB", "1,000"])
    pid = tmux.live_pid()
    tmux.close()
    wait_gone(pid)
    assert totals(tmp_path / "live.db")["grow_one"] == {"space": 1000000, "objects": 1000,
                                                        "alloc_space": 1000000, "alloc_objects": 1000}


@pytest.mark.timeout(300)
def test_sigterm_goes_to_the_target_and_ends_live(live: Callable[..., tuple[Tmux, Fifo]], tmp_path: Path) -> None:
    """SIGTERM to live while its target runs: passed on, the target dies of it, and live exits
    with its status (128 + 15) and the profile written, as `record` does."""
    tmux, fifo = live()
    tmux.wait_for("threads [t]: all")
    fifo.step()
    tmux.wait_for(lambda s: row_of(s, "grow_one").split()[:3] == ["976.6", "KiB", "1,000"])
    pid = tmux.live_pid()
    os.kill(pid, signal.SIGTERM)
    assert tmux.exit_status() == 128 + signal.SIGTERM
    tmux.wait_for("target died of SIGTERM")
    wait_gone(pid)
    assert totals(tmp_path / "live.db")["grow_one"]["space"] == 1000000


@pytest.mark.timeout(60)
def test_no_terminal_is_one_line(tmp_path: Path) -> None:
    run = subprocess.run([*HEAPSCOPE, "live", "--", "true"], stdin=subprocess.DEVNULL, capture_output=True,
                         cwd=tmp_path, timeout=60)
    assert run.returncode == 2
    assert run.stderr.decode().splitlines() == [
        "heapscope: error: live needs a terminal (stdin or stderr is not one); use `heapscope record` to record"
        " without the view"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(300)
def test_attach_and_quit(programs: Programs, tmp_path: Path) -> None:
    """`live -p PID`: the table shows what is allocated after the attach; q detaches, the target runs on."""
    if shutil.which("tmux") is None or shutil.which("gdb") is None:
        pytest.skip("tmux and gdb are needed (.ci/run installs both)")
    pytest.importorskip("textual", reason="needs textual: pip install '.[live]'")
    ctl = tmp_path / "ctl"
    os.mkfifo(ctl)
    target = subprocess.Popen([programs.path("steps"), ctl], stdout=subprocess.PIPE, start_new_session=True)
    tmux = fifo = None
    try:
        fifo = Fifo(ctl)
        tmux = Tmux([*HEAPSCOPE, "live", "-i", "1", "-o", "att.db", "-p", str(target.pid)], tmp_path)
        tmux.wait_for(f"attached to pid {target.pid}")
        fifo.step()  # step 1, after the attach: grow_one is seen
        tmux.wait_for(lambda s: row_of(s, "grow_one").split()[:3] == ["976.6", "KiB", "1,000"])
        tmux.keys("q")
        assert tmux.exit_status() == 0
        tmux.wait_for(f"detached from pid {target.pid}")
        assert target.poll() is None  # let go, still running
        for _ in range(3):
            fifo.step()
        out, _ = target.communicate(timeout=60)
        assert target.returncode == 0 and out == b"step 1 done\nstep 2 done\nstep 3 done\nstep 4 done\n"
        assert totals(tmp_path / "att.db") == {"grow_one": {"space": 1000000, "objects": 1000,
                                                            "alloc_space": 1000000, "alloc_objects": 1000}}
    finally:
        for x in (fifo, tmux):
            if x is not None:
                x.close()
        if target.poll() is None:
            target.kill()
            target.wait(timeout=30)


def _bytes_of(text: str) -> int:
    """`human_bytes`'s text ("39.3 MiB") back to bytes, to its precision."""
    number, unit = text.split()
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
    return int(float(number.replace(",", "")) * scale)


def screen_unreleased(screen: str) -> int | None:
    m = re.search(r"unreleased ([\d.,]+ [KMG]?i?B) \(peak shown", screen)
    return _bytes_of(m.group(1)) if m else None


def profile_unreleased(db: Path) -> int:
    """Every heap's unreleased bytes at its last dump (the report's figure), summed."""
    with open_profile(db) as p:
        (proc,) = p.processes()
        last: dict[str, int] = {}
        for d in p.dumps(proc.info.upid):
            last[d.heap_name] = max(last.get(d.heap_name, 0), d.ts_end)
        con = sqlite3.connect(db)
        try:
            return sum(con.execute("SELECT COALESCE(SUM(size), 0) FROM heap_profile_allocation"
                                   " WHERE upid = ? AND heap_name = ? AND ts <= ?",
                                   (proc.info.upid, heap, ts)).fetchone()[0] for heap, ts in last.items())
        finally:
            con.close()


@pytest.mark.timeout(300)
def test_python_program_unreleased_is_every_heaps(tmp_path: Path) -> None:
    """A growing Python program: the view's unreleased figure counts Python's heap (pymalloc) as
    well as malloc's, as the report does, and is the profile's at the same moment (a dump taken
    while it stands still, within 10%)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; .ci/run does)")
    pytest.importorskip("textual", reason="needs textual: pip install '.[live]'")
    ctl = tmp_path / "ctl"
    os.mkfifo(ctl)
    program = Path(__file__).parents[1] / "programs" / "python" / "growing.py"
    tmux = Tmux([*HEAPSCOPE, "live", "-o", "py.db", "--", sys.executable, str(program), str(ctl), "24"], tmp_path)
    fifo = None
    try:
        # WHEN it has grown by 24 MiB of small objects (pymalloc's) and 24 MiB of bytearrays (malloc's)
        screen = tmux.wait_for(re.compile(r"grown \d+").search)
        grown = int(re.search(r"grown (\d+)", screen).group(1))  # type: ignore[union-attr]
        # THEN the figure reaches both halves (malloc's alone would be half of it)
        screen = tmux.wait_for(lambda s: (screen_unreleased(s) or 0) >= 0.9 * grown)
        shown = screen_unreleased(screen)
        assert shown is not None
        # AND it is the profile's: a dump now, while the program stands still
        tmux.keys("d")
        tmux.wait_for("dump written to py.db")
        tmux.keys("q")
        tmux.wait_for("view closed: profiling stopped; waiting for pid")
        fifo = Fifo(ctl)
        fifo.step()
        assert tmux.exit_status() == 0
        in_profile = profile_unreleased(tmp_path / "py.db")
        assert abs(shown - in_profile) <= 0.1 * in_profile, (shown, in_profile, grown)
    finally:
        for x in (fifo, tmux):
            if x is not None:
                x.close()


def _cpython_312() -> str | None:
    """A CPython 3.12+ (its -X perf trampolines are code generated at run time), or None."""
    from python_support import installed_pythons

    return next((str(p) for p in installed_pythons() if _minor(str(p)) >= 12), None)


def _minor(python: str) -> int:
    run = subprocess.run([python, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True,
                         timeout=30)
    return int(run.stdout) if run.returncode == 0 and run.stdout.strip().isdigit() else 0


@pytest.mark.timeout(300)
def test_jit_frames_are_named_from_the_perf_map(tmp_path: Path) -> None:
    """CPython 3.12+ with -X perf runs Python functions through trampolines it generates and lists
    in /tmp/perf-PID.map: the view names them from it (py::grow_big:...), as `record` does at its end."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; .ci/run does)")
    pytest.importorskip("textual", reason="needs textual: pip install '.[live]'")
    python = _cpython_312()
    if python is None:
        pytest.skip("no CPython 3.12+ in pyenv (`pyenv versions`): -X perf needs 3.12")
    ctl = tmp_path / "ctl"
    os.mkfifo(ctl)
    program = Path(__file__).parents[1] / "programs" / "python" / "growing.py"
    tmux = Tmux([*HEAPSCOPE, "live", "-o", "jit.db", "--", python, "-X", "perf", str(program), str(ctl), "8"],
                tmp_path)
    fifo = None
    try:
        tmux.wait_for(re.compile(r"grown \d+").search)
        tmux.keys("d")  # a dump resolves every stack to its callsite, whose frames the view then names
        tmux.wait_for("dump written to jit.db")
        screen = tmux.wait_for(lambda s: f"py::grow_big:{program}" in s or f"py::grow_small:{program}" in s)
        assert "[unknown pid " not in screen, screen
        tmux.keys("q")
        tmux.wait_for("view closed: profiling stopped; waiting for pid")
        fifo = Fifo(ctl)
        fifo.step()
        assert tmux.exit_status() == 0
    finally:
        for x in (fifo, tmux):
            if x is not None:
                x.close()
        db = tmp_path / "jit.db"
        if db.exists():  # the perf map the program left in /tmp
            con = sqlite3.connect(db)
            try:
                for (pid,) in con.execute("SELECT pid FROM process"):
                    with contextlib.suppress(OSError):
                        os.unlink(f"/tmp/perf-{pid}.map")
            finally:
                con.close()


def cells_of(screen: str, function: str) -> dict[str, str]:
    """The row of `function`, cut at its table header's titles: title -> cell text."""
    lines = screen.splitlines()
    head = next(line for line in lines if "function" in line and "called from" in line)
    titles = [t.rstrip(" ▼") for t in re.split(r"\s{2,}", head.strip(" │")) if t]
    starts: list[int] = []
    at = 0
    for t in titles:  # each after the one before: "allocations" also ends "temp. allocations"
        starts.append(head.index(t, at))
        at = starts[-1] + len(t)
    row = row_of(screen, function)
    assert row, screen
    ends = [*starts[1:], len(row)]
    return {t: row[s:e].strip() for t, s, e in zip(titles, starts, ends, strict=True)}


@pytest.mark.timeout(300)
def test_temporary_and_lifetimes_views(live: Callable[..., tuple[Tmux, Fifo]], programs: Programs,
                                       tmp_path: Path) -> None:
    """lifetimes.c at interval 1: temp_once frees each of its 20,000 x 256 B at once, hold_alloc
    holds 200 x 4 KiB for 10 ms, never_alloc keeps 50 x 100,000 B. Key 5 shows what churns
    (temp_once alone), key 6 each stack's lifetimes; both are the report's figures for the
    same state (the profile's lifetime tables, written at the end)."""
    out = subprocess.run([str(programs.path("lifetimes")), "--print-truth"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("lifetimes "))
    temp_n, hold_n, hold_ms, never_n = (int(v) for v in line.split()[1:])
    tmux, fifo = live(program="lifetimes")
    tmux.wait_for("threads [t]: all")
    tmux.keys("5")
    tmux.wait_for("temporary ▼")
    fifo.step()  # the three paths run; the target then waits for the next line
    tmux.wait_for("paths done")
    # A dump drains every record of the paths; a snapshot taken after the screen said so has them all.
    tmux.keys("d")
    dumped = shown_at(tmux.wait_for("dump written to live.db"))
    screen = tmux.wait_for(lambda s: shown_at(s) > dumped and row_of(s, "temp_once") != "")
    assert "view [1-6]: temporary (temporary: freed within 1 ms" in screen, screen
    # THEN what churns is temp_once, alone: nothing held or kept was freed within 1 ms
    assert table_functions(screen) == ["temp_once"], screen
    temporary = cells_of(screen, "temp_once")
    tmux.keys("m")  # the next threshold: 10 ms (hold_alloc's blocks live 10 ms or more)
    screen = tmux.wait_for("temporary: freed within 10 ms")
    assert table_functions(screen) == ["temp_once"], screen
    tmux.keys("6")
    screen = tmux.wait_for(lambda s: "median lifetime" in s and all(
        row_of(s, f) for f in ("temp_once", "hold_alloc", "never_alloc")))
    shown = {f: cells_of(screen, f) for f in ("temp_once", "hold_alloc", "never_alloc")}
    tmux.keys("q")
    tmux.wait_for("view closed: profiling stopped; waiting for pid")
    fifo.step()
    assert tmux.exit_status() == 0
    tmux.wait_for("profile written to live.db")
    # The truth at interval 1: every allocation counted; hold_alloc's lifetimes 10 ms or more,
    # temp_once's under 1 ms (the median; a preempted one may take longer), never_alloc's all held
    assert int(temporary["temp. allocations"].replace(",", "")) >= 0.9 * temp_n, temporary
    assert temporary["allocations"] == f"{temp_n:,}" and temporary["allocated"] == format_bytes(temp_n * 256)
    assert [shown[f]["allocations"] for f in ("temp_once", "hold_alloc", "never_alloc")] == [
        f"{temp_n:,}", f"{hold_n:,}", f"{never_n:,}"], shown
    assert shown["never_alloc"]["median lifetime"] == "-" and shown["never_alloc"]["% held"] == "100%", shown
    assert shown["hold_alloc"]["% held"] == "0%" and shown["hold_alloc"]["% temporary"] == "0%", shown
    # AND they are the report's, from the profile written at the end
    with open_profile(tmp_path / "live.db") as profile:
        select_heap(profile, None)
        (p,) = profile.processes()
        lives = lt.read(profile, [p.info.upid])
        assert lives is not None
        rows = {r.function: r for r in lt.lifetime_rows(profile, lives, 1_000_000, 1)}
    for f, cells in shown.items():
        r = rows[f]
        assert cells["median lifetime"] == lt.format_bucket(r.median), (f, cells, r)
        assert cells["p90 lifetime"] == lt.format_bucket(r.p90), (f, cells, r)
    hold = rows["hold_alloc"]
    assert hold.median is not None and hold.median[0] >= hold_ms * 1_000_000, hold
    temp = rows["temp_once"]
    assert temporary["temp. allocations"] == f"{round(temp.temp.value):,}", (temporary, temp)
    assert temp.median is not None and temp.median[1] is not None and temp.median[1] <= 1_000_000, temp
