"""Why the client cannot be preloaded into an executable, checked before it starts.

Light on purpose (heapscope.elf reads the headers): `record` asks of every target it starts.
  * a statically linked executable has no PT_INTERP program header: no dynamic
    loader runs, and LD_PRELOAD is the loader's (ld.so(8));
  * a setuid/setgid executable that changes the effective ids runs in the
    loader's secure-execution mode, which ignores LD_PRELOAD of a path with a
    slash (ld.so(8), "Secure-execution mode").
"""

from __future__ import annotations

import os
import stat

from heapscope.elf import ET_DYN, ET_EXEC, PT_INTERP, ElfFile


def preload_blocker(executable: str) -> str | None:
    """Why the client cannot be preloaded into `executable`, or None when nothing is known to stop it."""
    try:
        st = os.stat(executable)
    except OSError:
        return None
    if st.st_mode & stat.S_ISUID and st.st_uid != os.getuid():
        return "it is setuid: the dynamic loader ignores LD_PRELOAD in secure-execution mode"
    if st.st_mode & stat.S_ISGID and st.st_gid != os.getgid():
        return "it is setgid: the dynamic loader ignores LD_PRELOAD in secure-execution mode"
    try:
        if not has_interpreter(executable):
            return "it is statically linked: no dynamic loader runs, so LD_PRELOAD cannot load the client"
    except (OSError, ValueError):
        return None
    return None


def has_interpreter(path: str) -> bool:
    """True unless `path` is an ELF executable without a PT_INTERP header (scripts and non-ELF files: True).

    Raises OSError when the file cannot be read, ValueError when its headers are damaged."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            return True  # a script: its interpreter decides
        elf = ElfFile(f)
        if elf.type not in (ET_EXEC, ET_DYN):
            return True
        types = elf.segment_types()
        if not types:
            raise ValueError("no program header table")
        return PT_INTERP in types
