"""The otel_memory USDT probes seen by a real consumer: gdb attached to a target that
`heapscope record` profiles (client/probes.h, docs/otel.md).

gdb lists both probes, sets breakpoints on them (which raises their semaphores: the probes
fire only then), and reads their arguments. The allocations it sees must be the ones the
producer booked: the same address, size and sample size in the profile's allocation stream.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, kill_group

import heapscope

HERE = Path(__file__).resolve().parent
INTERVAL = 4096
BIG = 10000  # usdt_target.c's large block: >= INTERVAL, so always sampled, weighed as its size
STOPS = 80  # probe hits gdb collects

LIB = Path(heapscope.__file__).parent / "client" / "libheapscope.so"


def _has_probes() -> bool:
    out = subprocess.run(["readelf", "-n", str(LIB)], capture_output=True, text=True, timeout=30)
    return "Provider: otel_memory" in out.stdout


pytestmark = [
    pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)"),
    pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf is not installed (apt-get install binutils)"),
]

GDB_SCRIPT = f"""\
set pagination off
set confirm off
# Breakpoints stay in while the target is stopped, and with them the semaphores gdb raises
# when it puts a probe's breakpoint in (by default it takes both out at every stop).
set breakpoint always-inserted on
# The label is echoed, not a printf string argument: gdb would copy a string into the target
# by calling its malloc, an inferior call (and gdb 13 cannot make one on a CPU with AMX).
define semaphores
  echo semaphore $arg0\\040
  printf "%d %d\\n", (unsigned short)otel_memory_alloc_semaphore, (unsigned short)otel_memory_free_semaphore
end
info probes stap otel_memory
semaphores before
break -probe-stap otel_memory:alloc
break -probe-stap otel_memory:free
semaphores armed
set $n = 0
while $n < {STOPS}
  continue
  if $_probe_argc == 3
    printf "fired alloc %lu %lu %lu\\n", $_probe_arg0, $_probe_arg1, $_probe_arg2
  else
    printf "fired free %lu\\n", $_probe_arg0
  end
  set $n = $n + 1
end
delete
semaphores after
detach
"""


def test_gdb_sees_the_samples_the_producer_books(tmp_path: Path) -> None:
    if not _has_probes():
        pytest.skip(f"{LIB} was built without the otel_memory probes: <sys/sdt.h> was missing "
                    "(apt-get install systemtap-sdt-dev, then rebuild heapscope)")
    target = tmp_path / "usdt_target"
    subprocess.run(["cc", "-O1", "-g", "-o", str(target), str(HERE / "usdt" / "usdt_target.c")],
                   check=True, timeout=60)
    db = tmp_path / "usdt.db"
    rec = subprocess.Popen([*HEAPSCOPE, "record", "-o", str(db), "-i", str(INTERVAL), "--seed", "7",
                            "--stream-allocations", "--", str(target)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert rec.stdout is not None
        ready = rec.stdout.readline().split()
        assert len(ready) == 2 and ready[0] == b"ready", ready
        pid = int(ready[1])
        script = tmp_path / "probes.gdb"
        script.write_text(GDB_SCRIPT)
        gdb = subprocess.run(["gdb", "-nx", "-batch", "-p", str(pid), "-x", str(script)],
                             capture_output=True, text=True, timeout=120)
        os.kill(pid, signal.SIGUSR1)
        out, err = rec.communicate(timeout=120)
    finally:
        kill_group(rec)
    log = gdb.stdout + gdb.stderr
    assert rec.returncode == 0, err.decode(errors="replace")

    # `info probes` lists both, from our library, with their semaphores.
    listed = [line.split() for line in gdb.stdout.splitlines() if line.startswith("stap otel_memory ")]
    assert sorted(fields[2] for fields in listed) == ["alloc", "free"], log
    assert all(fields[-1].endswith("libheapscope.so") and int(fields[4], 16) for fields in listed), log
    # gdb raises the semaphores while its breakpoints are in, and puts them back.
    assert "semaphore before 0 0" in gdb.stdout, log
    assert "semaphore armed 1 1" in gdb.stdout, log
    assert "semaphore after 0 0" in gdb.stdout, log

    allocs = [tuple(int(v) for v in m.groups())
              for m in re.finditer(r"^fired alloc (\d+) (\d+) (\d+)$", gdb.stdout, re.M)]
    frees = [int(m.group(1)) for m in re.finditer(r"^fired free (\d+)$", gdb.stdout, re.M)]
    assert len(allocs) + len(frees) == STOPS, log
    assert allocs and frees, log
    for ptr, size, weight in allocs:
        assert ptr != 0
        assert size in (64, BIG), log
        if size >= INTERVAL:
            assert weight == size  # sampled for certain: booked as its size
        else:
            assert weight >= size and weight % INTERVAL == 0  # k samples of one interval each
    assert any(size == BIG for _, size, _ in allocs), log
    # Every block is freed LIVE turns later, so the frees of samples gdb saw come while it
    # watches (the first ones may be of samples taken before it attached).
    assert set(frees) & {ptr for ptr, _, _ in allocs}, log

    # What gdb saw is what the producer booked.
    with sqlite3.connect(db) as con:
        stream = set(con.execute("SELECT address, size, sample_size FROM heapscope_allocation_stream "
                                 "WHERE kind = 'malloc'"))
        freed = {row[0] for row in con.execute("SELECT address FROM heapscope_allocation_stream "
                                               "WHERE kind = 'free'")}
    assert set(allocs) <= stream
    assert set(frees) <= freed



PY_SCRIPT = f"""\
set pagination off
set confirm off
set breakpoint always-inserted on
break -probe-stap otel_memory:alloc
break -probe-stap otel_memory:free
set $n = 0
while $n < {STOPS}
  continue
  if $_probe_argc == 3
    printf "fired alloc %lu %lu %lu\\n", $_probe_arg0, $_probe_arg1, $_probe_arg2
  else
    printf "fired free %lu\\n", $_probe_arg0
  end
  bt 2
  set $n = $n + 1
