"""Ctrl-C while `heapscope record` reads its command line (cli/start.py): its modules are
being imported, no handler of record's exists yet; it ends as an interruption, 130, one way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# A real SIGINT, to this process, at the moment heapscope.cli.record is looked for: what a Ctrl-C
# in the first ~50 ms of `heapscope record` does (found by benchmarks/signal_probe.py).
INTERRUPTED_RUN = """
import os, signal, sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "heapscope.cli.record":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
from heapscope.cli import start
sys.argv = ["heapscope", "record", "-o", sys.argv[1], "--", "true"]
start.run()
"""


@pytest.mark.timeout(60)
def test_ctrl_c_while_record_reads_its_command_line_is_130_without_a_traceback(tmp_path: Path) -> None:
    out = tmp_path / "i.db"
    r = subprocess.run([sys.executable, "-c", INTERRUPTED_RUN, str(out)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())  # nothing started, nothing written
