"""The memo of a Python sample's native unwind (client/unwmemo.c, off unless HEAPSCOPE_UNWIND_MEMO=1) against
the plain walk (client/cfa.c),
in real Python programs under the real client and producer, under every installed CPython 3.8-3.13:
with HEAPSCOPE_UNWIND_MEMO_VERIFY=1 every sample is unwound both ways from the same frame, the plain
walk's stack is recorded, and the client prints at exit how many stacks were compared, the same, and
different, and how many walks re-used the thread's last one. No stack may differ, and the memo must
be used (most walks end on the kept frames)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, run_process
from test_python import INTERPRETERS, _version

VERIFY = re.compile(r"heapscope: unwind memo verify: compared (\d+) same (\d+) differ (\d+) hits (\d+) "
                    r"reused (\d+) fell_back (\d+)")

# Stacks that change between samples in every way the memo must notice: the same helper reached
# from different callers at the same depth (json.dumps / json.loads / sorted with a key calling
# back into Python), recursion that grows and shrinks, generators resumed from different frames,
# C code calling back (map, sorted), and threads (a memo each, taken from a fixed pool).
PROGRAM = '''
import json
import sys
import threading


class Node:
    def __init__(self, left, right):
        self.left, self.right = left, right


def make(depth):
    return Node(None, None) if depth == 0 else Node(make(depth - 1), make(depth - 1))


def gen(n):
    for i in range(n):
        yield [i] * (i % 17)


def work(seed):
    out = []
    for round in range(30):
        tree = make(6 + round % 4)
        rows = [{"k": (i * seed) % 97, "s": str(i) * 3} for i in range(200)]
        text = json.dumps(rows)
        back = json.loads(text)
        back.sort(key=lambda r: (r["k"], r["s"]))
        out.append(sum(len(x) for x in gen(50)) + len(list(map(lambda r: dict(r), back[:50]))))
        del tree
    return out


threads = [threading.Thread(target=work, args=(s,)) for s in (3, 5, 7)]
for t in threads:
    t.start()
work(11)
for t in threads:
    t.join()
print("ok")
'''


@pytest.mark.skipif(not INTERPRETERS, reason="no CPython 3.8-3.13 installed")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_memo_walk_equals_the_plain_walk(tmp_path: Path, python: str) -> None:
    _version(python)
    script = tmp_path / "mix.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, HEAPSCOPE_UNWIND_MEMO_VERIFY="1")
    env.pop("HEAPSCOPE_UNWIND_MEMO", None)
    env.pop("HEAPSCOPE_UNWIND_CFA", None)
    run = run_process([*HEAPSCOPE, "record", "-q", "-o", str(tmp_path / "p.db"), "-i", "64", "--seed", "7", "--",
                       python, str(script)], env=env, timeout=240)
    assert run.returncode == 0, run.describe()
    assert run.stdout == b"ok\n", run.describe()
    found = VERIFY.findall(run.stderr.decode(errors="replace"))
    assert len(found) == 1, run.describe()
    compared, same, differ, hits, reused, fell_back = (int(x) for x in found[0])
    assert differ == 0 and same == compared, run.describe()
    # Thousands of samples, most of them ending on kept frames (the interpreter's outer frames)
    assert compared > 2000, found
    assert hits > compared // 2 and reused > 5 * hits, found
    assert fell_back <= compared // 100, found
