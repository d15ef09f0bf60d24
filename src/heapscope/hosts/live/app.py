"""The live view: memory over time, the top stacks now, keys for a dump and a flamegraph.

Everything shown comes from the HeapSnapshot the recording loop published
last (snapshot.py) and from the target's output relayed by OutputRelay; the
view's thread never reads producer state. A dump (`d`) and a flamegraph
(`f`) are asked of the recording with Recording.fresh_dump() from a worker
thread, so the view stays responsive while the loop writes them.

    q  quit the view (final dumps; a started target runs on and is waited for)
    d  take a dump now            f  write a flamegraph page of the state now
    1-4 sort by unreleased bytes, objects held, allocated bytes, objects allocated (counts are
        estimates at the sampling interval, the report's; exact at interval 1)
    5  temporary allocations: per stack, the bytes and allocations freed within the threshold
       (report --view temporary's figures), by temporary bytes
    6  lifetimes: per stack, the median and 90th percentile lifetime of the freed allocations
       and what is still held (report --lifetimes's figures, per stack), by allocated bytes
    m  the threshold of 5 and 6: 1 ms (the report's default), 10 ms, 100 ms, 1 s, 10 us,
       100 us, heaptrack's (freed before the thread's next allocation: exact at -i 1)
    p  next process (all, then each pid)
    t  thread filter: a picker of the threads seen in the process shown (all processes: in each),
       with their names, and "all threads"; it filters the table (the memory graph stays per process)
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, OptionList, RichLog, Sparkline, Static
from textual.widgets.option_list import Option

from heapscope.hosts.live.names import Namer
from heapscope.hosts.live.snapshot import (
    FrameKey,
    HeapSnapshot,
    LifeFigures,
    ProcessView,
    Site,
    Snapshotter,
    life_figures,
    memory_columns,
)
from heapscope.store.lifetimes import CallsiteLife
from heapscope.units import format_bytes
from heapscope.view.lifetimes import DEFAULT_TEMPORARY_NS, HEAPTRACK, format_bucket, format_ns

REFRESH_S = 0.25  # how often the view looks for a new snapshot (one is taken every second)
TOP = 100  # stacks in the table
SPARK_COLUMNS = 120  # the memory sparklines' width in columns
# The count columns are the report's estimated objects (snapshot.py), the report's names:
# "objects" is said of estimates only, never of raw sample counts.
VIEW_TITLES = {"space": "unreleased", "objects": "objects held", "alloc_space": "allocated",
               "alloc_objects": "objects allocated"}
# The lifetime views (5, 6): their titles, and their columns before the function's.
LIFE_TITLES = {"temporary": "temporary", "lifetimes": "lifetimes"}
LIFE_COLUMNS = {"temporary": ("temporary", "temp. allocations", "allocated", "allocations", "% temporary"),
                "lifetimes": ("allocated", "allocations", "median lifetime", "p90 lifetime", "% temporary",
                              "% held")}
# What `m` steps through (ns, or heaptrack's definition); the first is the report's default.
THRESHOLDS: tuple[int | str, ...] = (DEFAULT_TEMPORARY_NS, 10_000_000, 100_000_000, 1_000_000_000, 10_000, 100_000,
                                     HEAPTRACK)
OUTPUT_LINES = 500


class OutputRelay:
    """Reads the target's stdout and stderr (one pipe) on its own thread, always, so the target
    never blocks on a full pipe. While the view is up the lines are kept for it (the last
    OUTPUT_LINES); after it closes they go straight to heapscope's stdout."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lines: deque[str] = deque(maxlen=OUTPUT_LINES)
        self.version = 0
        self._lock = threading.Lock()
        self._passthrough = False
        self._partial = b""
        self._thread = threading.Thread(target=self._run, name="heapscope-live-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            with self._lock:
                if not chunk:
                    if self._partial:
                        self._keep(self._partial)
                    self._partial = b""
                    break
                if self._passthrough:
                    self._write(chunk)
                    continue
                data = self._partial + chunk
                *whole, self._partial = data.split(b"\n")
                for line in whole:
                    self._keep(line)
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def _keep(self, line: bytes) -> None:
        self.lines.append(line.decode("utf-8", "replace").rstrip("\r"))
        self.version += 1

    @staticmethod
    def _write(data: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(1, data)

    def since(self, version: int) -> tuple[list[str], int]:
        """The lines kept after `version` (as many as are still kept), and the version now."""
        with self._lock:
            new = min(self.version - version, len(self.lines))
            return (list(self.lines)[len(self.lines) - new:] if new > 0 else []), self.version

    def pass_through(self) -> None:
        """The view is gone: from now on the target's output goes to our stdout."""
        with self._lock:
            self._passthrough = True
            if self._partial:
                self._write(self._partial)
                self._partial = b""

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class Control:
    """What the view may ask of the recording (all safe from any thread)."""

    def __init__(self, fresh_dump: Callable[[], None], output: Path, finished: threading.Event,
                 messages: deque[str], flamegraph: Callable[[int | None, int], Path]) -> None:
        self.fresh_dump = fresh_dump
        self.output = output
        self.finished = finished  # the recording loop is over (the target exited, or a guardrail)
        self.messages = messages  # heapscope's own lines while the view is up
        self.flamegraph = flamegraph  # (pid or None, number) -> the page written


ThreadKey = tuple[int, int]  # (pid, tid)
CANCELLED = -1
NOT_SHOWN: tuple[int, int, str, int | None, ThreadKey | None, int | str] = (-1, -1, "", None, None, 0)


def _count(value: float) -> str:
    return f"{round(value):,}"


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _lifetime_cells(f: LifeFigures) -> tuple[str, ...]:
    return (format_bytes(f.alloc_bytes), _count(f.alloc.value), format_bucket(f.median), format_bucket(f.p90),
            _percent(f.temp.value, f.alloc.value), _percent(f.held.value, f.alloc.value))


class ThreadPicker(ModalScreen[int]):
    """The threads to filter on: "all threads" first, then each thread seen (pid, tid order).

    Dismissed with the index of the choice taken, or CANCELLED (escape, or t again)."""

    CSS = """
    ThreadPicker { align: center middle; }
    #thread-picker { width: 90; height: auto; max-height: 80%; border: solid $accent; background: $surface; }
    #thread-picker OptionList { height: auto; max-height: 30; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "cancel", "cancel"),
        Binding("t", "cancel", "cancel", show=False),
    ]

    def __init__(self, title: str, labels: list[str], current: int) -> None:
        super().__init__()
        self.title_text = title
        self.labels = labels
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="thread-picker"):
            yield Static(self.title_text, markup=False)
            yield OptionList(*(Option(label, id=f"choice-{i}") for i, label in enumerate(self.labels)),
                             markup=False)

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = self.current
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option_index)

    def action_cancel(self) -> None:
        self.dismiss(CANCELLED)


class LiveApp(App[None]):
    CSS = """
    #status { height: 1; background: $boost; }
    #memory { height: 5; }
    .chart { width: 1fr; padding: 0 1; }
    .chart Sparkline { height: 3; }
    #picker { height: 1; }
    #sites { height: 1fr; }
    #stack { height: 4; border-top: solid $secondary; }
    #output { height: 6; border-top: solid $secondary; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("q", "quit_view", "quit"),
        Binding("d", "dump", "dump now"),
        Binding("f", "flamegraph", "flamegraph"),
        Binding("1", "sort('space')", "unreleased"),
        Binding("2", "sort('objects')", "objects held"),
        Binding("3", "sort('alloc_space')", "allocated"),
        Binding("4", "sort('alloc_objects')", "objects allocated"),
        Binding("5", "sort('temporary')", "temporary"),
        Binding("6", "sort('lifetimes')", "lifetimes"),
        Binding("m", "threshold", "threshold", show=False),
        Binding("p", "next_process", "process"),
        Binding("t", "threads", "threads"),
    ]

    def __init__(self, snapshots: Snapshotter, control: Control, relay: OutputRelay | None, title: str) -> None:
        super().__init__()
        self.snapshots = snapshots
        self.control = control
        self.relay = relay
        self.heading = title
        self.namer = Namer()
        self.view_name = "space"
        self.threshold: int | str = DEFAULT_TEMPORARY_NS
        self.pid: int | None = None  # None: every process
        self.thread: ThreadKey | None = None  # None: every thread
        self.quit_by_key = False
        self._shown: tuple[int, int, str, int | None, ThreadKey | None, int | str] = NOT_SHOWN
        self._output_version = 0
        self._messages_seen = 0
        self._rows: list[tuple[FrameKey, ...]] = []  # the table's stacks, top to bottom
        self._flamegraphs = 0
        self._last_action = ""

    def compose(self) -> ComposeResult:
        yield Static(self.heading, id="status", markup=False)
        with Horizontal(id="memory"):
            with Vertical(classes="chart"):
                yield Static("unreleased", id="unreleased-label", markup=False)
                yield Sparkline([0.0], id="unreleased")
            with Vertical(classes="chart"):
                yield Static("allocated", id="allocated-label", markup=False)
                yield Sparkline([0.0], id="allocated")
        yield Static("", id="picker", markup=False)
        table: DataTable[str] = DataTable(id="sites", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static("", id="stack", markup=False)
        yield RichLog(id="output", max_lines=OUTPUT_LINES, markup=False, highlight=False)
        yield Footer()

    @property
    def _main(self) -> Screen[None]:
        """The view's own screen, also while the thread picker is on top of it."""
        return self.screen_stack[0]

    def on_mount(self) -> None:
        self._columns()
        self.set_interval(REFRESH_S, self._tick)
        self._tick()

    def on_unmount(self) -> None:
        self.namer.close()

    # -- refresh -----------------------------------------------------------------------

    def _tick(self) -> None:
        if self.control.finished.is_set():
            self.exit()
            return
        self._show_output()
        snap = self.snapshots.latest()
        key = (snap.seq if snap else 0, self.namer.known, self.view_name, self.pid, self.thread, self.threshold)
        if snap is None or key == self._shown:
            return
        self._shown = key
        self._show(snap)

    def _show_output(self) -> None:
        log = self._main.query_one("#output", RichLog)
        msgs = self.control.messages
        while self._messages_seen < len(msgs):
            log.write(f"heapscope: {msgs[self._messages_seen]}")
            self._messages_seen += 1
        if self.relay is not None:
            lines, self._output_version = self.relay.since(self._output_version)
            for line in lines:
                log.write(line)

    def _show(self, snap: HeapSnapshot) -> None:
        procs = [p for p in snap.processes if self.pid is None or p.pid == self.pid]
        unreleased = sum(p.unreleased for p in procs)
        allocated = sum(p.allocated for p in procs)
        pids = {p.pid for p in procs}
        # The trackers' series (a point per 10 ms of activity), else the snapshots' own history.
        series_u, series_a = memory_columns(procs, SPARK_COLUMNS)
        if not series_u:
            series_u = [float(sum(v[0] for pid, v in point.items() if pid in pids)) for _t, point in snap.history]
            series_a = [float(sum(v[1] for pid, v in point.items() if pid in pids)) for _t, point in snap.history]
        self._main.query_one("#unreleased", Sparkline).data = series_u[-120:] or [0.0]
        self._main.query_one("#allocated", Sparkline).data = series_a[-120:] or [0.0]
        self._main.query_one("#unreleased-label", Static).update(
            f"unreleased {format_bytes(unreleased)} (peak shown {format_bytes(int(max(series_u or [0])))})")
        self._main.query_one("#allocated-label", Static).update(f"allocated {format_bytes(allocated)}")
        running = sum(1 for p in snap.processes if p.running)
        who = "all processes" if self.pid is None else next(
            (p.label for p in snap.processes if p.pid == self.pid), f"pid {self.pid}")
        view = VIEW_TITLES.get(self.view_name) or LIFE_TITLES[self.view_name]
        if self.view_name in LIFE_TITLES:
            view += f" (temporary: {self._threshold_text()}; m: threshold)"
            if self.thread is not None:
                view += ", every thread's: lifetimes are kept per process"
        self._main.query_one("#picker", Static).update(
            f"process [p]: {who} ({running} running, {len(snap.processes)} seen)"
            f"   threads [t]: {self._thread_label(snap)}   view [1-6]: {view}")
        self._main.query_one("#status", Static).update(
            f"{self.heading}   {snap.elapsed_s:6.1f} s   {snap.samples:,} samples   {self._last_action}")
        if self.view_name in LIFE_TITLES:
            self._life_table(snap, procs)
        else:
            self._table(procs)

    def _threshold_text(self) -> str:
        if self.threshold == HEAPTRACK:
            return "freed before the thread's next allocation"
        assert isinstance(self.threshold, int)
        return f"freed within {format_ns(self.threshold)}"

    def _thread_label(self, snap: HeapSnapshot) -> str:
        if self.thread is None:
            return "all"
        pid, tid = self.thread
        for p in snap.processes:
            if p.pid == pid:
                for t in p.threads:
                    if t.tid == tid:
                        return t.label + ("" if len(snap.processes) == 1 else f" (pid {pid})")
        return f"{tid} (pid {pid})"

    def _table(self, procs: list[ProcessView]) -> None:
        merged: dict[tuple[FrameKey, ...], list[int]] = {}
        for p in procs:
            own: tuple[Site, ...] = p.sites
            if self.thread is not None:
                pid, tid = self.thread
                own = () if p.pid != pid else next((t.sites for t in p.threads if t.tid == tid), ())
            for s in own:
                acc = merged.setdefault(s.frames, [0, 0, 0, 0])
                acc[0] += s.alloc_bytes
                acc[1] += s.free_bytes
                acc[2] += s.objects
                acc[3] += s.alloc_objects
        sites = [Site(f, *v) for f, v in merged.items()]
        sites.sort(key=lambda s: (-s.value(self.view_name), -s.alloc_bytes))
        self._fill([(s.frames, (format_bytes(s.value("space")), f"{s.value('objects'):,}",
                                format_bytes(s.alloc_bytes), f"{s.alloc_objects:,}")) for s in sites[:TOP]])

    def _life_table(self, snap: HeapSnapshot, procs: list[ProcessView]) -> None:
        """The lifetime views: per stack over the processes shown (all threads: lifetimes are
        kept per process); empty until a snapshot taken while they were wanted."""
        merged: dict[tuple[FrameKey, ...], dict[int, CallsiteLife]] = {}
        for p in procs:
            for site in p.lives:
                by = merged.setdefault(site.frames, {})
                for interval, life in site.lives:
                    by.setdefault(interval, CallsiteLife()).merge(life)
        figures = [life_figures(frames, by, self.threshold) for frames, by in merged.items()]
        rows: list[tuple[tuple[FrameKey, ...], tuple[str, ...]]]
        if self.view_name == "temporary":
            figures = [f for f in figures if f.temp.value > 0]
            figures.sort(key=lambda f: (-f.temp_bytes, -f.temp.value, -f.alloc_bytes))
            rows = [(f.frames, (format_bytes(f.temp_bytes), _count(f.temp.value), format_bytes(f.alloc_bytes),
                                _count(f.alloc.value), _percent(f.temp.value, f.alloc.value))) for f in figures[:TOP]]
        else:
            figures.sort(key=lambda f: (-f.alloc_bytes, -f.alloc.value))
            rows = [(f.frames, _lifetime_cells(f)) for f in figures[:TOP]]
        self._fill(rows)
        if not snap.lifetimes:
            self._main.query_one("#stack", Static).update("lifetimes: from the next snapshot (one a second)")

    def _fill(self, rows: list[tuple[tuple[FrameKey, ...], tuple[str, ...]]]) -> None:
        """The table's rows: each stack's figures, then its function and where it is called from."""
        self.namer.want(f for frames, _cells in rows for f in frames[:8])
        table = self._main.query_one("#sites", DataTable)
        cursor = table.cursor_row
        table.clear()
        for frames, cells in rows:
            names = [self.namer.name(f) for f in frames]
            table.add_row(*cells, names[0] if names else "?",
                          " < ".join(names[1:4]) + (" < ..." if len(names) > 4 else ""))
        self._rows = [frames for frames, _cells in rows]
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1), scroll=False)
        self._stack(table.cursor_row)

    def _columns(self) -> None:
        table = self._main.query_one("#sites", DataTable)
        table.clear(columns=True)
        if self.view_name in LIFE_COLUMNS:
            for i, title in enumerate(LIFE_COLUMNS[self.view_name]):
                table.add_column(title + (" ▼" if i == 0 else ""), width=max(12, len(title) + 2))
        else:
            for view, title in VIEW_TITLES.items():
                table.add_column(title + (" ▼" if view == self.view_name else ""), width=max(12, len(title) + 2))
        table.add_column("function", width=28)
        table.add_column("called from")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._stack(event.cursor_row)

    def _stack(self, row: int) -> None:
        text = ""
        if 0 <= row < len(self._rows):
            names = [self.namer.name(f) for f in self._rows[row]]
            text = "stack: " + " < ".join(names)
        self._main.query_one("#stack", Static).update(text)

    # -- keys ----------------------------------------------------------------------------

    def action_quit_view(self) -> None:
        self.quit_by_key = True
        self.exit()

    def action_sort(self, view: str) -> None:
        self.view_name = view
        self.snapshots.lifetimes = view in LIFE_TITLES  # read from the next snapshot on
        self._columns()
        self._shown = NOT_SHOWN
        self._tick()

    def action_threshold(self) -> None:
        self.threshold = THRESHOLDS[(THRESHOLDS.index(self.threshold) + 1) % len(THRESHOLDS)]
        self._tick()

    def action_next_process(self) -> None:
        snap = self.snapshots.latest()
        pids = [p.pid for p in snap.processes] if snap else []
        if self.pid is None:
            self.pid = pids[0] if pids else None
        elif self.pid in pids and pids.index(self.pid) + 1 < len(pids):
            self.pid = pids[pids.index(self.pid) + 1]
        else:
            self.pid = None
        if self.thread is not None and self.pid is not None and self.thread[0] != self.pid:
            self.thread = None  # a thread of another process: the filter would hide everything
        self._tick()

    def action_threads(self) -> None:
        snap = self.snapshots.latest()
        procs = [p for p in snap.processes if self.pid is None or p.pid == self.pid] if snap else []
        choices: list[ThreadKey | None] = [None]
        labels = ["all threads"]
        for p in sorted(procs, key=lambda p: p.pid):
            for t in p.threads:
                choices.append((p.pid, t.tid))
                where = "" if self.pid is not None or len(procs) == 1 else f"   pid {p.pid}"
                labels.append(f"{t.label:<24} {format_bytes(t.unreleased):>10} unreleased  "
                              f"{format_bytes(t.allocated):>10} allocated{where}")
        current = choices.index(self.thread) if self.thread in choices else 0
        scope = "all processes" if self.pid is None else f"pid {self.pid}"
        title = f"threads of {scope} ({len(choices) - 1} seen): enter filters the table on one, escape cancels"

        def picked(index: int | None) -> None:
            if index is not None and 0 <= index < len(choices):
                self.thread = choices[index]
                self._tick()

        self.push_screen(ThreadPicker(title, labels, current), picked)

    def action_dump(self) -> None:
        self.run_worker(self._dump, thread=True, exit_on_error=False, group="dumps")

    def action_flamegraph(self) -> None:
        self._flamegraphs += 1
        n, pid = self._flamegraphs, self.pid
        self.run_worker(lambda: self._flamegraph(pid, n), thread=True, exit_on_error=False, group="dumps")

    def _dump(self) -> None:
        try:
            self.control.fresh_dump()
        except Exception as e:
            self.call_from_thread(self._said, f"no dump: {e}", "error")
            return
        self.call_from_thread(self._said, f"dump written to {self.control.output}", "information")

    def _flamegraph(self, pid: int | None, n: int) -> None:
        try:
            path = self.control.flamegraph(pid, n)
        except Exception as e:
            self.call_from_thread(self._said, f"no flamegraph: {e}", "error")
            return
        self.call_from_thread(self._said, f"flamegraph written to {path}", "information")

    def _said(self, text: str, severity: str) -> None:
        self._last_action = text
        self.notify(text, severity="error" if severity == "error" else "information", timeout=6, markup=False)
        self._main.query_one("#output", RichLog).write(f"heapscope: {text}")
        self._shown = NOT_SHOWN
