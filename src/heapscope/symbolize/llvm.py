"""llvm-symbolizer in batch mode: addresses of one ELF file in, inline chains out.

Owns finding the tool and talking to it. One run for a whole profile: every
address of every file is written to stdin at once (`CODE "FILE" 0xADDR` a
line; starting the tool costs tens of milliseconds, a profile has dozens of
libraries) and the tool answers one JSON object per line, in order, with the
inline chain innermost first (`--inlines`). `--functions=linkage --demangle` gives the demangled
linkage name with parameters, `ns::Klass::method(int)`, the spelling the
symbol table path uses too.

HEAPSCOPE_LLVM_SYMBOLIZER=PATH picks the tool; `none` disables it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import threading

from heapscope.records import Record
from heapscope.which import which

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Sequence

ENV_VAR = "HEAPSCOPE_LLVM_SYMBOLIZER"
_FLAGS = ("--inlines", "--functions=linkage", "--demangle", "--output-style=JSON")
_VERSIONED = re.compile(r"^llvm-symbolizer-(\d+)$")
_UNKNOWN = ("", "??", "<invalid>")
# A name taken from a versioned symbol (`memcpy@@GLIBC_2.14`): the version is not part of the name.
_SYMBOL_VERSION = re.compile(r"@@?[A-Za-z_][A-Za-z0-9_.]*$")


class SymbolizerError(Exception):
    """llvm-symbolizer failed or answered something unexpected."""


class SourceFrame(Record, frozen=True):
    """One function of an address's inline chain."""

    function: str  # demangled; "" when unknown
    file: str  # "" when unknown
    line: int  # 0 when unknown


def find_llvm_symbolizer() -> str | None:
    """`llvm-symbolizer` on PATH, else the newest `llvm-symbolizer-NN` on PATH or in /usr/bin."""
    chosen = os.environ.get(ENV_VAR)
    if chosen is not None:
        if chosen.lower() in ("", "none"):
            return None
        return which(chosen)
    plain = which("llvm-symbolizer")
    if plain:
        return plain
    best: tuple[int, str] | None = None
    dirs = os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin"]
    for d in dict.fromkeys(dirs):
        try:
            names = os.listdir(d or ".")
        except OSError:
            continue
        for name in names:
            m = _VERSIONED.match(name)
            path = os.path.join(d, name)
            if m and os.access(path, os.X_OK) and (best is None or int(m.group(1)) > best[0]):
                best = (int(m.group(1)), path)
    return best[1] if best else None


