"""Split a Python program's peak heap into what heapscope and memray each count.

    python benchmarks/peak_split.py --script SCRIPT [--heapscope PROFILE.db] [--memray CAPTURE.bin]
                                    [--top N] [--json]

`heapscope record` tracks a Python program from the interpreter's start; `memray run` from the
moment its Tracker starts, just before it runs the script with runpy, in a process that has
already imported memray and what memray imports (rich, textual, jinja2, asyncio, logging,
typing, enum, re, ...: some 470 modules with memray 1.20 on CPython 3.11). A module the script
imports that memray had imported already costs memray's profile nothing, heapscope's its code
objects, dicts and strings. So each tool's peak is split, by the Python frames of each block
held at that tool's peak, into:

  startup  no frame of SCRIPT's code in the stack: the interpreter's start-up (heapscope:
           Py_Initialize, site, the compile of SCRIPT; memray: its runpy frames before SCRIPT's
           first line)
  imports  under a frame of SCRIPT, inside the import system (a `_find_and_load` frame)
  script   the rest: what SCRIPT's own code allocated and still holds

`script` is counted alike by both tools (benchmarks/run.py compares it as the like-for-like
peak); `imports` differs by the modules memray imported before the script. A file is
SCRIPT's when its path is SCRIPT's (after resolving symbolic links; a relative path from the
current directory, as both tools ran).

--memray needs memray's Python package (run this with the benchmark venv's python); the
heapscope side needs only sqlite3. --top N adds the N functions (innermost Python frame:
function, file, line) whose bytes at the peak differ most between the two; --json prints the
split as JSON (benchmarks/run.py reads it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CLASSES = ("startup", "imports", "script")
# A frame is (function name, file); a site is (function, file basename, line).
Site = tuple[str, str, int]


class Split:
    """Bytes and blocks held at one tool's peak, per class and per innermost Python frame."""

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()
        self.blocks: Counter[str] = Counter()
        self.sites: Counter[Site] = Counter()

    def add(self, cls: str, site: Site, size: int, blocks: int) -> None:
        self.bytes[cls] += size
        self.blocks[cls] += blocks
        self.sites[site] += size

    def as_json(self) -> dict[str, Any]:
        return {"peak": sum(self.bytes.values()),
                **{c: {"bytes": self.bytes[c], "blocks": self.blocks[c]} for c in CLASSES}}


class ScriptFiles:
    """Tells whether a code object's file is SCRIPT (resolved once per distinct name)."""

    def __init__(self, script: str) -> None:
        self.script, self.real = script, os.path.realpath(script)
        self.memo: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        hit = self.memo.get(path)
        if hit is None:
            hit = self.memo[path] = path == self.script or os.path.realpath(path) == self.real
        return hit


def classify(in_script: bool, in_import: bool) -> str:
    if not in_script:
        return "startup"
    return "imports" if in_import else "script"


