"""Finding the file to symbolize a mapping with, and refusing files of another build.

Owns the lookup order. For a mapping recorded as PATH with build id BUILD_ID
(heapprofd's documented order, then the system's usual places):

  for each DIR of the binary path, in order:
    1. DIR + PATH                        DIR/system/lib/base.apk!foo.so
    2. the same without "base.apk!"      DIR/system/lib/foo.so
    3. DIR + basename(PATH)              DIR/base.apk!foo.so
    4. the same without "base.apk!"      DIR/foo.so
    5. DIR/.build-id/ab/cdef....debug    (first two hex digits, then the rest)
  (with an index: instead of 1-5, every ELF file under the DIRs with BUILD_ID)
  6. PATH itself
  7. ROOT/.build-id/ab/cdef....debug for each debug root (Debian's /usr/lib/debug)
  8. with a debuginfod client (DEBUGINFOD_URLS), the server's debuginfo for BUILD_ID
     (debuginfod.py), when none of the above has DWARF; and when no file of the
     build is here at all, the server's executable (for its symbol table)

A candidate whose build id differs from the recorded one is never used. The
first candidate with DWARF wins. A matching candidate without DWARF (a stripped
binary) is kept for its symbol table and its `.gnu_debuglink` is followed:
NAME next to the file, in `.debug/` beside it, and in ROOT/<its directory>,
checked by build id when both files have one, else by CRC32.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from heapscope.records import Record, field
from heapscope.symbolize.elfinfo import ElfInfo, NotElfError, file_crc32, is_elf, read_elf_info

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from typing import Literal

    from heapscope.symbolize.debuginfod import Debuginfod

    LocateStatus = Literal["found", "no_debug_info", "not_found", "build_id_mismatch", "not_a_file"]

DEFAULT_DEBUG_ROOTS = ("/usr/lib/debug",)
_APK_PREFIX = "base.apk!"

class Located(Record):
    """Where a mapping's symbols are, or why there are none."""

    status: LocateStatus
    debug_file: str = ""  # a matching file with DWARF (status "found")
    matched: list[str] = field(default_factory=list)  # files of the right build, with DWARF or not
    symbol_files: list[str] = field(default_factory=list)  # matching files with a symbol table
    mismatches: list[tuple[str, str]] = field(default_factory=list)  # (path, its build id)


class ElfInfoCache:
    """read_elf_info() once per path for one run; None for a missing or non-ELF file."""

    def __init__(self) -> None:
        self._infos: dict[str, ElfInfo | None] = {}
        self.trace: list[str] | None = None  # when a list: every path asked about is appended

    def get(self, path: str) -> ElfInfo | None:
        if self.trace is not None:
            self.trace.append(path)
        if path not in self._infos:
            try:
                self._infos[path] = read_elf_info(path) if os.path.isfile(path) else None
            except (OSError, NotElfError):
                self._infos[path] = None
        return self._infos[path]


class BuildIdIndex:
    """Every ELF file under some directories, by build id (the `index` mode)."""

    def __init__(self, dirs: Iterable[str], infos: ElfInfoCache) -> None:
        self.by_build_id: dict[str, list[str]] = defaultdict(list)
        self.files = 0
        for top in dirs:
            for root, subdirs, names in os.walk(top):
                subdirs.sort()
                for name in sorted(names):
                    path = os.path.join(root, name)
                    if os.path.islink(path) or not is_elf(path):
                        continue
                    info = infos.get(path)
                    if info is not None and info.build_id:
                        self.files += 1
                        self.by_build_id[info.build_id].append(path)

    def get(self, build_id: str) -> list[str]:
        return self.by_build_id.get(build_id, [])


