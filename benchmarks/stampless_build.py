"""Installs this tree with the lifetime stamps and the mapping hooks taken out: the "before"
of their cost, measured against the same tree in the same rounds.

    python benchmarks/stampless_build.py VENV [--rev REV] [--only stamps|hooks]
    python benchmarks/run.py --sections overhead --no-peers --compare VENV/bin/heapscope \\
        --compare-label stampless ...

The copy differs from REV (default HEAD) in three places only: the records' clock is the
coarse one the records had before lifetimes (`client/state.h`, hs_record_ns), a sent free
carries no time (`client/record.c`), and the mapping calls are no longer exported
(`client/preload.map`), so nothing of the program's reaches maphooks.c. Its profiles have no
usable lifetimes and no mmap or brk heap: it is for timing only. `--only` takes out one of the
two (the stamps, or the mapping hooks), to tell their costs apart.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP_CALLS = ("mmap", "mmap64", "mremap", "mprotect", "madvise", "munmap", "brk", "sbrk", "syscall")


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    if text.count(old) != count:
        sys.exit(f"stampless_build: {path.name} no longer has {old!r} {count} time(s); update this script")
    path.write_text(text.replace(old, new))


def install_edited(venv: Path, rev: str, change: Callable[[Path], None]) -> None:
    """Install into `venv` (made if missing) a copy of commit `rev` whose package folder
    (src/heapscope) `change` has edited first."""
    with tempfile.TemporaryDirectory(prefix="hs-edited-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        change(src / "src" / "heapscope")
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("venv", type=Path, help="the venv to create (or reuse) and install into")
    ap.add_argument("--rev", default="HEAD", help="the commit to copy (default HEAD)")
    ap.add_argument("--only", choices=("stamps", "hooks"), help="take out only this one")
    args = ap.parse_args()

    def take_out(package: Path) -> None:
        client = package / "client"
        if args.only != "hooks":
            edit(client / "state.h", "    return __builtin_ia32_rdtsc();\n", "    return hs_coarse_ns();\n")
            edit(client / "state.h", "  return hs_mono_ns();\n}", "  return hs_coarse_ns();\n}")
            free_rec = "{0, (uint64_t)(uintptr_t)addr, "
            edit(client / "record.c", free_rec + "hs_record_ns()}", free_rec + "0}")
        if args.only != "stamps":
            for name in MAP_CALLS:
                edit(client / "preload.map", f"    {name};\n", "")

    install_edited(args.venv, args.rev, take_out)
    both = "the lifetime stamps and the mapping hooks"
    gone = {"stamps": "the lifetime stamps", "hooks": "the mapping hooks"}.get(args.only or "", both)
    print(f"{args.venv}/bin/heapscope: {args.rev} without {gone}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