def heapscope_split(db: Path, is_script: ScriptFiles) -> Split:
    """The blocks of heapscope_peak_allocation (the process with the largest peak), classified."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        totals = con.execute("SELECT upid, SUM(size) FROM heapscope_peak_allocation GROUP BY upid "
                             "ORDER BY 2 DESC LIMIT 1").fetchone()
        if totals is None:
            return Split()
        upid = totals[0]
        # Python frames: type 'python', their function and file in the symbol row.
        pyframes: dict[int, tuple[str, str, int]] = {}
        for fid, name, src, line in con.execute(
                "SELECT f.id, f.name, s.source_file, s.line_number FROM stack_profile_frame f "
                "JOIN stack_profile_symbol s ON s.symbol_set_id = f.symbol_set_id WHERE f.type = 'python'"):
            pyframes.setdefault(fid, (name or "?", src or "?", line or 0))
        # Each callsite's flags from its parent's (depth order: parents first).
        info: dict[int, tuple[bool, bool, Site]] = {}
        for cid, parent, fid in con.execute(
                "SELECT id, parent_id, frame_id FROM stack_profile_callsite ORDER BY depth"):
            in_script, in_import, site = info.get(parent, (False, False, ("<no Python frame>", "", 0)))
            py = pyframes.get(fid)
            if py is not None:
                name, src, line = py
                short = name.rsplit(".", 1)[-1]
                in_script = in_script or is_script(src)
                in_import = in_import or short == "_find_and_load"
                site = (short, os.path.basename(src), line)
            info[cid] = (in_script, in_import, site)
        split = Split()
        for cid, count, size in con.execute("SELECT callsite_id, SUM(count), SUM(size) FROM heapscope_peak_allocation "
                                            "WHERE upid = ? GROUP BY callsite_id", (upid,)):
            in_script, in_import, site = info.get(cid, (False, False, ("<no Python frame>", "", 0)))
            split.add(classify(in_script, in_import), site, int(size), int(count))
        return split
    finally:
        con.close()


def memray_split(capture: Path, is_script: ScriptFiles) -> Split:
    """memray's high-watermark records (the blocks held at its `stats` peak), classified."""
    memray: Any = importlib.import_module("memray")
    split = Split()
    for rec in memray.FileReader(str(capture)).get_high_watermark_allocation_records(merge_threads=True):
        frames: list[tuple[str, str, int]] = rec.stack_trace()  # innermost first
        in_script = any(is_script(f) for _, f, _ in frames)
        in_import = any(fn == "_find_and_load" for fn, _, _ in frames)
        site = (frames[0][0], os.path.basename(frames[0][1]), frames[0][2]) if frames else ("<no Python frame>", "", 0)
        split.add(classify(in_script, in_import), site, int(rec.size), int(rec.n_allocations))
    return split


def table(splits: dict[str, Split]) -> Iterable[str]:
    names = list(splits)
    yield "| class | " + " | ".join(f"{n} bytes (blocks)" for n in names) + \
        (" | difference |" if len(names) == 2 else " |")
    yield "|---|" + "---|" * (len(names) + (1 if len(names) == 2 else 0))
    for c in (*CLASSES, "peak"):
        vals = [sum(s.bytes.values()) if c == "peak" else s.bytes[c] for s in splits.values()]
        cells = [f"{v:,}" + ("" if c == "peak" else f" ({s.blocks[c]:,})")
                 for v, s in zip(vals, splits.values(), strict=True)]
        if len(vals) == 2:
            a, b = vals
            cells.append(f"{a - b:+,}" + (f" ({(a / b - 1) * 100:+.1f}%)" if b else ""))
        yield f"| {c} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    ap.add_argument("--script", required=True, help="the Python program both tools ran (its path as given to them)")
    ap.add_argument("--heapscope", type=Path, help="a heapscope profile of the program")
    ap.add_argument("--memray", type=Path, help="a memray capture file of the program")
    ap.add_argument("--top", type=int, default=0, help="list the N functions whose bytes differ most")
    ap.add_argument("--json", action="store_true", help="print the split as JSON")
    a = ap.parse_args(argv)
    is_script = ScriptFiles(a.script)
    splits: dict[str, Split] = {}
    try:
        if a.heapscope:
            splits["heapscope"] = heapscope_split(a.heapscope, is_script)
        if a.memray:
            splits["memray"] = memray_split(a.memray, is_script)
    except (OSError, sqlite3.Error, ImportError) as e:
        print(f"peak_split: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps({n: s.as_json() for n, s in splits.items()}))
        return 0
    for line in table(splits):
        print(line)
    if a.top and len(splits) == 2:
        (na, sa), (nb, sb) = splits.items()
        print(f"\nfunctions whose bytes at the peak differ most ({na} - {nb}):")
        for site in sorted(set(sa.sites) | set(sb.sites), key=lambda s: -abs(sa.sites[s] - sb.sites[s]))[:a.top]:
            print(f"{sa.sites[site] - sb.sites[site]:+12,} {sa.sites[site]:12,} {sb.sites[site]:12,}  "
                  f"{site[0]} ({site[1]}:{site[2]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
