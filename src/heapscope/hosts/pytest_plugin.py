"""The pytest plugin: per-test sampled peaks, `limit_memory` and `limit_leaks`.

    python3 -m pytest --heapscope tests/

How it records (re-exec). The client must be in the process from its start
(LD_PRELOAD: an attach patches only the objects loaded by then, client/inject.c),
so with `--heapscope` the pytest that the user started runs no test: it becomes
the parent, holding a `Recording` (heapscope/session/), and runs the same pytest
command again as its child under the client. It does so from
pytest_load_initial_conftests, before any conftest.py is imported and before
collection: both happen once, in the child. The child runs the tests and,
around each test's call, asks the parent over a private Unix socket:

    child: {"op": "start"}               parent: drains the child's ring,
                                          starts a peak window (tracker.h)
    child: {"op": "end", "nodeid": ...,  parent: drains again, reads the
            "limits": {...}}                window: peak and end relative to
                                          the start; names the top stacks
                                          only of a figure over its limit
    child: {"op": "report",              parent: names the top stacks of
            "nodeids": [...]}               the tests the report shows

A test's peak is the highest sampled unreleased bytes of the process during
its call, minus those at its start; what it leaks is the sampled unreleased
bytes at its end minus those at its start. Both are sampled estimates: at
interval I their standard error is about sqrt(I * bytes) (the project's
accuracy bound for many small allocations). Every question waits at most
ASK_TIMEOUT_S; on no answer the child stops asking, says so once, and the
tests run on unmeasured. The child prints the report at its end (pytest's
terminal summary); the parent exits with the child's status, so a test
that crashes the interpreter shows as it would without the plugin.

Without `--heapscope` the plugin only declares its marks: they do nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from heapscope.records import Record, field
from heapscope.units import format_bytes, parse_limit, parse_size

if TYPE_CHECKING:
    from heapscope.model import Frame, Mapping
    from heapscope.session import Recording, WindowSnapshot

ENV_SOCKET = "HEAPSCOPE_PYTEST_SOCKET"
ENV_ALLOCATOR = "HEAPSCOPE_PYTEST_PYTHONMALLOC"  # the parent set PYTHONMALLOC
# The parent may be slow (a loaded machine, a large first resolve of stacks) but must
# never hang the tests: bounded, and only paid once (the child stops asking).
ASK_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0
TOP_STACKS = 3  # stacks named per test
STACK_DEPTH = 6  # frames shown per stack
MAX_LINE = 1 << 20
# The question asked before every test and its usual answer, ready-made on both sides
# (JSON still: the rest of the exchange reads them like any other line).
START = b'{"op": "start"}'
STARTED = b'{"ok": 1}'
_STARTED: dict[str, Any] = {"ok": 1}  # STARTED, decoded; never changed

def standard_error(interval: int, nbytes: int) -> float:
    """Standard error of a sampled byte estimate at `interval`: about sqrt(interval * bytes)."""
    return math.sqrt(interval * max(nbytes, 0)) if interval > 1 else 0.0


def estimate(interval: int, nbytes: int) -> str:
    return f"{format_bytes(nbytes)} ± {format_bytes(round(standard_error(interval, nbytes)))}"


# -- options and marks ---------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("heapscope", "native heap profiling (heapscope)")
    group.addoption("--heapscope", action="store_true", default=False,
                    help="record each test's sampled native heap peak; report the largest; enforce "
                         "limit_memory / limit_leaks marks")
    group.addoption("--heapscope-interval", default="4096", metavar="BYTES",
                    help="mean bytes between samples (default 4096; 1 = every allocation)")
    group.addoption("--heapscope-top", type=int, default=5, metavar="N",
                    help="tests shown in the report (default 5)")
    group.addoption("--heapscope-python-objects", action="store_true", default=False,
                    help="run the tests with PYTHONMALLOC=malloc, so that Python objects of up to 512 bytes "
                         "(from CPython's own arenas otherwise, unseen) are seen; slower (about 2x)")
    group.addoption("--heapscope-output", default=None, metavar="FILE",
                    help="also keep the whole run's profile there (symbolized; default: none kept)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "limit_memory(size): fail when the test's sampled heap peak exceeds size "
                                       "(with --heapscope)")
    config.addinivalue_line("markers", "limit_leaks(size): fail when the test still holds more than size of "
                                       "sampled heap at its end (with --heapscope)")
    if not config.getoption("heapscope") or not os.environ.get(ENV_SOCKET):
        return
    # Taken out of the environment: a pytest that a test runs is not our child,
    # and a Python it runs has the allocator it would have had.
    if os.environ.pop(ENV_ALLOCATOR, None):
        os.environ.pop("PYTHONMALLOC", None)
    child = _Child(config, os.environ.pop(ENV_SOCKET))
    config.pluginmanager.register(child, "heapscope-child")


# The parent's exit status, once its child has run the tests (pytest_load_initial_conftests),
# and the argument list it emptied with what it held (given back at pytest_cmdline_main).
_EXIT = pytest.StashKey[int]()
_ARGS = pytest.StashKey[tuple[list[str], list[str]]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> Any:
    """The re-exec, as early as a plugin can: before any conftest.py is imported and
    before collection, so that both happen once, in the child. Outermost of the
    wrappers of this hook: pytest's output capture (capture.py) starts inside it."""
    ns = early_config.known_args_namespace
    if getattr(ns, "heapscope", False) and not os.environ.get(ENV_SOCKET) and not (ns.help or ns.version):
        early_config.stash[_EXIT] = _run_parent(early_config, ns)
        # This process runs no test: no conftest to import, and nothing left to parse
        # (the options a conftest.py would have declared are the child's affair).
        ns.noconftest = True
        early_config.stash[_ARGS] = (args, list(args))
        args[:] = []
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    code: int | None = config.stash.get(_EXIT, None)
    if code is not None:
        emptied, held = config.stash[_ARGS]
        emptied[:] = held  # pytest.main(args) was given that list: as pytest left it
        return code
    if not config.getoption("heapscope") or os.environ.get(ENV_SOCKET):
        return None
    # The plugin came too late for the hook above (registered by a conftest.py): re-exec from here.
    return _run_parent(config, config.option)


