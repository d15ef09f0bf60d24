"""Why the client cannot be preloaded into an executable, checked before it starts.

Light on purpose (no pyelftools): `record` asks before it starts the target.
  * a statically linked executable has no PT_INTERP program header: no dynamic
    loader runs, and LD_PRELOAD is the loader's (ld.so(8));
  * a setuid/setgid executable that changes the effective ids runs in the
    loader's secure-execution mode, which ignores LD_PRELOAD of a path with a
    slash (ld.so(8), "Secure-execution mode").
"""

from __future__ import annotations

import os
import stat
import struct

_PT_INTERP = 3
_ET_EXEC, _ET_DYN = 2, 3


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
    except (OSError, ValueError, struct.error):
        return None
    return None


def has_interpreter(path: str) -> bool:
    """True unless `path` is an ELF executable without a PT_INTERP header (scripts and non-ELF files: True).

    Raises OSError when the file cannot be read, ValueError when its headers are damaged."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            return True  # a script: its interpreter decides
        cls, data = ident[4], ident[5]
        if cls not in (1, 2) or data not in (1, 2):
            raise ValueError("bad ELF identification")
        end = "<" if data == 1 else ">"
        if cls == 2:  # ELF64: e_type .. e_phoff, then e_phentsize/e_phnum
            e_type, _machine, _version, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum = struct.unpack(
                end + "HHIQQQIHHH", f.read(42))
        else:
            e_type, _machine, _version, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum = struct.unpack(
                end + "HHIIIIIHHH", f.read(30))
        if e_type not in (_ET_EXEC, _ET_DYN):
            return True
        if phnum == 0 or phentsize < 4 or phnum > 4096:
            raise ValueError("bad program header table")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        if len(table) < phentsize * phnum:
            raise ValueError("truncated program header table")
        for i in range(phnum):
            (p_type,) = struct.unpack_from(end + "I", table, i * phentsize)
            if p_type == _PT_INTERP:
                return True
        return False
