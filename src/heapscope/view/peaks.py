"""The largest stacks at a process's peak, one line each, as `record`'s summary shows them.

A native process gets the innermost frames of its largest callsites, as
they are:

    … > parse_expr > build_node > xmalloc

A Python process (its client walked Python frames: the `python_frames` stat
is 1) gets the Python part of each stack, its innermost Python frames with
file:line and a run of one frame (recursion) collapsed, the native frames
below them left out (the first answer names the user's code):

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

import functools
import re
from collections.abc import Sequence

from heapscope.store.paths import stack_paths
from heapscope.store.peak_tops import peak_tops
from heapscope.store.reader import PathFrame, Profile, mapping_basename
from heapscope.view.names import cut_middle, elide
from heapscope.view.wrappers import WrapperPattern, base_name, wrapper_pattern

PEAK_CALLSITES = 64  # the largest callsites at the peak a Python process's lines are grouped from
WALK_LIMIT = 4096  # frames read per callsite at most (the client's stacks are far shallower)


def peak_stacks(profile: Profile, processes: Sequence[tuple[int, bool, str]], top: int,
                frames: int) -> dict[int, tuple[int, list[tuple[str, int]]]]:
    """For each of `processes` (upid; whether its client walked Python frames,
    Profile.python_upids; its executable) that has peak rows: the bytes unreleased at its peak
    and its `top` largest lines, (text, bytes) largest first, each `frames` frames (or runs of a
    Python frame) deep and then the frames that tell it apart (distinct_lines). Allocator
    wrappers are left out (view/wrappers.py).

    All processes at once: the peak rows are read in one pass and the stacks in one walk (a
    build's 113 processes, a query each, took 1-4 s of `record`'s end after make's exit)."""
    peaks = peak_tops(profile, [upid for upid, _python, _exe in processes], max(PEAK_CALLSITES, top))
    paths = stack_paths(profile, [cs for _total, rows in peaks.values() for cs, _size in rows], WALK_LIMIT)
    pattern = wrapper_pattern()
    out: dict[int, tuple[int, list[tuple[str, int]]]] = {}
    for upid, python, exe in processes:
        if upid not in peaks:
            continue
        total, rows = peaks[upid]
        stacks = [(_unwrapped(paths.get(cs, []), pattern), size) for cs, size in rows]
        if python and any(f.python for path, _ in stacks for f in path):
            out[upid] = total, _python_lines(stacks, top, frames)
        else:
            out[upid] = total, distinct_lines([([_native_label(f) for f in path], _own_code(path, exe), size)
                                               for path, size in stacks], top, frames)
    return out


def _unwrapped(path: list[PathFrame], pattern: WrapperPattern | None) -> list[PathFrame]:
    """`path` without its allocator wrappers (all of it when it is nothing else)."""
    kept = [f for f in path if f.info is None or not f.info.name or f.python
            or pattern is None or not pattern.fullmatch(base_name(f.info.name))]
    return kept or path


SUMMARY_NAME = 40  # a native frame's name in a summary line at most (C++ templates elided: view/names.py)


def _native_label(f: PathFrame) -> str:
    return _elided(f.info.display_name) if f.info is not None else "?"


@functools.lru_cache(maxsize=1 << 16)
def _elided(name: str) -> str:
    """A name elided for a summary line, once per name: a build's processes share most frames."""
    return elide(name, SUMMARY_NAME)


def _own_code(path: list[PathFrame], exe: str) -> int | None:
    """The position of the innermost frame of the program's own executable, None without one."""
    if not exe:
        return None
    return next((i for i, f in enumerate(path) if f.info is not None and f.info.mapping_name == exe), None)


def distinct_lines(stacks: Sequence[tuple[Sequence[str], int | None, int]], top: int,
                   frames: int) -> list[tuple[str, int]]:
    """The `top` largest of `stacks` (labels innermost first, the position of the frame to show
    whatever its depth or None, bytes) as lines, stacks whose labels are the same summed.

    Each line shows its innermost `frames` labels, the wanted frame (the program's own
    code, deepest first), and, when that still reads like another line, the first frame
    where the two differ, innermost first: git's 87.3 MiB and 5.7 MiB stacks that end in the
    same four frames read `… > cmd_pack_objects > … > a > b > c > d` and
    `… > cmd_index_pack > … > a > b > c > d`, never two identical lines."""
    groups: dict[tuple[str, ...], list[int]] = {}  # labels -> [bytes, rank, wanted]
    for rank, (labels, wanted, size) in enumerate(stacks):
        key = tuple(labels)
        g = groups.get(key)
        if g is None:
            groups[key] = [size, rank, -1 if wanted is None else wanted]
        else:
            g[0] += size
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[1][1]))[:top]
    out = []
    whole = []  # each line unfitted
    for key, (size, _rank, wanted) in ranked:
        shown = set(range(min(frames, len(key))))
        if wanted >= 0:
            shown.add(wanted)
        for other, _g in ranked:
            if other == key:
                continue
            differs = next((i for i in range(max(len(key), len(other)))
                            if i >= len(key) or i >= len(other) or key[i] != other[i]), None)
            if differs is not None and not any(i in shown and i < len(other) and other[i] != key[i]
                                               for i in range(len(key))):
                shown.add(min(differs, len(key) - 1) if differs < len(key) else len(key) - 1)
        out.append((_join(key, sorted(shown)), size))
        whole.append(_join(key, sorted(shown), width=1 << 30))
    return _apart(out, whole)


