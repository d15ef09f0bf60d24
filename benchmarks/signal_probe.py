"""A fault-injection probe of `heapscope record`'s signals and exit statuses, without a terminal.

    python benchmarks/signal_probe.py [--heapscope CMD] [--rounds N] [--out DIR] [--only CLASSES]

Classes (--only, comma-separated; all by default):
  stderr   record's stderr (and stdout) closed or on /dev/full, the target ending by exit or by a
           signal, with and without -v: record's status must be the target's
  early    a signal at a random moment of record's first ~100 ms (before, during and after its
           handlers and the target's spawn): record must never die of it once the target exists,
           and its status must be the one the target gives (or, for what comes before the target
           exists, the one the signal would have given it), and no traceback; PROBE_SIGNALS=INT,USR1
           (environment) picks the signals; each finding says whether record had held its signals yet
  group    signals to record's process group (kill -- -PGID, the target's own kill 0, timeout(1),
           nohup): the target (tests/fault/programs/record_groupsig.c) must count each once

Each run has a timeout: a run past it is a hang. After each run, a process left with the run's
marker in its command line is an orphan. Prints one line per finding and the counts per class.
Nothing is asserted; the exit status is the number of findings (capped at 100).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE.parent / "tests" / "fault" / "programs"
RUN_TIMEOUT_S = 60.0


class Probe:
    def __init__(self, heapscope: list[str], out: Path) -> None:
        self.hs = heapscope
        self.out = out
        self.runs: dict[str, int] = {}
        self.findings: list[str] = []

    def record(self, cls: str, ok: bool, what: str) -> None:
        self.runs[cls] = self.runs.get(cls, 0) + 1
        if not ok:
            self.findings.append(f"{cls}: {what}")
            print(f"FINDING {cls}: {what}", flush=True)

    def orphans(self, marker: str) -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
        return found

    def kill_orphans(self, marker: str) -> list[int]:
        found = self.orphans(marker)
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return found


def stderr_class(p: Probe, rounds: int) -> None:
    """Closed and failing stdout/stderr, every way the target ends, -v or not."""
    ends = {"exit 7": 7, "exit 0": 0, "kill -TERM $$": 143, "kill -KILL $$": 137, "kill -SEGV $$": 139}
    redirects = ["2>&-", "2>/dev/full", ">&- 2>&-", ">/dev/full 2>&1", "2>&- <&-"]
    for _ in range(rounds):
        for redirect in redirects:
            for end, want in ends.items():
                for verbose in ([], ["-v"]):
                    marker = f"probe-{uuid.uuid4().hex}"
                    db = p.out / f"{marker}.db"
                    # The target's children allocate a little first, so there is a profile to write.
                    target = ["sh", "-c", f"ulimit -c 0; head -c 100000 /dev/zero | od > /dev/null; {end}", marker]
                    argv = [*p.hs, *verbose, "record", "-o", str(db), "--", *target]
                    line = " ".join(f"'{a}'" for a in argv)
                    what = f"{redirect} {' '.join(verbose)} target `{end}`"
                    try:
                        r = subprocess.run(["sh", "-c", f"exec {line} {redirect}"], timeout=RUN_TIMEOUT_S,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    except subprocess.TimeoutExpired:
                        p.record("stderr", False, f"hang: {what}")
                        p.kill_orphans(marker)
                        continue
                    left = p.kill_orphans(marker)
                    code = r.returncode if r.returncode >= 0 else 128 - r.returncode
                    p.record("stderr", code == want and not left,
                             f"status {code} (want {want}){' orphans ' + str(left) if left else ''}: {what}")
                    for f in p.out.glob(f"{marker}.db*"):
                        f.unlink()


def early_class(p: Probe, rounds: int) -> None:
    """One signal at a random moment of record's start; the target sleeps a little then exits 7."""
    sigs = [getattr(signal, f"SIG{name}") for name in os.environ.get(
        "PROBE_SIGNALS", "USR1,USR2,TERM,HUP,ALRM,INT,QUIT,WINCH,CONT,CHLD").split(",")]
    for _ in range(rounds):
        for sig in sigs:
            marker = f"probe-{uuid.uuid4().hex}"
            db = p.out / f"{marker}.db"
            delay = random.uniform(0, 0.12)
            argv = [*p.hs, "record", "-o", str(db), "--", "sh", "-c", "ulimit -c 0; sleep 0.4; exit 7", marker]
            err = p.out / f"{marker}.err"
            with open(err, "wb") as errf:
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errf, start_new_session=True)
            time.sleep(delay)  # a probe, not a test: the moment is meant to be random
            started = bool(set(p.orphans(marker)) - {proc.pid})  # the target exists
            held = _held(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            phase = ("target started" if started else "record's signals held (heapscope.sigmask)" if held
                     else "record's signals not held yet (the interpreter's start, or heapscope.cli's import)")
            what = f"{sig.name} at {delay * 1000:.0f} ms ({phase})"
            try:
                code = proc.wait(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.record("early", False, f"hang: {what}")
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                p.kill_orphans(marker)
                continue
            left = p.kill_orphans(marker)
            code = code if code >= 0 else 128 - code
            if sig in (signal.SIGUSR1, signal.SIGWINCH, signal.SIGCONT, signal.SIGCHLD):
                want = {7}  # a dump, or nothing the target dies of
            elif sig == signal.SIGINT:
                want = {128 + sig, 130}  # passed on, or "interrupted before the target started"
            else:
                want = {128 + sig}  # passed on (the target's sh dies of it), or record's own death before
            text = err.read_text(errors="replace")
            said = (" (the interpreter: Fatal Python error)" if "Fatal Python error" in text
                    else " with a traceback" if "Traceback" in text else "")
            ok = code in want and not left and not said
            p.record("early", ok,
                     f"status {code}{said} (want {sorted(want)}){' orphans ' + str(left) if left else ''}: {what}")
            if not ok and said:
                print("    " + "\n    ".join(text.splitlines()[:14]), flush=True)
            for f in p.out.glob(f"{marker}.db*"):
                f.unlink()


class Counter:
    """record_groupsig under record in a session of its own: its commands and counts."""

    def __init__(self, p: Probe, prog: Path, wrap: list[str], marker: str, under: bool) -> None:
        self.commands = p.out / f"{marker}.in"
        self.outfifo = p.out / f"{marker}.out"
        os.mkfifo(self.commands)
        os.mkfifo(self.outfifo)
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.db = p.out / f"{marker}.db"
        hs = [*p.hs, "record", "-q", "-o", str(self.db), "--"] if under else []
        argv = [*wrap, *hs, str(prog), str(self.commands), str(self.outfifo)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(OSError), open(self.outfifo) as f:
            for line in f:
                with self.cond:
                    self.lines.append(line.strip())
                    self.cond.notify_all()

    def wait_for(self, prefix: str, contains: str = "") -> str | None:
        deadline = time.monotonic() + 20
        with self.cond:
            while True:
                for line in self.lines:
                    if line.startswith(prefix) and contains in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def send(self, text: str) -> None:
        fd = os.open(self.commands, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, text.encode() + b"\n")
        finally:
            os.close(fd)

    def finish(self) -> tuple[dict[str, int] | None, int | None]:
        self.send("x 0")
        line = self.wait_for("final ")
        try:
            code = self.proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            code = None
        if line is None:
            return None, code
        return {k: int(v) for k, v in (f.split("=") for f in line.split()[1:])}, code


def group_class(p: Probe, rounds: int) -> None:
    prog = p.out / "record_groupsig"
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([cc, "-O1", "-o", str(prog), str(PROGRAMS / "record_groupsig.c")], check=True, timeout=120)
    routes = ["killpg-TERM", "killpg-HUP", "killpg-INT", "killpg-USR2", "killpg-CONT", "kill0", "record-TERM",
              "timeout-HUP", "nohup-killpg-HUP", "killpg-TERM-x3"]
    for _ in range(rounds):
        for route in routes:
            alone = group_run(p, prog, route, under=False)
            under = group_run(p, prog, route, under=True)
            p.record("group", alone is not None and under == alone, f"{route}: under record {under}, alone {alone}")


def group_run(p: Probe, prog: Path, route: str, under: bool) -> dict[str, int] | None:
    """The target's final counts after `route` (alone or under record), then a SIGUSR2 to the
    target's parent alone (record, passing it on; or timeout/nohup's child, the target itself):
    None for a run that hung, lost its status or left a process behind."""
    marker = f"probe-{uuid.uuid4().hex}"
    wrap = {"timeout-HUP": ["timeout", "-s", "HUP", "1"], "nohup-killpg-HUP": ["nohup"]}.get(route, [])
    c = Counter(p, prog, wrap, marker, under)
    try:
        ready = c.wait_for("ready ")
        if ready is None:
            print(f"  {route} ({'under' if under else 'alone'}): no ready line", flush=True)
            return None
        pgid = os.getpgid(c.proc.pid)
        if route.startswith(("killpg-", "nohup-killpg-")):
            name = "TERM" if route.endswith("-x3") else route.split("-")[-1]
            for n in range(1, (3 if route.endswith("-x3") else 1) + 1):
                os.killpg(pgid, getattr(signal, f"SIG{name}"))
                c.wait_for("got ", f"{name}={n}")
        elif route == "kill0":
            c.send("k")
            c.wait_for("got ", "TERM=1")
        elif route == "record-TERM":  # to the target's parent alone: record, or the target itself
            os.kill(c.proc.pid, signal.SIGTERM)
            c.wait_for("got ", "TERM=1")
        else:  # timeout sends HUP to its child at 1 s, then to its group, then SIGCONT to both
            c.wait_for("got ", "HUP=1")
        # A SIGUSR2 to the target's parent alone last (record passes it on after the rest: once it
        # has arrived, so has any second copy of the above)
        parent = c.proc.pid if not wrap else _child_of(c.proc.pid)
        if parent is not None and under:
            os.kill(parent, signal.SIGUSR2)
            c.wait_for("got ", f"USR2={2 if route == 'killpg-USR2' else 1}")
        counts, code = c.finish()
        left = p.kill_orphans(marker)
        if code is None or left:
            print(f"  {route} ({'under' if under else 'alone'}): status {code}, left {left}", flush=True)
            return None
        if counts is not None and not under:
            counts["USR2"] += 1  # what record's pass would have added
        return counts
    finally:
        p.kill_orphans(marker)
        for f in p.out.glob(f"{marker}*"):
            f.unlink()


def _held(pid: int) -> bool:
    """SIGUSR1 blocked in `pid` (SigBlk): record's start has run heapscope.sigmask.hold()."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigBlk:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGUSR1 - 1)))
    return False


def _child_of(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0]) if children else None
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heapscope", default=f"{sys.executable} -m heapscope")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="stderr,early,group")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # record or a target dying of SIGQUIT: no core files
    with tempfile.TemporaryDirectory(prefix="signal-probe-") as tmp:
        p = Probe(args.heapscope.split(), args.out or Path(tmp))
        p.out.mkdir(parents=True, exist_ok=True)
        classes = {"stderr": stderr_class, "early": early_class, "group": group_class}
        for name in args.only.split(","):
            t0 = time.monotonic()
            classes[name](p, args.rounds)
            print(f"{name}: {p.runs.get(name, 0)} runs, "
                  f"{sum(f.startswith(name + ':') for f in p.findings)} findings, {time.monotonic() - t0:.0f} s",
                  flush=True)
    print(f"total: {sum(p.runs.values())} runs, {len(p.findings)} findings")
    return min(len(p.findings), 100)


if __name__ == "__main__":
    sys.exit(main())