def _interval(opts: Any) -> int:
    """Read as `record -i` reads it (4k = 4096): the same interval under both spellings."""
    from heapscope.errors import UsageError

    try:
        return parse_size(str(opts.heapscope_interval), "--heapscope-interval")
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None


# -- the parent: the recording ---------------------------------------------------


def _run_parent(config: pytest.Config, given: Any) -> int:
    """Run the same pytest command as a child under the client; its exit status.
    `given`: the parsed options (config.option, or known_args_namespace before the parse)."""
    import shutil

    from heapscope.errors import HeapscopeError
    from heapscope.session import RecordConfig, Recording, RecordingOptions, owned_dir

    interval = _interval(given)
    out = given.heapscope_output
    # A directory like the recording's own: its owner lock lets a later run remove it when this
    # process dies without cleaning up (killed).
    path, owner = owned_dir("pytest-")
    work = Path(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(work / "control.sock"))
        listener.listen(1)
        rcfg = RecordConfig(interval=interval)
        output = Path(out) if out else work / "run.db"
        # Without --heapscope-output no profile is built at all (RecordingOptions.keep): only the
        # per-test windows are read, and the few stacks a reply names are read by id.
        opts = RecordingOptions(symbolize=bool(out), force=bool(out), command="pytest --heapscope", keep=bool(out))
        argv = [sys.executable, "-m", "pytest", *config.invocation_params.args]

        def warn(msg: str) -> None:
            print(f"heapscope: {msg}", file=sys.stderr, flush=True)

        os.environ[ENV_SOCKET] = str(work / "control.sock")
        # CPython takes objects of up to 512 bytes from arenas it maps itself, not
        # from malloc: with its own allocator they would be invisible to the client.
        allocator = None
        if given.heapscope_python_objects and "PYTHONMALLOC" not in os.environ:
            allocator = os.environ["PYTHONMALLOC"] = "malloc"
            os.environ[ENV_ALLOCATOR] = "1"  # the child takes both out of its environment again
        try:
            with Recording(rcfg, output, opts, warn=warn) as rec:
                parent = _Parent(rec, listener, interval, given.heapscope_top, bool(out))
                pid = rec.start(argv)
                parent.serve(pid)
                code = rec.run_until_exit()
        finally:
            os.environ.pop(ENV_SOCKET, None)
            if allocator is not None:
                os.environ.pop("PYTHONMALLOC", None)
                os.environ.pop(ENV_ALLOCATOR, None)
        if out:
            print(f"heapscope: the run's profile is in {output}", file=sys.stderr)
        died = rec.child.returncode if rec.child is not None else 0
        if died is not None and died < 0:
            # The tests' process died of a signal (a crash): so does this one, as pytest would have.
            listener.close()
            shutil.rmtree(work, ignore_errors=True)
            sys.stdout.flush()
            sys.stderr.flush()
            with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
                signal.signal(-died, signal.SIG_DFL)
            os.kill(os.getpid(), -died)
        return code
    except HeapscopeError as e:
        raise pytest.UsageError(f"--heapscope: {e}") from None
    finally:
        listener.close()
        shutil.rmtree(work, ignore_errors=True)
        os.close(owner)


