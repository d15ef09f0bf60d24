"""Fills in function names of a profile's frames from the ELF symbol tables of their files.

Owns the step "frame without a name -> name" in the profile database. For
each mapping with unnamed frames it reads the mapping's file once (symtab.py),
checks that the file's build id is the one recorded (a file rebuilt since the
recording would give plausible but wrong names, so it is never used), and
looks every frame's rel_pc up as it is: the producer stored
return address - 1 - load base, an address inside the call instruction in
the ELF's own virtual address space.

A frame with no symbol gets `<library>+0x<rel_pc>` (store.reader's
fallback_frame_name), so every frame ends up with a readable name.
`stack_profile_symbol` (file:line, inlines) is not filled here.
"""

from __future__ import annotations

import os
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

from heapscope.store.reader import fallback_frame_name
from heapscope.symbolize.symtab import ElfReadError, ElfSymbols, read_elf_symbols

MappingStatus = Literal["ok", "no_file", "missing_file", "unreadable", "build_id_mismatch", "no_symbols"]


@dataclass(slots=True)
class MappingResult:
    """What symbolization did for the unnamed frames of one mapping."""

    mapping_id: int
    name: str  # the mapping's file path (or pseudo name like [vdso])
    frames: int  # frames of this mapping that had no name
    symbolized: int = 0  # of those, named from a symbol; the rest got `lib+0x...`
    status: MappingStatus = "ok"
    expected_build_id: str = ""  # recorded with the mapping; "" when unknown
    file_build_id: str = ""  # found in the file (for a mismatch)
    symbol_source: str = ""  # .symtab or .dynsym
    detail: str = ""  # why the file could not be read, when it could not

    @property
    def missing_file(self) -> bool:
        return self.status == "missing_file"

    @property
    def build_id_mismatch(self) -> bool:
        return self.status == "build_id_mismatch"

    @property
    def no_symbols(self) -> bool:
        return self.status == "no_symbols"


@dataclass(slots=True)
class SymbolizeResult:
    """The outcome of one fill_function_names() run, per mapping."""

    mappings: list[MappingResult] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return sum(m.frames for m in self.mappings)

    @property
    def symbolized(self) -> int:
        return sum(m.symbolized for m in self.mappings)

    @property
    def fallback(self) -> int:
        """Frames named `lib+0x...` because no symbol was found or usable."""
        return self.frames - self.symbolized

    def with_status(self, status: MappingStatus) -> list[MappingResult]:
        return [m for m in self.mappings if m.status == status]

    def problems(self) -> list[str]:
        """One line per mapping whose file could not be used, for a summary."""
        lines = []
        for m in self.mappings:
            if m.status == "missing_file":
                lines.append(f"{m.name}: file not found ({m.frames:,} frames unnamed)")
            elif m.status == "build_id_mismatch":
                lines.append(f"{m.name}: build id {m.file_build_id or '(none)'} differs from the"
                             f" recorded {m.expected_build_id}; not used ({m.frames:,} frames unnamed)")
            elif m.status == "unreadable":
                lines.append(f"{m.detail} ({m.frames:,} frames unnamed)")
            elif m.status == "no_symbols":
                lines.append(f"{m.name}: no function symbols ({m.frames:,} frames unnamed)")
        return lines


class SymbolCache:
    """Parsed symbol tables by file identity, so each file is read once.

    Keyed by (path, device, inode, size, mtime): the build id is only known
    after reading, and this key changes whenever the file does. The build id
    check against each mapping happens on every use.
    """

    def __init__(self) -> None:
        self._files: dict[tuple[str, int, int, int, int], ElfSymbols | ElfReadError] = {}

    def get(self, path: str) -> ElfSymbols:
        """Raises OSError (cannot open) or ElfReadError (not ELF), both remembered."""
        st = os.stat(path)
        key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        hit = self._files.get(key)
        if hit is None:
            try:
                hit = read_elf_symbols(path)
            except ElfReadError as e:
                hit = e
            self._files[key] = hit
        if isinstance(hit, ElfReadError):
            raise hit
        return hit


def fill_function_names(db: sqlite3.Connection, cache: SymbolCache | None = None) -> SymbolizeResult:
    """Name every frame whose name is '' or NULL, and commit. Frames with a name are left alone."""
    cache = cache or SymbolCache()
    mappings = {
        int(r[0]): (str(r[1] or ""), str(r[2] or "").lower())
        for r in db.execute("SELECT id, name, build_id FROM stack_profile_mapping")
    }
    pending: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for frame_id, mapping_id, rel_pc in db.execute(
        "SELECT id, mapping, rel_pc FROM stack_profile_frame WHERE name IS NULL OR name = ''"
    ):
        pending[int(mapping_id)].append((int(frame_id), int(rel_pc)))

    result = SymbolizeResult()
    updates: list[tuple[str, int]] = []
    for mapping_id in sorted(pending):
        frames = pending[mapping_id]
        name, build_id = mappings.get(mapping_id, ("", ""))
        outcome = MappingResult(mapping_id, name, len(frames), expected_build_id=build_id)
        symbols = _usable_symbols(cache, outcome)
        for frame_id, rel_pc in frames:
            fn = symbols.lookup(rel_pc) if symbols is not None else None
            if fn:
                outcome.symbolized += 1
            else:
                fn = fallback_frame_name(name, rel_pc)
            updates.append((fn, frame_id))
        result.mappings.append(outcome)

    db.executemany("UPDATE stack_profile_frame SET name = ? WHERE id = ?", updates)
    db.commit()
    return result


def _usable_symbols(cache: SymbolCache, outcome: MappingResult) -> ElfSymbols | None:
    """The mapping's symbols when its file exists, is ELF, matches and has some; else None
    with `outcome.status` saying why."""
    path = outcome.name
    if not path.startswith("/"):
        outcome.status = "no_file"  # [vdso], [unknown], anonymous JIT code...
        return None
    try:
        symbols = cache.get(path)
    except FileNotFoundError:
        outcome.status = "missing_file"  # includes "/lib/x.so (deleted)"
        return None
    except (OSError, ElfReadError) as e:
        outcome.status = "unreadable"
        outcome.detail = str(e) if isinstance(e, ElfReadError) else f"{path}: {e.strerror or e}"
        return None
    outcome.file_build_id = symbols.build_id
    if outcome.expected_build_id and symbols.build_id != outcome.expected_build_id:
        outcome.status = "build_id_mismatch"
        return None
    if not len(symbols):
        outcome.status = "no_symbols"
        return None
    outcome.symbol_source = symbols.source
    return symbols
