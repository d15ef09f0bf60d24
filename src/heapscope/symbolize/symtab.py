"""One ELF file's function symbols, sorted for address lookup, and its build id.

Owns turning ELF symbol tables into address ranges; knows nothing of
profiles. heapscope/elf.py reads the headers, notes and sections, and
_symtab.c turns a table's entries into functions (libpython has ~15k, a big
C++ binary several 100k); a name is decoded only when it is looked up.

Lookup model: every function symbol covers [start, end). A sized symbol ends
at start + size. A symbol of size 0 (hand-written assembly, some stripped
objects) covers up to the next symbol or the end of its section: the
nearest-preceding rule, bounded so that it never runs into other code.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from heapscope.elf import EM_ARM, SHT_DYNSYM, SHT_SYMTAB, ElfError, ElfFile, Section
from heapscope.records import Record, field
from heapscope.symbolize._symtab import functions

TYPE_CHECKING = False  # typing.TYPE_CHECKING: a recording's end names frames from here (pathlib: ~4 ms of imports)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# Nested symbols (a local label symbol inside a function, say) are rare; the
# lookup looks back this many symbols for one that still covers the address.
_MAX_LOOKBACK = 8

class _CxaDemangler:
    """The C++ runtime's own demangler (`__cxa_demangle`), loaded by soname at the first mangled name.

    By soname, through the dynamic loader's own search: `ctypes.util.find_library` (the cxxfilt
    package's way, which this replaces with the same answers) runs `/sbin/ldconfig -p` in a child
    process, twice, while the target runs on the other core of a small machine."""

    def __init__(self) -> None:
        self.loaded = False
        self.fn: Any = None
        self.free: Any = None

    def load(self) -> bool:
        """Whether a demangler is there; loads it the first time. `loaded` is set last: a thread
        that comes in while another loads (symbol tables are read on threads too) loads it as
        well, rather than take the half-done state for a missing demangler."""
        if not self.loaded:
            import ctypes

            for soname in ("libstdc++.so.6", "libc++.so.1"):
                try:
                    fn = getattr(ctypes.CDLL(soname), "__cxa_demangle")
                    free = ctypes.CDLL("libc.so.6").free
                except (OSError, AttributeError):
                    continue
                fn.restype = ctypes.c_void_p  # freed below: a c_char_p result would be copied and lost
                fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
                free.restype = None
                free.argtypes = [ctypes.c_void_p]
                self.fn, self.free = fn, free
                break
            self.loaded = True
        return self.fn is not None

    def __call__(self, name: str) -> str:
        """`name` demangled; `name` itself when there is no demangler or it is not a valid mangled name."""
        if not self.load():
            return name
        import ctypes

        try:
            mangled = name.encode()
        except UnicodeEncodeError:  # a name read with surrogate escapes
            return name
        status = ctypes.c_int(0)
        out = self.fn(mangled, None, None, ctypes.byref(status))
        if not out:
            return name
        try:
            if status.value != 0:
                return name
            raw = ctypes.string_at(out)
        finally:
            self.free(out)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return name


_cxa_demangle = _CxaDemangler()


def demangler_available() -> bool:
    """Whether mangled names can be demangled here (the C++ runtime loads)."""
    return _cxa_demangle.load()


def demangle(name: str) -> str:
    """`ns::Klass::method(int)` for `_ZN2ns5Klass6methodEi`; the raw name when it is not mangled, is not a
    valid mangled name, or no C++ runtime is there to demangle it."""
    if not name.startswith("_Z"):
        return name
    return _cxa_demangle(name)


class ElfReadError(Exception):
    """The file cannot be read as an ELF object."""


class ElfSymbols(Record):
    """The function symbols of one ELF file, sorted by start address."""

    path: str
    build_id: str  # hex of .note.gnu.build-id, "" when the file has none
    source: str  # ".symtab", ".dynsym", or "" when the file has no function symbols
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # exclusive
    # Names are decoded when looked up (most never are): their offsets in the string table.
    name_offsets: list[int] = field(default_factory=list)
    strtab: bytes = b""
    _demangled: dict[int, str] = field(default_factory=dict)

    @classmethod
    def named(cls, path: str, build_id: str, source: str, starts: list[int], ends: list[int],
              names: list[str]) -> ElfSymbols:
        """A table from names already decoded (a string table is built for them)."""
        offsets, table, at = [], bytearray(b"\0"), 1
        for name in names:
            offsets.append(at)
            raw = name.encode()
            table += raw + b"\0"
            at += len(raw) + 1
        return cls(path, build_id, source, starts, ends, offsets, bytes(table))

    @property
    def raw_names(self) -> list[str]:
        """Every name, decoded (lookups decode only the one they return)."""
        return [_cstring(self.strtab, off) for off in self.name_offsets]

    def __len__(self) -> int:
        return len(self.starts)

    def lookup_range(self, addr: int) -> tuple[str, int, int] | None:
        """lookup(addr) ("" for None), and the range [start, end) around `addr` where lookup
        gives that same answer: a symbol's own range, or the gap between symbols, cut at the
        next symbol's start. None when the answer came from an enclosing symbol (nested
        symbols: no one range holds)."""
        i = bisect_right(self.starts, addr) - 1
        nxt = self.starts[i + 1] if i + 1 < len(self.starts) else 1 << 64
        if i < 0:
            return "", 0, nxt
        if addr < self.ends[i]:
            name = self.lookup(addr)
            return (name, self.starts[i], min(self.ends[i], nxt)) if name is not None else None
        covered = max(self.ends[max(0, i - _MAX_LOOKBACK + 1):i + 1])  # what lookup() looks back at
        if addr >= covered:
            return "", max(self.starts[i], covered), nxt
        return None

    def lookup(self, addr: int) -> str | None:
        """The demangled name of the function containing `addr`, None when none does."""
        i = bisect_right(self.starts, addr) - 1
        stop = max(-1, i - _MAX_LOOKBACK)
        while i > stop:
            if addr < self.ends[i]:
                name = self._demangled.get(i)
                if name is None:
                    name = self._demangled[i] = demangle(_cstring(self.strtab, self.name_offsets[i]))
                return name
            i -= 1
        return None


class _ReadAhead:
    """read_elf_symbols(path) on a thread of its own, started before its answer is needed."""

    def __init__(self, path: str, identity: tuple[int, ...]) -> None:
        import threading

        self.path = path
        self.identity = identity
        self.result: ElfSymbols | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="heapscope-symtab", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = read_elf_symbols(self.path)
        except BaseException as e:  # handed to the reader, as if it had read itself
            self.error = e


_READ_AHEAD: dict[str, _ReadAhead] = {}


def _identity(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_ahead(path: str) -> None:
    """Start reading `path`'s symbols now, on a thread: `record` asks it for the modules
    without DWARF it will name at the end (a compiler's table takes ~10 ms, more from a cold
    disk), while the target still runs. read_elf_symbols_shared() then takes the answer."""
    ident = _identity(path)
    if ident is not None and path not in _READ_AHEAD:
        _READ_AHEAD[path] = _ReadAhead(path, ident)


def forget_read_ahead(paths: list[str]) -> None:
    """Drop the reads read_ahead() started for `paths` that nobody took."""
    for path in paths:
        _READ_AHEAD.pop(path, None)


def read_elf_symbols_shared(path: str) -> ElfSymbols:
    """read_elf_symbols(path), from the read read_ahead() started when there is one for this
    very file (same identity), else read now."""
    ahead = _READ_AHEAD.pop(path, None)
    if ahead is not None:
        ahead.thread.join()
        if ahead.identity == _identity(path):
            if ahead.error is not None:
                raise ahead.error
            assert ahead.result is not None
            return ahead.result
    return read_elf_symbols(path)


def read_elf_symbols(path: str | Path) -> ElfSymbols:
    """Read `path`'s build id and function symbols (.symtab, else .dynsym).

    Raises OSError when the file cannot be opened, ElfReadError when it is
    not a readable ELF file.
    """
    with open(path, "rb") as f:
        try:
            elf = ElfFile(f)
            build_id = elf.build_id()
            for section_type in (SHT_SYMTAB, SHT_DYNSYM):
                table = next((s for s in elf.sections if s.type == section_type), None)
                if table is None:
                    continue
                starts, ends, offsets, strtab = _function_symbols(elf, table)
                if starts:
                    return ElfSymbols(str(path), build_id, table.name, starts, ends, offsets, strtab)
            return ElfSymbols(str(path), build_id, "")
        except ElfError as e:
            raise ElfReadError(f"{path}: not a readable ELF file ({e})") from e


def _function_symbols(elf: ElfFile, table: Section) -> tuple[list[int], list[int], list[int], bytes]:
    """(starts, ends, name offsets, string table) of the defined function symbols of `table`,
    sorted by start (_symtab.c says which alias of an address is kept and where each ends). A
    name is decoded only when looked up (_cstring): a large program has tens of thousands of
    symbols and a profile names a few hundred (producer CPU)."""
    strtab = elf.linked_data(table)
    section_ends = {s.index: s.addr + s.size for s in elf.sections}
    starts, ends, offsets = functions(elf.data(table), strtab, elf.elfclass == 64, elf.little_endian, table.entsize,
                                      elf.machine == EM_ARM, section_ends)
    return starts, ends, offsets, strtab


def _cstring(strtab: bytes, off: int) -> str:
    end = strtab.find(b"\0", off)
    raw = strtab[off:] if end < 0 else strtab[off:end]
    name = raw.decode("utf-8", "replace")
    # A versioned definition in .symtab (`memcpy@@GLIBC_2.14`): the version is not part of the name.
    return name.split("@", 1)[0] if "@" in name else name
