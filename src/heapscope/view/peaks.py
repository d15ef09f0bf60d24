"""The largest stacks at a process's peak, one line each, as `record`'s summary shows them.

A native process gets the innermost frames of its largest callsites, as
they are:

    … > parse_expr > build_node > xmalloc

A Python process (its client walked Python frames: the `python_frames` stat
is 1) gets the Python part of each stack, its innermost Python frames with
file:line and a run of one frame (recursion) collapsed, the native frames
below them left out (issue 12: the first answer names the user's code):

    … > main (pyobjects.py:47) > make (pyobjects.py:21) ×13-14 > make (pyobjects.py:20)

Callsites whose lines read the same (whatever the depth of a run, or the
frames left out past `…`) are one line, their bytes summed, so each line is
another place in the program. Only the PEAK_CALLSITES largest callsites are
read and grouped (the summary runs after the target's exit, on the user's
time): a line's bytes are those of its callsites among them, a lower bound.
A stack with no Python frame in a Python process (what the interpreter
allocates before running any code) keeps its native line.
"""

from __future__ import annotations

from heapscope.model import CallsiteId
from heapscope.store.reader import PathFrame, Profile, mapping_basename

PEAK_CALLSITES = 64  # the largest callsites at the peak a Python process's lines are grouped from
WALK_LIMIT = 4096  # frames read per callsite at most (the client's stacks are far shallower)
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


def peak_stacks(profile: Profile, upid: int, top: int, frames: int,
                python: bool = False) -> tuple[int, list[tuple[str, int]]] | None:
    """The bytes unreleased at the process's peak and its `top` largest lines, (text, bytes)
    largest first, each at most `frames` frames (or runs of a Python frame) deep; None when the
    profile has no peak rows for it. `python`: the process's client walked Python frames
    (Profile.python_upids); only then are more than `top` callsites read."""
    if not python:
        peak = profile.peak_top(upid, top)
        if peak is None:
            return None
        total, rows = peak
        return total, [(_native_text([PathFrame(info, False) for info in profile.stack_frames(cs, frames + 1)],
                                     frames), size) for cs, size in rows]
    peak = profile.peak_top(upid, max(PEAK_CALLSITES, top))
    if peak is None:
        return None
    total, rows = peak
    paths = profile.stack_paths([cs for cs, _ in rows], WALK_LIMIT)
    if not any(f.python for p in paths.values() for f in p):  # no Python frame reached the peak
        return total, [(_native_text(paths.get(cs, []), frames), size) for cs, size in rows[:top]]
    return total, _python_lines(rows, paths, top, frames)


def _native_text(path: list[PathFrame], frames: int) -> str:
    """`… > f > g > leaf`: the innermost `frames` of a path given innermost first."""
    names = [f.info.display_name if f.info is not None else "?" for f in path[:frames + 1]]
    shown = list(reversed(names[:frames]))
    return ("… > " if len(names) > frames else "") + " > ".join(shown)


class _Line:
    """One summary line of a Python process: callsites whose shown frames are the same."""

    __slots__ = ("size", "low", "high", "first")

    def __init__(self, runs: int, first: int) -> None:
        self.size = 0
        self.low = [0] * runs  # per shown run, the fewest and most repeats among the callsites
        self.high = [0] * runs
        self.first = first  # rank of its largest callsite: ties keep the peak's order


def _python_lines(rows: list[tuple[CallsiteId, int]], paths: dict[CallsiteId, list[PathFrame]],
                  top: int, frames: int) -> list[tuple[str, int]]:
    lines: dict[tuple[str, ...], _Line] = {}
    for rank, (cs, size) in enumerate(rows):
        path = paths.get(cs, [])
        labels: list[str] = []  # runs of one Python frame, innermost first, and their repeats
        repeats: list[int] = []
        for f in path:
            if f.python and f.info is not None:
                label = _python_label(f)
                if labels and labels[-1] == label:
                    repeats[-1] += 1
                else:
                    labels.append(label)
                    repeats.append(1)
        # No Python frame on this stack: its native line, as in a native process.
        key = ("…" if len(labels) > frames else "", *labels[:frames]) if labels else (_native_text(path, frames),)
        shown = repeats[:frames]
        line = lines.get(key)
        if line is None:
            line = lines[key] = _Line(len(shown), rank)
            line.low[:] = shown
            line.high[:] = shown
        line.low = [min(a, b) for a, b in zip(line.low, shown, strict=True)]
        line.high = [max(a, b) for a, b in zip(line.high, shown, strict=True)]
        line.size += size
    ranked = sorted(lines.items(), key=lambda kv: (-kv[1].size, kv[1].first))[:top]
    out = []
    for key, line in ranked:
        if len(key) == 1:
            out.append((key[0], line.size))
            continue
        parts = [label + _repeats(lo, hi) for label, lo, hi in zip(key[1:], line.low, line.high, strict=True)]
        out.append((("… > " if key[0] else "") + " > ".join(reversed(parts)), line.size))
    return out


def _python_label(f: PathFrame) -> str:
    """`make (pyobjects.py:21)`: the function, its file's basename and the line."""
    assert f.info is not None
    where = mapping_basename(f.info.mapping_name)
    return f"{f.info.name or '?'} ({where}:{f.info.rel_pc})" if f.info.rel_pc else f"{f.info.name or '?'} ({where})"


def _repeats(low: int, high: int) -> str:
    if high <= 1:
        return ""
    return f" ×{high}" if low == high else f" ×{low}-{high}"