end
delete
detach
"""


def test_gdb_sees_python_heap_samples(tmp_path: Path) -> None:
    """python.pymalloc's samples fire too, from its own slow paths, with the same weights."""
    if not _has_probes():
        pytest.skip(f"{LIB} was built without the otel_memory probes: <sys/sdt.h> was missing "
                    "(apt-get install systemtap-sdt-dev, then rebuild heapscope)")
    rec = subprocess.Popen([*HEAPSCOPE, "record", "-o", str(tmp_path / "py.db"), "-i", str(INTERVAL),
                            "--seed", "7", "--", sys.executable, str(HERE / "usdt" / "usdt_target.py")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert rec.stdout is not None
        ready = rec.stdout.readline().split()
        assert len(ready) == 2 and ready[0] == b"ready", ready
        pid = int(ready[1])
        script = tmp_path / "py.gdb"
        script.write_text(PY_SCRIPT)
        gdb = subprocess.run(["gdb", "-nx", "-batch", "-p", str(pid), "-x", str(script)],
                             capture_output=True, text=True, timeout=120)
        os.kill(pid, signal.SIGUSR1)
        out, err = rec.communicate(timeout=120)
    finally:
        kill_group(rec)
    log = gdb.stdout + gdb.stderr
    assert rec.returncode == 0, err.decode(errors="replace")
    # Each hit: its "fired" line, then frame #1 of `bt 2`, the slow path that booked it.
    hits = re.findall(r"^fired (alloc|free) (\d+)(?: (\d+) (\d+))?\n#0 [^\n]*\n#1 +0x[0-9a-f]+ in (\w+)",
                      gdb.stdout, re.M)
    assert len(hits) == STOPS, log
    py_allocs = [(int(p), int(s), int(w)) for kind, p, s, w, fn in hits
                 if kind == "alloc" and fn == "hs_record_py_alloc_slow"]
    py_frees = [int(p) for kind, p, _, _, fn in hits if kind == "free" and fn == "hs_record_py_free_slow"]
    assert py_allocs and py_frees, log
    for ptr, size, weight in py_allocs:
        assert ptr != 0 and 0 < size <= weight, log
        assert weight == size if size >= INTERVAL else weight % INTERVAL == 0, log