def symbolize_files(tool: str, requests: Sequence[tuple[str, Sequence[int]]],
                     timeout: float = 600) -> list[list[list[SourceFrame]]]:
    """For each (path, addresses): the inline chain (innermost first) of each address, [] where unknown."""
    lines_in = [f'CODE "{path}" 0x{a:x}\n' for path, addresses in requests for a in addresses]
    if not lines_in:
        return [[] for _ in requests]
    if any('"' in path or "\n" in path for path, _ in requests):
        raise SymbolizerError(f"{tool}: a file name with a quote or newline cannot be passed")
    import subprocess  # here: a recording whose frames the cache answers starts no tool

    try:
        done = subprocess.run(
            [tool, *_FLAGS], input="".join(lines_in), capture_output=True, text=True,
            timeout=timeout, check=False, errors="replace",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SymbolizerError(f"{tool}: {e}") from e
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(lines_in):
        err = done.stderr.strip().splitlines()
        raise SymbolizerError(
            f"{tool}: exit status {done.returncode}, {len(lines)} answers for"
            f" {len(lines_in)} addresses{': ' + err[-1] if err else ''}")
    chains = iter([_parse(line, tool) for line in lines])
    return [[next(chains) for _ in addresses] for _, addresses in requests]


def _lowest_priority() -> None:
    os.nice(19)


# Characters asked of a warm tool ahead of its answers, at most: at 4 bytes a character still
# within a pipe's 64 KiB, so that the recording loop's writes never wait for the tool (it runs at
# the lowest priority).
PIPE_ROOM = 16 * 1024


READER_REAP_S = 5.0  # its output ended: it has exited, or soon will


class WarmSymbolizer:
    """One llvm-symbolizer kept running while the target runs.

    `warm(path)` asks for address 0 of a file as soon as the file is known,
    so that the tool reads its debug info on the producer's idle core; the
    real addresses then cost only their lookups when recording ends.
    `prefetch(path, addresses)` asks for addresses already known to be wanted
    (a known module's new ones), so that even their lookups are done by then.
    A reader thread drains the tool's output so neither side ever blocks on a
    full pipe; what is asked ahead is bounded so that a write never waits on
    the tool (PIPE_ROOM).
    """

    def __init__(self, tool: str) -> None:
        self.tool = tool
        # Lowest priority: it should use only a core the target leaves idle
        # (measured: at normal priority it slowed a 4-thread target on 2 cores).
        import subprocess

        self.proc = subprocess.Popen([tool, *_FLAGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, errors="replace", bufsize=1,
                                     preexec_fn=_lowest_priority)
        self._answers: list[str] = []
        self._cond = threading.Condition()
        self._asked = 0
        self._sent = [0]  # characters written up to each line asked (the first: none)
        self._ahead: dict[tuple[str, int], int] = {}  # (file, address) asked ahead -> its answer's index
        self._warmed: set[str] = set()
        self._reap = False  # stop(): the reader reaps the tool when its output ends
        self._read_done = False
        self._reader = threading.Thread(target=self._read, name="llvm-symbolizer-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self._answers.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()
            self._read_done = True
            reap = self._reap
        if reap:
            self.proc.wait()  # killed by stop(): its output ended with it
        else:
            # It ended by itself (a signal of its own: a hung-up terminal's SIGHUP reaches it too):
            # reaped now, not left a zombie until a close() that may be far off.
            wait_exit(self.proc, READER_REAP_S)

    def _ask(self, lines: list[str]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("".join(lines))
            self.proc.stdin.flush()
        except OSError as e:
            raise SymbolizerError(f"{self.tool}: {e}") from e
        self._asked += len(lines)
        sent = self._sent[-1]
        for line in lines:
            sent += len(line)
            self._sent.append(sent)

    def _room(self) -> int:
        """Characters that can be asked without a write waiting: PIPE_ROOM less those not yet answered."""
        with self._cond:
            answered = len(self._answers)
        return PIPE_ROOM - (self._sent[-1] - self._sent[min(answered, self._asked)])

    def warm(self, path: str) -> None:
        if path in self._warmed or '"' in path or "\n" in path or self.proc.poll() is not None:
            return
        self._warmed.add(path)
        line = f'CODE "{path}" 0x0\n'
        if len(line) <= self._room():
            self._ask([line])

    def prefetch(self, path: str, addresses: Sequence[int]) -> int:
        """Ask now for addresses of `path` that symbolize_files will be asked for (as many as the
        pipe takes without waiting; the rest are asked then). Returns how many were asked."""
        if '"' in path or "\n" in path or self.proc.poll() is not None:
            return 0
        self._warmed.add(path)
        room = self._room()
        lines: list[str] = []
        for a in addresses:
            if (path, a) in self._ahead:
                continue
            line = f'CODE "{path}" 0x{a:x}\n'
            if len(line) > room:
                break
            room -= len(line)
            self._ahead[(path, a)] = self._asked + len(lines)
            lines.append(line)
        if lines:
            self._ask(lines)
        return len(lines)

    def symbolize_files(self, requests: Sequence[tuple[str, Sequence[int]]],
                        timeout: float = 600) -> list[list[list[SourceFrame]]]:
        """As the module function `symbolize_files`, on this running tool."""
        if any('"' in path or "\n" in path for path, _ in requests):
            raise SymbolizerError(f"{self.tool}: a file name with a quote or newline cannot be passed")
        # Each address's answer: one asked ahead (prefetch), or one asked now.
        at: list[int] = []
        new: list[str] = []
        for path, addresses in requests:
            for a in addresses:
                i = self._ahead.get((path, a))
                if i is None:
                    i = self._asked + len(new)
                    new.append(f'CODE "{path}" 0x{a:x}\n')
                at.append(i)
        if new:
            self._ask(new)
        need = max(at, default=-1) + 1  # answers come in the order asked
        with self._cond:
            done = self._cond.wait_for(lambda: len(self._answers) >= need or not self._reader.is_alive(), timeout)
            answers = self._answers[:need]
        if not done or len(answers) < need:
            raise SymbolizerError(f"{self.tool}: {len(answers)} answers for {need} addresses")
        chains = iter([_parse(answers[i], self.tool) for i in at])
        return [[next(chains) for _ in addresses] for _, addresses in requests]

    def stop(self) -> None:
        """End it now: what it was still warming is no longer wanted (its answers are in). Its
        exit is not waited for here: a tool that read large debug files takes ~6-8 ms to go
        (the end of `record` waited for it), and the reader thread reaps it when its output
        ends; `gone()` waits for that."""
        with self._cond:
            self._reap = True
            done = self._read_done
        if self.proc.returncode is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if done:
            self.proc.wait()  # the reader ended before the kill: it reaps nothing

    def gone(self, timeout: float) -> bool:
        """After stop(): whether the tool has exited and been reaped within `timeout` s."""
        self._reader.join(timeout)
        return self.proc.returncode is not None

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if not wait_exit(self.proc, 10):
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)


def wait_exit(proc: subprocess.Popen[str], timeout: float) -> bool:
    """Wait up to `timeout` s for `proc` to exit, woken by its exit (a pidfd), never by a timer
    (Popen.wait(timeout) polls with sleeps). False when it is still running."""
    if proc.returncode is not None:
        return True  # reaped: its pid may be another process's by now
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # reaped already, or a kernel without pidfds
        import subprocess

        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(int(timeout * 1000)):
            return False
    finally:
        os.close(fd)
    proc.wait()
    return True


def symbolize_file(tool: str, path: str, addresses: Sequence[int], timeout: float = 600) -> list[list[SourceFrame]]:
    """The inline chain (innermost first) of each address of `path`, [] where nothing is known."""
    return symbolize_files(tool, [(path, addresses)], timeout)[0]


def _parse(line: str, tool: str) -> list[SourceFrame]:
    try:
        answer = json.loads(line)
    except json.JSONDecodeError as e:
        raise SymbolizerError(f"{tool}: not JSON output ({line[:80]!r}); --output-style=JSON unsupported?") from e
    chain = []
    for s in answer.get("Symbol") or ():
        function = _SYMBOL_VERSION.sub("", str(s.get("FunctionName") or ""))
        file = str(s.get("FileName") or "")
        chain.append(SourceFrame(
            "" if function in _UNKNOWN else function,
            "" if file in _UNKNOWN else file,
            int(s.get("Line") or 0),
        ))
    if all(not f.function and not f.file for f in chain):
        return []
    return chain
