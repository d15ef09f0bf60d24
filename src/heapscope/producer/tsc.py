"""Whether clients stamp their records with the CPU's time-stamp counter (wire.h HS_CFG_TSC).

rdtsc costs a client ~9-16 ns a reading against CLOCK_MONOTONIC's ~23-27 (vDSO) on the test VMs,
read at every sample and every sent free (benchmarks/RESULTS.md, "Lifetimes"). The producer
converts the stamps to CLOCK_MONOTONIC ns (producer/ingest_core.h, struct hs_tsc_cal), which
is right only where the counter ticks at one rate on every CPU and in every power state: so
only on x86-64 where the kernel itself keeps time with it (its clocksource is `tsc`, which
the kernel drops when it finds the counter unstable) and the CPU says `constant_tsc` and
`nonstop_tsc`. HEAPSCOPE_CLOCK=monotonic turns it off (the clients then read CLOCK_MONOTONIC).
"""

from __future__ import annotations

import os

CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
_chosen: bool | None = None


def _tsc_usable() -> bool:
    # os.uname(), what platform.machine() reads: importing platform cost every recording ~1 ms
    if os.environ.get("HEAPSCOPE_CLOCK", "") == "monotonic" or os.uname().machine not in ("x86_64", "AMD64"):
        return False
    try:
        with open(CLOCKSOURCE, encoding="ascii") as f:
            if f.read().strip() != "tsc":
                return False
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"constant_tsc", "nonstop_tsc"} <= flags
    except OSError:
        return False
    return False


def tsc_clock() -> bool:
    """Whether this producer's clients stamp with the TSC; decided once, the conversion's anchor
    read then (before any client is answered)."""
    global _chosen
    if _chosen is None:
        _chosen = _tsc_usable()
        if _chosen:
            from heapscope.producer._ingest import tsc_start

            tsc_start()
    return _chosen
