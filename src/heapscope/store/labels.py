"""How a process is named, the one rule of report's process table and headers, record's
summary, leaks, diff, the flamegraph's process picker and the exports (select.process_label).

The name is the process table's: argv[0]'s basename when argv[0] was a link to the
executable (redis-server, not redis-check-rdb), else the executable's; the producer decides
it while the process is alive (producer/procfs.py process_name). A compiler's or an
assembler's or a linker's row names the file it worked on, since `make` runs a hundred cc1
that differ by nothing else:

    cc1 src/parse.c        as -o parse.o        ld -o app

The command line is stored as a shell would read it back (shlex.join: `--save ''`); a
profile written before that has its arguments joined with blanks, read back the same way.
"""

from __future__ import annotations

import functools
import os
import re
import shlex

from heapscope.model import ProcessInfo

#: Executables whose rows name the file they compiled, assembled or linked (with a target
#: prefix and a version suffix: x86_64-linux-gnu-gcc-12, clang-16).
TOOLS = re.compile(r"(?:[\w.]+-)*(cc1|cc1plus|cc1obj|lto1|f951|gcc|g\+\+|cc|c\+\+|clang|clang\+\+|as|ld(?:\.\w+)?"
                   r"|collect2|lld|gold)(?:-[\d.]+)?")
#: Sources by suffix: C, C++, assembler (.s compiled output, .S preprocessed), Objective-C, Fortran.
SOURCES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".s", ".S", ".i", ".ii", ".m", ".mm", ".f", ".f90")
#: Options whose value names a file after the source, not the source.
DERIVED = frozenset({"-dumpbase", "-dumpbase-ext", "-dumpdir", "-auxbase", "-auxbase-strip", "-MF", "-MT", "-MQ"})
FILE_WIDTH = 48  # the file named beside a tool's name, at most (elided in the middle)


def process_name(info: ProcessInfo) -> str:
    """The process's name: the stored one, else its executable's basename, else '?'."""
    return info.name or os.path.basename(info.exe or "") or "?"


def process_label(info: ProcessInfo, exe: bool = False) -> str:
    """The process's name, with the file a compiler, assembler or linker worked on beside it
    (`cc1 parse.c`); with `exe`, the executable's path in place of the name, or after it when
    the name is another (`redis-server (/usr/bin/redis-check-rdb)`)."""
    name = process_name(info)
    label = name
    if exe and info.exe:
        label = info.exe if os.path.basename(info.exe) == name else f"{name} ({info.exe})"
    target = worked_on(info)
    return f"{label} {target}" if target else label


def arguments(cmdline: str) -> list[str]:
    """The stored command line's arguments (shlex.split; a line that does not parse, written
    before it was quoted, split on blanks)."""
    try:
        return shlex.split(cmdline)
    except ValueError:
        return cmdline.split()


def worked_on(info: ProcessInfo) -> str:
    """The file a compiler, assembler or linker process worked on, '' for another process: the
    last source named (SOURCES) that is not a temporary file, else `-o FILE`, else a temporary
    source (cc1's input under /tmp when piped)."""
    return _worked_on(process_name(info), info.exe or "", info.cmdline)


# Kept per command line: a page or report names each process once per heap and view (a build's
# flamegraph split ~340 command lines with shlex, 0.1 s).
@functools.lru_cache(maxsize=4096)
def _worked_on(tool: str, exe: str, cmdline: str) -> str:
    if not TOOLS.fullmatch(tool) and not TOOLS.fullmatch(os.path.basename(exe)):
        return ""
    args = arguments(cmdline)[1:]
    # cc1's `-dumpbase alpha.c -dumpbase-ext .c` name the source again, or only its suffix
    sources = [a for k, a in enumerate(args) if a.endswith(SOURCES) and not a.startswith("-")
               and a not in SOURCES and not (k and args[k - 1] in DERIVED)]
    kept = [a for a in sources if not a.startswith(("/tmp/", "/var/tmp/"))]
    output = ""
    for k, a in enumerate(args):
        if a == "-o" and k + 1 < len(args):
            output = f"-o {args[k + 1]}"
        elif a.startswith("-o") and len(a) > 2:
            output = f"-o {a[2:]}"
    found = kept[-1] if kept else output or (sources[-1] if sources else "")
    if len(found) > FILE_WIDTH:  # cut in the middle: the folder's start and the file's name stay
        head = (FILE_WIDTH - 1) // 2
        found = found[:head] + "…" + found[len(found) - (FILE_WIDTH - 1 - head):]
    return found
