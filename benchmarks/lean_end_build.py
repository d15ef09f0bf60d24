"""Installs this tree with record's end as it was before the re-cut: the "after" of the re-cut
alone, to tell its cost from that of what later work added to the end.

    python benchmarks/lean_end_build.py VENV [--rev REV]
    python benchmarks/fixed_cost.py --heapscope VENV/bin/heapscope --compare OLD/bin/heapscope ...

Two things were added to the end of every recording with samples after d925b7e (the commit
before the re-cut) by other work, and a comparison with d925b7e pays for them:

- the final dump writes each heap's memory over time, its kept samples, and its lifetimes and
  sizes per callsite (`heapscope_memory_series`, `heapscope_memory_sample`,
  `heapscope_callsite_lifetime`, `heapscope_callsite_size`);
- the summary names a native process's largest stacks from its 64 largest callsites, wrappers
  left out and lines told apart (view/peaks.py), where d925b7e printed the innermost frames of
  its 3 largest callsites.

The copy differs from REV (default HEAD) in those two places only: the final dump writes none of
those tables, and a native process's summary lines are d925b7e's. Its profiles lack those
tables: it is for timing only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stampless_build import edit, install_edited

END_TABLES = ("                w.add_memory(p.info.upid, name, *heap.memory_values(t))\n"
              "                w.add_lifetime_values(p.info.upid, name, *heap.lifetime_values(t))\n")

# d925b7e's lines of a native process: its `top` largest callsites, the innermost `frames` frames
# of each. A Python process keeps today's (d925b7e grouped its 64 largest callsites too).
OLD_NATIVE_LINES = '''

_grouped_peak_stacks = peak_stacks


def peak_stacks(profile, processes, top, frames):  # type: ignore[no-redef]
    if any(python for _upid, python, _exe in processes):
        return _grouped_peak_stacks(profile, processes, top, frames)
    peaks = peak_tops(profile, [upid for upid, _python, _exe in processes], top)
    paths = stack_paths(profile, [cs for _total, rows in peaks.values() for cs, _size in rows], frames + 1)
    out = {}
    for upid, _python, _exe in processes:
        if upid in peaks:
            total, rows = peaks[upid]
            out[upid] = total, [(_innermost(paths.get(cs, []), frames), size) for cs, size in rows]
    return out


def _innermost(path, frames):
    names = [f.info.display_name if f.info is not None else "?" for f in path[:frames + 1]]
    return ("\\u2026 > " if len(names) > frames else "") + " > ".join(reversed(names[:frames]))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("venv", type=Path, help="the venv to create (or reuse) and install into")
    ap.add_argument("--rev", default="HEAD", help="the commit to copy (default HEAD)")
    args = ap.parse_args()

    def as_before(package: Path) -> None:
        edit(package / "producer" / "producer.py", END_TABLES, "")
        peaks = package / "view" / "peaks.py"
        peaks.write_text(peaks.read_text() + OLD_NATIVE_LINES)

    install_edited(args.venv, args.rev, as_before)
    print(f"{args.venv}/bin/heapscope: {args.rev} with record's end as before the re-cut")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
