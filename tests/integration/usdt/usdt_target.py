"""usdt_target.py: usdt_target.c's loop in Python: small tuples and strs (pymalloc's, in the
python.pymalloc heap) until SIGUSR1, each kept for LIVE turns. Prints "ready PID"; exits 0."""

import os
import signal
import time

LIVE = 256
stop = False


def on_usr1(signum: int, frame: object) -> None:
    global stop
    stop = True


signal.signal(signal.SIGUSR1, on_usr1)
print("ready", os.getpid(), flush=True)
live: list[object] = [None] * LIVE
i = 0
while not stop:
    live[i % LIVE] = (i, str(i))
    i += 1
    if i % 64 == 0:
        time.sleep(0.0002)  # a steady trickle of samples, not a flood for the producer