def _apart(lines: list[tuple[str, int]], whole: list[str]) -> list[tuple[str, int]]:
    """`lines`, those that fitting to the width made read the same as another given `whole`."""
    texts = [text for text, _ in lines]
    return [(whole[i] if texts.count(text) > 1 else text, size) for i, (text, size) in enumerate(lines)]


#: A summary line's stack at most: `record` prints it after `heapscope:` and the bytes, in 120
#: columns (_join says how a wider one is made to fit).
SUMMARY_LINE = 95
_SHRINK = (32, 24, 20)  # the name lengths tried; no shorter: a name cut further reads as none


def _join(labels: Sequence[str], shown: list[int], width: int = SUMMARY_LINE) -> str:
    """Labels at the `shown` positions (innermost first, ascending), outermost first, `…` for each
    gap; names shortened (each alike) while the line is wider than `width`."""
    parts: list[str] = []
    last = -1
    for i in shown:
        if i > last + 1:
            parts.append("…")
        parts.append(labels[i])
        last = i
    if len(labels) > last + 1:
        parts.append("…")
    if not parts:
        return "?"
    # Too wide: names shortened a first time, then the frames next to the innermost go (it is
    # where the memory was asked for; the outermost shown is the program's own code or where
    # the stack differs), then names shortened further.
    first, *more = _SHRINK
    parts = _shrunk(parts, first, width)
    while len(" > ".join(parts)) > width:
        named = [i for i, p in enumerate(parts) if p != "…"]
        if len(named) <= 2:
            break
        k = named[1]
        parts[k] = "…"
        if k + 1 < len(parts) and parts[k + 1] == "…":
            del parts[k + 1]
        if parts[k - 1] == "…":
            del parts[k]
    for limit in more:
        parts = _shrunk(parts, limit, width)
    return " > ".join(reversed(parts))


def _shrunk(parts: list[str], limit: int, width: int) -> list[str]:
    """`parts` with each name shortened to `limit`, when they are wider than `width` together."""
    if len(" > ".join(parts)) <= width:
        return parts
    return [p if p == "…" else _shrink(p, limit) for p in parts]


_ADDRESS = re.compile(r"\+0x[0-9a-f]+$")
_PYTHON_LABEL = re.compile(r"(?P<name>.+?)(?P<rest> \([^()]*\)(?: ×[\d-]+)?)")


def _shrink(label: str, width: int) -> str:
    """A label at most about `width` characters: a native name elided (view/names.py), a Python
    label's function cut in its middle, its (file:line) kept whole."""
    if _ADDRESS.search(label):
        return label  # `lib+0x1a2b`, `[unknown pid 7]+0x7f…`: cut, an address names nothing
    m = _PYTHON_LABEL.fullmatch(label)
    if m is not None and ":" in m["rest"]:
        return cut_middle(m["name"], max(width - len(m["rest"]), 16)) + m["rest"]
    return elide(label, width)


class _Line:
    """One summary line of a Python process: callsites whose shown frames are the same."""

    __slots__ = ("size", "low", "high", "first")

    def __init__(self, runs: int, first: int) -> None:
        self.size = 0
        self.low = [0] * runs  # per shown run, the fewest and most repeats among the callsites
        self.high = [0] * runs
        self.first = first  # rank of its largest callsite: ties keep the peak's order


#: Where a Python file is library code rather than the program's own.
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|^<frozen|^<")


def _python_lines(stacks: list[tuple[list[PathFrame], int]], top: int, frames: int) -> list[tuple[str, int]]:
    """A Python process's lines: runs of one Python frame (recursion), innermost first; the
    program's own innermost frame comes before library internals (`load (pd_job.py:10) > … >
    _read (readers.py:626)`)."""
    lines: dict[tuple[object, ...], _Line] = {}
    for rank, (path, size) in enumerate(stacks):
        labels: list[str] = []  # runs of one Python frame, innermost first, and their repeats
        repeats: list[int] = []
        own: int | None = None  # the innermost run in the program's own files
        for f in path:
            if f.python and f.info is not None:
                label = _python_label(f)
                if labels and labels[-1] == label:
                    repeats[-1] += 1
                else:
                    labels.append(label)
                    repeats.append(1)
                    if own is None and not _LIBRARY.search(f.info.mapping_name):
                        own = len(labels) - 1
        if not labels:  # no Python frame on this stack: its native line, as in a native process
            key: tuple[object, ...] = (_join([_native_label(f) for f in path], list(range(min(frames, len(path))))),)
            shown: list[int] = []
        else:
            picks = list(range(min(frames, len(labels))))
            if own is not None and own >= frames:
                picks = [*range(max(frames - 1, 1)), own]  # the program's own frame takes the outermost place
            key = (tuple(labels[i] for i in picks), tuple(picks), len(labels))
            shown = [repeats[i] for i in picks]
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
            out.append((str(key[0]), line.size))
            continue
        texts, at, depth = key
        assert isinstance(texts, tuple) and isinstance(at, tuple) and isinstance(depth, int)
        shown_labels = [""] * depth
        for k, (i, label) in enumerate(zip(at, texts, strict=True)):
            shown_labels[i] = str(label) + _repeats(line.low[k], line.high[k])
        out.append((_join(shown_labels, list(at)), line.size))
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
