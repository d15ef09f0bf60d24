"""heapscope.sigmask.swap: a handler taken away under a flood of its signal leaves no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A process that swaps SIGUSR1 between a Python handler and SIG_IGN up to SWAPS times (and 90 s)
# while a second process sends it SIGUSR1 unpaced (from once the handler has run 100 times: the
# flood is on); it stops at the first "race condition" traceback printed. `swap` is
# sigmask.swap, or signal.signal to show that the check can fail: 20-62 tracebacks in 3,000
# swaps on a quiet machine, far fewer when the flooder gets little CPU.
_SWAPPER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from heapscope import sigmask
    swap = sigmask.swap if sys.argv[1] == "sigmask" else signal.signal
    handled, raced = 0, []
    def on_usr1(_sig, _frame):
        global handled
        handled += 1
    def unraisable(u, default=sys.unraisablehook):
        default(u)
        raced.append(u)
    sys.unraisablehook = unraisable
    signal.signal(signal.SIGUSR1, on_usr1)
    flood = subprocess.Popen([sys.executable, "-c", "import os, signal, sys\\n"
                              "while True: os.kill(int(sys.argv[1]), signal.SIGUSR1)", str(os.getpid())])
    try:
        while handled < 100:
            signal.pause()
        end = time.monotonic() + 90
        for _ in range(int(sys.argv[2])):
            swap(signal.SIGUSR1, on_usr1)
            swap(signal.SIGUSR1, signal.SIG_IGN)
            if raced or time.monotonic() > end:
                break
    finally:
        flood.kill()
        flood.wait()
    print(handled)
""")


def _swapping(how: str, swaps: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _SWAPPER, how, str(swaps)],
                          capture_output=True, text=True, timeout=240)


def test_a_handler_swapped_for_sig_ign_under_a_flood_leaves_no_traceback() -> None:
    # WHEN SIGUSR1's handler is swapped for SIG_IGN and back 2,000 times under a flood of it
    done = _swapping("sigmask", 2000)
    # THEN the flood reached the handler, and no signal came between a check and a swap
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 100
    assert "race condition" not in done.stderr, done.stderr


def test_signal_signal_alone_leaves_the_traceback_this_guards_against() -> None:
    # WHEN the same swaps are made with signal.signal alone, until the first traceback (or 90 s: a
    # count of swaps could run out while the flooder, starved of CPU on a busy host, sent ~100)
    done = _swapping("signal", 10**9)
    # THEN a signal noted between signal()'s check and its swap to SIG_IGN was printed as one
    assert "ignored due to race condition" in done.stderr