class _Named(Record):
    name: str
    where: str  # the file it is in
    python: bool
    runner: bool = False  # a frame of the test runner itself (pytest, pluggy): never the answer


class _Parent:
    """Answers the child's questions on the Recording's loop thread."""

    def __init__(self, rec: Recording, listener: socket.socket, interval: int, top: int, keep: bool) -> None:
        self.rec = rec
        self.keep = keep  # the profile is kept (--heapscope-output)
        self.listener = listener
        self.interval = interval
        self.top = max(top, 0)
        self.pid = 0
        # The tests of the largest peaks so far (at least `top`; ties kept): nodeid ->
        # (peak, [(bytes, callsite, stack id, names or None until the report asks)]).
        self.board: dict[str, tuple[int, list[tuple[int, int, int, list[str] | None]]]] = {}
        self.least = 0  # the `top`-th largest peak on the board, once it holds `top` tests
        self.window: WindowSnapshot | None = None  # the tests' process, as of the last snapshot
        self.parents: list[tuple[int, int]] = [(0, 0)]  # callsite id -> (parent, frame)
        self.frames: list[Frame | None] = [None]
        self.mappings: list[Mapping | None] = [None]
        self.symbols: dict[str, Any] = {}
        self.conn: socket.socket | None = None
        self.buf = b""
        self.named: dict[int, _Named] = {}  # frame id -> its name

    def serve(self, pid: int) -> None:
        """Answer the child's questions from the Recording's loop: it wakes on our sockets."""
        self.pid = pid
        if self.keep:
            self.rec.status = self._idle
        self.listener.setblocking(False)
        self.rec.watch(self.listener.fileno(), self._accept)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self.rec.watch(self.listener.fileno(), None)
        self.conn = conn
        self.rec.watch(conn.fileno(), self._read)

    def _read(self) -> None:
        """The child's questions, one line of JSON each; it waits for each answer."""
        conn = self.conn
        if conn is None:
            return
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the child is gone
            self.rec.watch(conn.fileno(), None)
            conn.close()
            self.conn = None
            return
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                msg = {"op": "start"} if line == START else json.loads(line)
            except ValueError:
                msg = {}
            self._answer(conn, msg)

    def _idle(self, _now: float) -> None:
        """Every STATUS_EVERY_S on the loop: resolve the stacks so far while the tests run
        on the other core, so that the final dump after the last test has little left to do."""
        self.rec.caught_up(self.pid, resolve=True)

    @staticmethod
    def _send(conn: socket.socket, reply: dict[str, Any]) -> None:
        data = STARTED + b"\n" if reply is _STARTED else json.dumps(reply).encode() + b"\n"
        try:
            sent = conn.send(data)  # at once, nearly always: the child reads each answer before asking again
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return
        if sent < len(data):  # a large report: the rest with a bound on the wait
            conn.setblocking(True)
            conn.settimeout(ASK_TIMEOUT_S)
            with contextlib.suppress(OSError):
                conn.sendall(data[sent:])
            conn.setblocking(False)

    def _answer(self, conn: socket.socket, msg: dict[str, Any]) -> None:
        try:
            reply = self._window(msg)
        except Exception as e:  # never leave the child waiting
            reply = {"off": f"internal error ({type(e).__name__}: {e})"}
        self._send(conn, reply)

    def _window(self, msg: dict[str, Any]) -> dict[str, Any]:
        # Stacks are resolved to callsites only when a kept profile needs it (below);
        # the few stacks a reply names are named from their pcs.
        op = msg.get("op")
        if op == "start":
            started = self._snapshot(restart=True)
            return {"off": "the test process is not profiled"} if started is None else _STARTED
        if op == "report":
            return {"stacks": {nodeid: self._board_stacks(nodeid) for nodeid in msg.get("nodeids", [])
                               if nodeid in self.board}}
        snap = self._snapshot(restart=False)
        if snap is None:
            return {"off": "the test process is not profiled"}
        self.window = snap
        reply: dict[str, Any] = {"peak": snap.peak, "leak": snap.leak, "interval": self.interval}
        limits = msg.get("limits") or {}
        over_peak = snap.peak > limits.get("limit_memory", snap.peak)
        over_leak = snap.leak > limits.get("limit_leaks", snap.leak)
        ranked = self._ranks(snap.peak)
        if not (over_peak or over_leak or ranked):
            return reply  # the usual case: no row read, nothing named
        rows = snap.window_rows()
        by_peak = sorted((r for r in rows if r[2] > 0), key=lambda r: -r[2])[:TOP_STACKS]
        if over_peak:
            reply["peak_stacks"] = [[r[2], self._stack(snap, r[0], r[1])] for r in by_peak]
        if over_leak:
            by_leak = sorted((r for r in rows if r[4] > 0), key=lambda r: -r[4])[:TOP_STACKS]
            reply["leak_stacks"] = [[r[4], self._stack(snap, r[0], r[1])] for r in by_leak]
        if ranked:
            # Named when the report asks (few of the tests ranked on the way end up in it); with a
            # kept profile now, as its stacks are resolved to callsites (and let go) as the run goes.
            self.board[str(msg.get("nodeid", ""))] = (snap.peak, [
                (r[2], r[0], r[1], self._stack(snap, r[0], r[1]) if self.keep else None)
                for r in by_peak])
            self._prune_board()
        return reply

    def _snapshot(self, restart: bool) -> WindowSnapshot | None:
        """The one use of the peak-window API (Recording.window_snapshot, tracker.h): the figures
        since the window began (restart: and a new window begins); None if not profiled."""
        return self.rec.window_snapshot(self.pid, restart=restart, keep_peak=restart and self.keep)

    def _ranks(self, peak: int) -> bool:
        """Whether a test of this peak is among the `top` largest so far (ties kept)."""
        if self.top <= 0 or peak <= 0:
            return False
        return len(self.board) < self.top or peak >= self.least

    def _prune_board(self) -> None:
        """After a test joined the board (rare: the board is sorted here, not per test)."""
        if len(self.board) < self.top:
            return
        least = self.least = sorted((v[0] for v in self.board.values()), reverse=True)[self.top - 1]
        if len(self.board) > self.top:
            for nodeid in [k for k, v in self.board.items() if v[0] < least]:
                del self.board[nodeid]

    def _board_stacks(self, nodeid: str) -> list[list[Any]]:
        _peak, rows = self.board[nodeid]
        return [[n, names if names is not None else self._stack(self.window, callsite, stack_id)]
                for n, callsite, stack_id, names in rows]

    # -- names ---------------------------------------------------------------

    def _stack(self, window: WindowSnapshot | None, callsite: int, stack_id: int) -> list[str]:
        """A callsite's (or a stack's) frames, leaf first, named; through `order_frames`."""
        rec = self.rec
        frame_ids: list[int] = []
        if callsite:
            self.parents.extend(rec.callsite_paths(len(self.parents)))
            node = callsite
            while node and len(frame_ids) < 1024:
                node, frame_id = self.parents[node]
                frame_ids.append(frame_id)
        else:
            ids = window.stack_frame_ids(stack_id) if window is not None else None
            if ids is None:
                return ["[stack not received yet]"]
            frame_ids = ids
        self.frames.extend(rec.frames_since(len(self.frames) - 1))
        self.mappings.extend(rec.mappings_since(len(self.mappings) - 1))
        return [f"{n.name} ({n.where})" if n.where else n.name for n in self._shown(frame_ids)]

    def _shown(self, frame_ids: list[int]) -> list[_Named]:
        """order_frames() of the frames, the first STACK_DEPTH; a native frame is named (from
        its library's symbol table, read once: ~10 ms for libpython) only when it may be shown.
        The Python frames come first and often fill the stack; the native ones shown are those
        the innermost Python frame called (the interpreter's outer frames, `Py_RunMain` to
        `__libc_start_main`, are on every stack and say nothing of the test)."""
        python: list[_Named] = []
        native: list[int] = []
        inner = True  # no Python frame yet, kept or not
        for f in frame_ids:
            if self._native(f):
                if inner:
                    native.append(f)
            else:
                inner = False
                n = self._named(f)
                if _kept(n):
                    python.append(n)
        shown = python[:STACK_DEPTH]
        for f in native:
            if len(shown) >= STACK_DEPTH:
                break
            n = self._named(f)
            if _kept(n):
                shown.append(n)
        return shown

    def _native(self, frame_id: int) -> bool:
        """Whether order_frames puts the frame after the Python ones, told without naming it."""
        n = self.named.get(frame_id)
        if n is not None:
            return not n.python
        frame = self.frames[frame_id]
        if frame is None:
            return True
        mapping = self.mappings[frame.mapping]
        return not is_python_frame(frame.name, mapping.name if mapping is not None else "")

    def _named(self, frame_id: int) -> _Named:
        n = self.named.get(frame_id)
        if n is None:
            n = self.named[frame_id] = self._name(frame_id)
        return n

    def _name(self, frame_id: int) -> _Named:
        frame = self.frames[frame_id]
        if frame is None:
            return _Named("?", "", False)
        mapping = self.mappings[frame.mapping]
        path = mapping.name if mapping is not None else ""
        where = os.path.basename(path)
        if frame.name:
            python = is_python_frame(frame.name, path)
            if python and frame.rel_pc:  # a Python frame's rel_pc is its line (bookkeeping/frames.py)
                return _Named(frame.name, f"{where}:{frame.rel_pc}", True, _is_runner(path))
            return _Named(frame.name, where, python, python and _is_runner(path))
        name = self._lookup(path, frame.rel_pc)
        return _Named(name or f"{where}+{frame.rel_pc:#x}", where, is_python_frame(name or "", path))

    def _lookup(self, path: str, rel_pc: int) -> str | None:
        from heapscope.symbolize.symtab import ElfReadError, read_elf_symbols

        if path not in self.symbols:
            self.symbols[path] = None
            if path.startswith("/"):
                with contextlib.suppress(OSError, ElfReadError):
                    self.symbols[path] = read_elf_symbols(path)
        syms = self.symbols[path]
        return syms.lookup(rel_pc) if syms is not None else None


