"""Figures and lines of `record`'s summary that need a rule of their own: what was resident at
one time in a tree of processes, what the Python frames that could not be placed cost, and
which processes are too small to be shown one by one (a rule `report` shares). Light to
import: the summary of a recording without samples reads no profile back.

The summary's RSS line compares the sampled heaps' peak with the peak resident set. Each
process has its own peak (VmHWM), reached at its own moment, so a sum over processes that
never ran together (a build's hundred compilers, one after the other) is memory that was never
resident at once. busiest_moment() sums only the processes alive together, at the moment
where their peaks summed are the largest:

    time ──────────────────────────────►
    sh      [=========== 3 MiB ===========]
    cc1 #1    [== 300 MiB ==]
    cc1 #2                    [== 500 MiB ==]    busiest: sh + cc1 #2 = 503 MiB (not 803)

Still a sum of peaks (each process's own moment), so an upper bound of what was resident at
that time; the line says so.
"""

from __future__ import annotations

from heapscope.records import Record
from heapscope.units import format_bytes

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the end of every recording imports this module
if TYPE_CHECKING:
    from collections.abc import Iterable


# A process is minor when it holds and allocates less than this share of the largest (1/100):
# `python3 app.py` through pyenv's shim is 38 bash, env and readlink processes of ~100 KiB
# around a Python process of 100 MiB; the summary and `report` name them in one line.
MINOR_SHARE = 100
NAMES_SHOWN = 3  # executables named in that line, most processes first


def is_minor(peak: int, allocated: int, largest_peak: int, largest_allocated: int) -> bool:
    """Whether a process is too small next to the largest ones to be shown in full."""
    return peak * MINOR_SHARE < largest_peak and allocated * MINOR_SHARE < max(largest_allocated, 1)


def count_names(names: list[str]) -> str:
    """`bash ×30, env ×6, readlink ×2`: the executables of some processes, most common first."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{name} ×{n}" if n > 1 else name for name, n in ranked[:NAMES_SHOWN]]
    if len(ranked) > NAMES_SHOWN:
        shown.append(f"{len(ranked) - NAMES_SHOWN} other{'s' if len(ranked) - NAMES_SHOWN > 1 else ''}")
    return ", ".join(shown)


class Resident(Record, frozen=True):
    """Figures of the processes alive together at the busiest moment, each one's peak summed."""

    seen: int  # peak sampled unreleased bytes
    rss: int  # peak resident set (VmHWM)
    own_rss: int  # heapscope's own part of rss
    processes: int  # how many processes ran together then


def busiest_moment(processes: Iterable[tuple[int, int | None, int, int, int]]) -> Resident:
    """From (start_ns, end_ns or None while running, seen, rss, own_rss) per process: the sums over
    the processes alive together at the moment where their peak RSS summed is the largest (the
    module's doc). A process that ends when another starts did not run with it."""
    events: list[tuple[int, int, int, int, int]] = []  # (time, 0 end / 1 start, seen, rss, own)
    for start, end, seen, rss, own in processes:
        events.append((start, 1, seen, rss, own))
        if end is not None:
            events.append((max(end, start), 0, seen, rss, own))
    events.sort(key=lambda e: (e[0], e[1]))
    best = Resident(0, 0, 0, 0)
    seen_now = rss_now = own_now = alive = 0
    for _, kind, seen, rss, own in events:
        sign = 1 if kind else -1
        seen_now += sign * seen
        rss_now += sign * rss
        own_now += sign * own
        alive += sign
        if kind and (rss_now, seen_now) > (best.rss, best.seen):
            best = Resident(seen_now, rss_now, own_now, alive)
    return best


def rss_line(seen: int, rss: int, own_rss: int, processes: int, where: str = "") -> str:
    """"seen N of RSS M ...": the sampled heaps' peak against the peak resident set; `processes`:
    how many the figures sum (busiest_moment), `where`: ` in NAME (pid N)` when they are one
    process's among others. '' without an RSS."""
    if not rss:
        return ""
    own = f"heapscope's own {format_bytes(own_rss)} of it; " if own_rss else ""
    if processes > 1 and not where:
        return (f"seen {format_bytes(seen)} of RSS {format_bytes(rss)} in the processes that ran at one time"
                f" ({own}each one's peak, summed: at most that much was resident at once)")
    return f"seen {format_bytes(seen)} of RSS {format_bytes(rss)}{where} ({own}peak of the sampled heaps vs." \
           " peak resident set)"


def direct_map_line(calls: int, size: int) -> str:
    """What `calls` mmap, munmap, mremap or brk made through syscall(2) mean (the client counts
    them, wire.h direct_map_calls): memory the mmap and brk heaps never saw."""
    return (f"not seen: {calls:,} mmap/munmap/mremap/brk call{'s' if calls != 1 else ''} made through syscall(2),"
            f" not the C library's functions ({format_bytes(size)} asked for): that memory is in RSS but in no"
            " heap, nor in \"seen\"; calling mmap, munmap, mremap and brk themselves puts it in the mmap and"
            " brk heaps (docs/mmap-heaps.md)")


def unplaced_line(unplaced: int, cut: int, max_frames: int, whole: int) -> str:
    """The Python status line for `unplaced` Python frames that the splice could not put among
    the native frames that ran them (bookkeeping/frames.py): what it costs the user and what
    to do. `cut`: stacks cut at --max-frames `max_frames`; `whole`: the most it can be."""
    frames = f"{unplaced:,} Python frame{'s' if unplaced != 1 else ''}"
    text = (f"python frames: {frames} put at the top of their stacks, as callers of everything below:"
            " the native unwind stopped before the interpreter code that ran them. report's Python view"
            " (the default) is right; with --native those stacks lack the native frames between them")
    if cut and max_frames < whole:
        text += (f". {cut:,} stacks were longer than --max-frames {max_frames}: record with"
                 f" --max-frames {whole} to keep them whole")
    return text