class Locator:
    """Finds, per mapping, the file to symbolize it with. One instance per run."""

    def __init__(
        self,
        binary_path: Sequence[str] = (),
        *,
        index: bool = False,
        debug_roots: Sequence[str] = DEFAULT_DEBUG_ROOTS,
        debuginfod: Debuginfod | None = None,
    ) -> None:
        self.binary_path = [os.path.abspath(d) for d in binary_path]
        self.debuginfod = debuginfod
        self.debug_roots = list(debug_roots)
        self.infos = ElfInfoCache()
        self.index = BuildIdIndex(self.binary_path, self.infos) if index else None

    def locate_traced(self, path: str, build_id: str) -> tuple[Located, list[str]]:
        """locate(), and every file it looked at (existing or not), once each, in order:
        while none of them changes, the answer stays the same (the symbol cache's check)."""
        trace: list[str] = []
        self.infos.trace = trace
        try:
            located = self.locate(path, build_id)
        finally:
            self.infos.trace = None
        return located, list(dict.fromkeys(trace))

    def locate(self, path: str, build_id: str) -> Located:
        build_id = build_id.lower()
        if not path or path.startswith("["):
            return Located("not_a_file")  # [vdso], [anon:...], JIT code
        if not path.startswith("/"):
            # Loaded by a relative path ("./libfoo.so") the recording could not make absolute:
            # from this directory (the build id says whether it is the same file).
            path = os.path.abspath(path)
        result = Located("not_found")
        seen: set[str] = set()
        for candidate in self.candidates(path, build_id):
            real = os.path.realpath(candidate)
            if real in seen:
                if self.infos.trace is not None:
                    self.infos.trace.append(candidate)
                continue
            seen.add(real)
            info = self.infos.get(candidate)
            if info is None:
                continue
            if build_id and info.build_id != build_id:
                result.mismatches.append((candidate, info.build_id))
                continue
            if self._accept(info, result):
                return result
            for debug in self._debuglink_targets(info, path):
                if os.path.realpath(debug.path) not in seen:
                    seen.add(os.path.realpath(debug.path))
                    if not self._debuglink_matches(info, debug, build_id):
                        result.mismatches.append((debug.path, debug.build_id or "(CRC differs)"))
                    elif self._accept(debug, result):
                        return result
        if self.debuginfod is not None and build_id:
            fetched = self.debuginfod.fetch(build_id)
            info = self.infos.get(fetched) if fetched else None
            if info is not None and info.build_id == build_id and self._accept(info, result):
                return result
            if not result.matched:  # no file of this build here at all: its symbol table, at least
                fetched = self.debuginfod.fetch(build_id, "executable")
                info = self.infos.get(fetched) if fetched else None
                if info is not None and info.build_id == build_id and self._accept(info, result):
                    return result
        if result.matched:
            result.status = "no_debug_info"
        elif result.mismatches:
            result.status = "build_id_mismatch"
        return result

    def candidates(self, path: str, build_id: str) -> Iterator[str]:
        """The lookup order of the module docstring (files that may not exist)."""
        build_id_rel = f".build-id/{build_id[:2]}/{build_id[2:]}.debug" if len(build_id) > 2 else ""
        if self.index is not None:
            yield from self.index.get(build_id)
        else:
            base = os.path.basename(path)
            for d in self.binary_path:
                yield d + path
                yield d + path.replace(_APK_PREFIX, "")
                yield os.path.join(d, base)
                yield os.path.join(d, base.replace(_APK_PREFIX, ""))
                if build_id_rel:
                    yield os.path.join(d, build_id_rel)
        yield path
        if build_id_rel:
            for root in self.debug_roots:
                yield os.path.join(root, build_id_rel)

    @staticmethod
    def _accept(info: ElfInfo, result: Located) -> bool:
        """Book a matching file; True when it has DWARF and the search is over."""
        result.matched.append(info.path)
        if info.has_dwarf:
            result.status = "found"
            result.debug_file = info.path
            if info.has_symtab:
                result.symbol_files.insert(0, info.path)
            return True
        if info.has_symtab:
            result.symbol_files.append(info.path)
        return False

    def _debuglink_targets(self, info: ElfInfo, mapping_path: str) -> Iterator[ElfInfo]:
        if not info.debuglink:
            return
        dirs: list[str] = []
        for d in (os.path.dirname(info.path), os.path.dirname(mapping_path)):
            dirs += [d, os.path.join(d, ".debug")]
            dirs += [root + d for root in self.debug_roots]
        for d in dict.fromkeys(dirs):
            target = self.infos.get(os.path.join(d, info.debuglink))
            if target is not None and target.path != info.path:
                yield target

    @staticmethod
    def _debuglink_matches(binary: ElfInfo, debug: ElfInfo, build_id: str) -> bool:
        """Build ids decide when both files have one; otherwise the CRC the link stores."""
        want = build_id or binary.build_id
        if want and debug.build_id:
            return debug.build_id == want
        try:
            return file_crc32(debug.path) == binary.debuglink_crc
        except OSError:
            return False