def is_python_frame(name: str, mapping_path: str) -> bool:
    """A frame of Python code: the producer gives Python frames a mapping of their own,
    `[python]` or the source file (main's docs/python-frames.md, "the splice")."""
    return (mapping_path.startswith(("[python", "<frozen ")) or mapping_path.endswith((".py", ".pyw"))
            or ".py:" in name)


def order_frames(frames: list[_Named]) -> list[_Named]:
    """Stacks are shown leaf first, Python frames before native ones; allocator
    frames (the malloc family, the client's own) and the test runner's own
    Python frames (pytest, pluggy: on every test's stack) are left out."""
    shown = [f for f in frames if _kept(f)]
    return [f for f in shown if f.python] + [f for f in shown if not f.python]


def _kept(f: _Named) -> bool:
    return f.name not in _ALLOCATOR and "libheapscope" not in f.where and not f.runner


def _is_runner(path: str) -> bool:
    """A Python file of pytest or pluggy (installed or in a source tree), or of what
    `python -m pytest` starts through: runpy (frozen since 3.11) and pytest's __main__."""
    parts = path.replace("\\", "/").split("/")
    return (any(p in ("_pytest", "pluggy") for p in parts[:-1]) or parts[-1] in ("pytest.py", "runpy.py")
            or path == "<frozen runpy>" or parts[-2:] == ["pytest", "__main__.py"])


