"""`heapscope record -p PID` of a running Python program: Python frames, and the allocator
domains wrapped from a pending call (client/pymem.c), under every installed CPython 3.8-3.13.

The target (tests/programs/python/attached.py) is driven one command per line on its stdin
and answers one line each; the tests wait on those lines and on `record -v`'s attach line,
never on sleeps. At interval 1, after the attach, the small bytes objects (pymalloc's own)
and the bytearrays (one malloc each, through pymalloc's fall-through) of the two known
functions are each counted exactly once, with the function's name and line.
"""

from __future__ import annotations

import math
import shutil
import signal
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from test_python import INTERPRETERS, _paths, _version
from test_sessions import Proc, record

TARGET = Path(__file__).parents[1] / "programs" / "python" / "attached.py"


@pytest.fixture
def procs() -> Iterator[Callable[[Sequence[str | Path]], Proc]]:
    started: list[Proc] = []

    def start(argv: Sequence[str | Path]) -> Proc:
        p = Proc(argv)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)")
@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(240)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_attach_wraps_the_allocator_domains(tmp_path: Path, python: str,
                                            procs: Callable[[Sequence[str | Path]], Proc]) -> None:
    _attach_and_check(tmp_path, python, procs, [])


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)")
@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(240)
@pytest.mark.parametrize("python", sorted({INTERPRETERS[0], INTERPRETERS[-1]}))
def test_attach_to_malloc_backed_domains_counts_small_objects_once(
        tmp_path: Path, python: str, procs: Callable[[Sequence[str | Path]], Proc]) -> None:
    """With PYTHONMALLOC=malloc the MEM and OBJ domains are malloc itself: the wrappers must not
    take pymalloc's guard-free path for small requests (client/pymem.c, stock_pymalloc), or the
    malloc hook would count each small bytes object a second time. That path is only taken by an
    allocation the sampler skips (smaller than the interval, short of the countdown), so this
    runs at an interval above the objects' size, where a second count would double the estimate
    (4 SDs are about a quarter of the truth); at interval 1 every request takes the guarded path."""
    _attach_and_check(tmp_path, python, procs, ["env", "PYTHONMALLOC=malloc"], interval=512)


def _attach_and_check(tmp_path: Path, python: str, procs: Callable[[Sequence[str | Path]], Proc], prefix: list[str],
                      interval: int = 1) -> None:
    from hs_integration import Profile

    _, minor = _version(python)
    truth = subprocess.run([python, str(TARGET), "--print-truth"], capture_output=True, text=True, timeout=30,
                           check=True).stdout
    n, small_size, big_size, obj_size = map(int, truth.split())
    t = procs([*prefix, python, str(TARGET)])
    t.out.wait_for(lambda s: s == "ready", "target start")
    db = tmp_path / "attach.db"
    h = procs(record("-o", str(db), "-i", str(interval), "-p", str(t.p.pid)))
    h.err.wait_for(lambda s: "attached to pid" in s, "the attach")
    t.send("wrap")
    assert t.out.wait_for(lambda s: s.startswith("wrapped"), "the wrap") == "wrapped 1"
    t.send("small")
    t.out.wait_for(lambda s: s == "ok small", "small")
    t.send("big")
    t.out.wait_for(lambda s: s == "ok big", "big")
    h.p.send_signal(signal.SIGINT)  # detach
    assert h.wait() == 0, "\n".join(h.err.seen)
    t.send("quit")
    assert t.wait() == 0
    profile = Profile(db)
    lines = TARGET.read_text().splitlines()
    markers = {s.split("# ALLOC ")[1].strip(): i + 1 for i, s in enumerate(lines) if "# ALLOC " in s}
    views = {r["callsite_id"]: (int(r["a_s"]), int(r["a_o"])) for r in profile.query(
        "SELECT callsite_id, SUM(CASE WHEN size > 0 THEN size ELSE 0 END) AS a_s,"
        " SUM(CASE WHEN count > 0 THEN count ELSE 0 END) AS a_o FROM heap_profile_allocation GROUP BY callsite_id")}
    got: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for cs, frames in _paths(profile).items():
        py = [f for f in frames if f[1] == "python"]
        if py and py[0][2] == str(TARGET) and py[0][0] in markers and py[0][3] == markers[py[0][0]]:
            got[py[0][0]][0] += views[cs][0]
            got[py[0][0]][1] += views[cs][1]
    # bytes(SMALL) is one object of 33 + SMALL bytes from pymalloc. bytearray(BIG) is an object
    # from pymalloc and a buffer of BIG + 1 bytes that pymalloc passes on to malloc: counted once,
    # in the domain's wrapper (a second count, by the malloc hook, would make 3 per bytearray).
    if interval == 1:
        assert got["small"] == [n * small_size, n], (dict(got), minor)
        assert got["big"] == [n * (big_size + obj_size), 2 * n], (dict(got), minor)
    else:
        truth_small = n * small_size
        sd = math.sqrt(interval * truth_small)
        assert abs(got["small"][0] - truth_small) <= 4 * sd, (dict(got), truth_small, sd, minor)
    stats = profile.stats()
    assert stats.get("python_allocators") == 1, stats
    assert stats.get("python_walks_invalid") == 0, stats
