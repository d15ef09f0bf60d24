"""Run a Python console script (heapscope's) in this interpreter and, as it exits,
write the CPU time and peak RSS of this process alone, not of its children.

Usage: python self_cpu.py OUT_FILE SCRIPT [ARGS...]
       python self_cpu.py OUT_FILE -m MODULE [ARGS...]

benchmarks/run.py starts `heapscope record` through this to read the producer's
own CPU (the target and llvm-symbolizer are children, so they are not in it):
"user_s system_s maxrss_kib" in OUT_FILE. The script runs as `__main__` with its
own argv, as its shebang line would run it; the extra cost is one small import.
"""

import atexit
import os
import resource
import runpy
import shlex
import sys
from pathlib import Path


def interpreter_of(command: str) -> tuple[list[str], list[str]] | None:
    """How the heapscope command runs Python: (the interpreter, what it is given before heapscope's
    arguments). A console script's shebang and the script; the C launcher (src/heapscope/cli/
    launcher.c) with the python3 beside it and `-m heapscope`; None for neither."""
    try:
        head = Path(command).read_bytes()[:200]
    except OSError:
        return None
    if head.startswith(b"\x7fELF"):
        beside = Path(command).parent / "python3"
        return ([str(beside)], ["-m", "heapscope"]) if beside.exists() else None
    first = head.split(b"\n", 1)[0].decode(errors="replace")
    if first.startswith("#!") and "python" in first:
        return shlex.split(first[2:]), [command]
    return None


def no_profile_argv(heapscope: list[str], interval: str | None = None) -> list[str]:
    """benchmarks/no_profile.py, up to its `--`, in the interpreter that runs the `heapscope`
    command (a console script, the C launcher, or `python -m heapscope`): the no-profile floor
    of run.py, pyperf_table.py and proctree.py, recorded by the heapscope they measure."""
    found = interpreter_of(heapscope[0]) if len(heapscope) == 1 else None
    python = found[0] if found is not None else heapscope[:1] if len(heapscope) > 1 else [sys.executable]
    return [*python, str(Path(__file__).with_name("no_profile.py")), *(["-i", interval] if interval else []), "--"]


def main() -> None:
    out, script = sys.argv[1], sys.argv[2]

    def write() -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        with open(out, "w") as f:
            f.write(f"{ru.ru_utime:.6f} {ru.ru_stime:.6f} {ru.ru_maxrss}\n")

    atexit.register(write)
    if script == "-m":
        sys.argv = sys.argv[3:]
        sys.path[0] = os.getcwd()
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[2:]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
