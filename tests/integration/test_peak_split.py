"""benchmarks/peak_split.py, the like-for-like peak next to memray's, on a real recording (this interpreter).

benchmarks/run.py checks heapscope's peak against memray's on the bytes the script's own code
holds at the peak (docs/python-frames.md, section 7): the blocks whose Python stack has a frame of
the script and no `_find_and_load` frame. The target (benchmarks/pyimports.py) imports asyncio,
decimal, logging and typing, then holds 32 bytes objects of 65,536 B: at interval 1 the script's
class is those objects (their sys.getsizeof sum, which the program prints) plus the list holding
them, the imports are under the script but in the import system, and the rest is start-up.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from hs_integration import HEAPSCOPE, run_process

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
PROGRAM = BENCH / "pyimports.py"
ARGS = ["32", "65536"]


def _peak_split() -> ModuleType:
    spec = importlib.util.spec_from_file_location("heapscope_bench_peak_split", BENCH / "peak_split.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_class_is_what_the_script_holds(tmp_path: Path) -> None:
    truth = int(subprocess.run([sys.executable, str(PROGRAM), *ARGS], capture_output=True, text=True,
                               timeout=60, check=True).stdout)
    assert truth == 32 * (65536 + sys.getsizeof(b""))
    db = tmp_path / "imports.db"
    run = run_process([*HEAPSCOPE, "record", "-o", str(db), "-i", "1", "--seed", "3", "--",
                       sys.executable, str(PROGRAM), *ARGS], timeout=120)
    assert run.returncode == 0, run.describe()
    ps = _peak_split()
    split = ps.heapscope_split(db, ps.ScriptFiles(str(PROGRAM)))
    # Besides the objects: the list, the function `main`, the growth of the module's globals and the
    # generator of the print line (the peak), about 1.4 KiB.
    assert truth <= split.bytes["script"] < truth + 4096, split.bytes
    assert 32 <= split.blocks["script"] < 48, split.blocks
    # asyncio alone is more than a megabyte of code objects and module dicts; start-up a few hundred KiB.
    assert split.bytes["imports"] > 1 << 20, split.bytes
    assert split.bytes["startup"] > 100 << 10, split.bytes
    # The classes partition the peak: their sum is the profile's peak_heap_bytes.
    con = sqlite3.connect(db)
    try:
        (peak,) = con.execute("SELECT SUM(value) FROM stats WHERE name = 'peak_heap_bytes'").fetchone()
    finally:
        con.close()
    assert sum(split.bytes.values()) == peak, (peak, split.bytes)