_ALLOCATOR = frozenset({"malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc", "memalign",
                        "valloc", "pvalloc", "reallocarray", "operator new(unsigned long)",
                        "operator new[](unsigned long)"})


# -- the child: the tests ------------------------------------------------------------


class HeapFigures(Record):
    nodeid: str
    peak: int
    leak: int
    interval: int
    peak_stacks: list[tuple[int, list[str]]] = field(default_factory=list)
    leak_stacks: list[tuple[int, list[str]]] = field(default_factory=list)


class _Child:
    """Runs in the pytest under the client: asks the parent around each test's call."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.interval = _interval(config.option)
        self.top = config.getoption("heapscope_top")
        self.off = ""  # why nothing is measured any more
        self.results: dict[str, HeapFigures] = {}
        self.sock: socket.socket | None = None
        self.buf = b""
        # Replies are read into this buffer: no allocation of ours lands in a test's window.
        self.chunk = bytearray(65536)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(CONNECT_TIMEOUT_S)
            s.connect(path)
            # Blocking, with the bound on each wait kept by the kernel: a question costs a
            # send and a recv (a Python-level timeout would poll() before each).
            s.settimeout(None)
            wait = _timeval(ASK_TIMEOUT_S)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, wait)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, wait)
            self.sock = s
        except OSError as e:
            self.off = f"cannot reach the recording ({e.strerror or e})"

    def _ask(self, msg: dict[str, Any] | bytes) -> dict[str, Any] | None:
        """The parent's answer to msg (a dict, or a line ready-made: START); None when it is off.
        A wait that the kernel ends (SO_RCVTIMEO) raises BlockingIOError: no answer."""
        if self.sock is None or self.off:
            return None
        try:
            self.sock.sendall((msg if isinstance(msg, bytes) else json.dumps(msg).encode()) + b"\n")
            while b"\n" not in self.buf:
                n = self.sock.recv_into(self.chunk)
                if not n or len(self.buf) > MAX_LINE:
                    raise OSError("the recording went away")
                self.buf += self.chunk[:n]
            line, self.buf = self.buf.split(b"\n", 1)
            reply: dict[str, Any] = _STARTED if line == STARTED else json.loads(line)
        except (OSError, ValueError) as e:
            self._stop(f"no answer from the recording ({e}); the tests run on unmeasured")
            return None
        if "off" in reply:
            self._stop(f"{reply['off']}; the tests run on unmeasured")
            return None
        return reply

    def _stop(self, why: str) -> None:
        self.off = why
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        print(f"\nheapscope: {why}", file=sys.stderr, flush=True)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        limits = _limits(item)
        started = self._ask(START) is not None
        outcome = yield
        if not started:
            return
        reply = self._ask({"op": "end", "nodeid": item.nodeid, "limits": limits})
        if reply is None:
            return
        res = HeapFigures(item.nodeid, reply["peak"], reply["leak"], reply["interval"],
                       [(n, s) for n, s in reply.get("peak_stacks", [])],
                       [(n, s) for n, s in reply.get("leak_stacks", [])])
        self.results[item.nodeid] = res
        if outcome.excinfo is not None:
            return  # the test failed on its own: that is what it reports
        failures = _check(res, limits)
        if failures:
            outcome.force_exception(pytest.fail.Exception("\n".join(failures), pytrace=False))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_sep("=", "heapscope: largest sampled heap peaks")
        if self.off and not self.results:
            tr.write_line(f"not measured: {self.off}")
            return
        tr.write_line(f"{len(self.results)} tests measured at a sampling interval of {self.interval} bytes "
                      "(estimate ± standard error; peak = highest unreleased bytes during the test's call "
                      "above its start)")
        if self.off:
            tr.write_line(f"measuring stopped: {self.off}")
        ranked = sorted(self.results.values(), key=lambda r: -r.peak)[:self.top]
        # Their stacks are named now, for these few tests only.
        reply = self._ask({"op": "report", "nodeids": [r.nodeid for r in ranked]}) if ranked else None
        named: dict[str, list[list[Any]]] = reply.get("stacks", {}) if reply is not None else {}
        for r in ranked:
            tr.write_line(f"{estimate(r.interval, r.peak):>24}  {r.nodeid}"
                          + (f"  (held at its end: {estimate(r.interval, r.leak)})" if r.leak > 0 else ""))
            for n, stack in named.get(r.nodeid, []):
                tr.write_line(f"{'':>8}{format_bytes(n):>12}  " + " < ".join(stack))


def _timeval(seconds: float) -> bytes:
    """A struct timeval of `seconds` for SO_RCVTIMEO/SO_SNDTIMEO; at least 1 us (0 would be no bound)."""
    us = max(1, round(seconds * 1e6))
    return struct.pack("ll", us // 1_000_000, us % 1_000_000)


def _limits(item: pytest.Item) -> dict[str, int]:
    limits: dict[str, int] = {}
    for name in ("limit_memory", "limit_leaks"):
        mark = item.get_closest_marker(name)
        if mark is None:
            continue
        if len(mark.args) != 1 or mark.kwargs:
            raise pytest.UsageError(f"{item.nodeid}: {name} takes one size, like {name}(\"24 MB\")")
        try:
            limits[name] = parse_limit(mark.args[0])
        except ValueError as e:
            raise pytest.UsageError(f"{item.nodeid}: {name}: {e}") from None
    return limits


def _check(res: HeapFigures, limits: dict[str, int]) -> list[str]:
    lines: list[str] = []
    for name, value, stacks, what in (("limit_memory", res.peak, res.peak_stacks, "sampled heap peak"),
                                      ("limit_leaks", res.leak, res.leak_stacks, "sampled heap held at its end")):
        limit = limits.get(name)
        if limit is None or value <= limit:
            continue
        lines.append(f"heapscope {name}: the test's {what} is {estimate(res.interval, value)} "
                     f"(standard error at interval {res.interval}), over its limit of {format_bytes(limit)}")
        lines.append("top allocating stacks (leaf first):")
        for n, stack in stacks:
            lines.append(f"  {format_bytes(n):>10}  " + " < ".join(stack))
    return lines
