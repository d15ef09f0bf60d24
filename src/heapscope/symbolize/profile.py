"""Symbolizes a profile database in place: functions, files, lines and inlined frames.

Owns the step "frame -> stack_profile_symbol rows + name". For every frame
without a symbol set (stack_profile_frame.symbol_set_id IS NULL), per mapping:
find the file (locate.py, build ids checked), ask llvm-symbolizer for the
inline chain of each rel_pc (llvm.py), and write it with Perfetto's
semantics:

  * the rows of one frame share a symbol_set_id; they are written innermost
    first, so the most-inlined function has id == symbol_set_id;
  * inlined = 1 on a function that was inlined into the next row's, 0 on the
    last (outermost) one, the function whose code the address is in;
  * stack_profile_frame.name = that outermost function, demangled.

Without llvm-symbolizer, or without DWARF for a mapping, frames get their
function name from the symbol table (symtab.py) and no symbol rows; with no
usable file at all they keep their name or get `lib+0x...`. Running it again
later (say with a binary path) upgrades exactly those frames.

With a SymbolCache (cache.py; `record` passes one), a module located before
with the same files is not located again, and its frames at addresses
answered before take that answer: identical symbols, no llvm-symbolizer, no
debug info read. Only the other frames go to the tool, and their answers are
added to the cache.
"""

from __future__ import annotations

import os
from collections import defaultdict

from heapscope.model import fallback_frame_name, unknown_code_pid
from heapscope.records import Record, field
from heapscope.store.writer import ProfileWriter, SymbolWriter
from heapscope.symbolize.llvm import SymbolizerError, find_llvm_symbolizer
from heapscope.symbolize.locate import DEFAULT_DEBUG_ROOTS, Locator

# `record` imports this module at the end of every recording (its imports are `record`'s cost): no dataclasses, no
# typing, and what only a cache miss needs (llvm-symbolizer's runs, the reader) is imported there.
TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Literal

    from heapscope.symbolize.cache import Entry, SymbolCache
    from heapscope.symbolize.debuginfod import Debuginfod
    from heapscope.symbolize.llvm import SourceFrame, WarmSymbolizer
    from heapscope.symbolize.locate import Located
    from heapscope.symbolize.perfmap import PerfMap
    from heapscope.symbolize.symtab import ElfSymbols

    MappingOutcome = Literal[
        "symbolized",  # DWARF: function, file, line, inlines
        "no_symbolizer",  # DWARF found, llvm-symbolizer missing: function names only
        "symbolizer_failed",  # llvm-symbolizer failed on the file: function names only
        "no_debug_info",  # the right file, without DWARF: function names only
        "not_found",
        "build_id_mismatch",
        "not_a_file",  # [vdso], anonymous code
    ]

# The bookkeeping names frames of --skip-symbol-prefix mappings so; they are not code locations.
_FILTERED = "FILTERED"


class MappingReport(Record):
    mapping_id: int
    name: str
    build_id: str
    frames: int  # frames of the mapping this run looked at
    outcome: MappingOutcome = 'not_found'
    with_lines: int = 0  # frames given symbol rows
    named: int = 0  # frames given a function name (with or without rows)
    file: str = ""  # the file used
    detail: str = ""


class SymbolizeReport(Record):
    symbolizer: str | None  # the llvm-symbolizer used, None when none was
    mappings: list[MappingReport] = field(default_factory=list)
    index_files: int | None = None  # ELF files indexed, in index mode
    debuginfod: list[str] = field(default_factory=list)  # the servers asked (DEBUGINFOD_URLS)
    debuginfod_errors: list[str] = field(default_factory=list)  # one line per failure
    debuginfod_missing: dict[str, str] = field(default_factory=dict)  # build id -> why no server had it
    cache_notes: list[str] = field(default_factory=list)  # problems of the symbol cache, one line each
    packages: dict[str, str] = field(default_factory=dict)  # module path -> its Debian package ("" none), known
    # cache_only: per known module with DWARF, its debug file and the addresses of its frames that
    # the cache did not answer, which the end will ask llvm-symbolizer for: `record` asks them ahead
    unanswered: list[tuple[str, list[int]]] = field(init=False, default_factory=list)
    # cache_only: the symbol table of each known module without DWARF that has frames the cache
    # did not answer, which the end will name from it: `record` has it read ahead
    unnamed: list[str] = field(init=False, default_factory=list)

    @property
    def frames(self) -> int:
        return sum(m.frames for m in self.mappings)

    @property
    def with_lines(self) -> int:
        return sum(m.with_lines for m in self.mappings)

    @property
    def named(self) -> int:
        return sum(m.named for m in self.mappings)

    def problems(self) -> list[MappingReport]:
        """Mappings left without full symbols, for the user to act on."""
        return [m for m in self.mappings if m.outcome != "symbolized" or m.with_lines < m.frames]


# Long on purpose: one pass, frames grouped by module, cache, then tools, then writes, each stage feeding the
# next and the one report; its options are the callers' (record's end, live passes, `symbolize`).
def symbolize_profile(
    store: SymbolWriter | ProfileWriter,
    binary_path: Sequence[str] = (),
    *,
    index: bool = False,
    debug_roots: Sequence[str] = DEFAULT_DEBUG_ROOTS,
    symbolizer: str | None = "auto",
    warm: WarmSymbolizer | None = None,
    debuginfod: Debuginfod | None | Literal["env"] = "env",
    cache: SymbolCache | None = None,
    locator: Locator | None = None,
    done: set[int] | None = None,
    cache_only: bool = False,
    after: int = 0,
    upto: int | None = None,
    perf_maps: dict[int, PerfMap] | None = None,
) -> SymbolizeReport:
    """Symbolize every frame of the profile that has no symbol set yet, and commit.

    `store`: where the symbols go, through store/writer.py: a SymbolWriter
    (`heapscope symbolize`) or the ProfileWriter of a recording or an import.

    `symbolizer`: a path to llvm-symbolizer, "auto" to look for one, None for
    symbol-table names only. `warm`: an llvm-symbolizer already running (and
    already reading the files), used instead of starting one. `debuginfod`: a
    client for files found nowhere else; "env" = from DEBUGINFOD_URLS (none when unset).
    `cache`: answers kept from earlier runs, by build id (see the module's docstring).
    `locator`: one already used with the same settings (`record`'s, which located modules
    while the target ran), reused with what it read; else one is made from the arguments.
    `done`: ids of frames symbolized already (by earlier cache_only passes): not looked at.
    `cache_only` (`record` while its target runs, symbolize/live.py): only the frames with
    id in (`after`, `upto`] whose answer `cache` has; their ids are added to `done`, the others are left
    as they are (no file located or read, no llvm-symbolizer, no cache miss counted); the
    report covers the frames symbolized.
    `perf_maps`: pid -> the perf map `record` read as that process ended (perfmap.py), which
    names the frames of its code in no loaded object; without one they keep their names.
    """
    if debuginfod == "env":
        debuginfod = _debuginfod_from_env()
    tool = warm.tool if warm is not None else find_llvm_symbolizer() if symbolizer == "auto" else symbolizer
    if locator is None:
        locator = Locator(binary_path, index=index, debug_roots=debug_roots, debuginfod=debuginfod)
    report = SymbolizeReport(tool, index_files=locator.index.files if locator.index else None)
    if debuginfod is not None:
        report.debuginfod = list(debuginfod.urls)

    symbols = store.symbols() if isinstance(store, ProfileWriter) else store
    pending: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for frame_id, mapping_id, rel_pc, name in symbols.unsymbolized_frames(after, upto):
        if name != _FILTERED and (done is None or frame_id not in done):
            pending[mapping_id].append((frame_id, rel_pc, name))
    mappings = symbols.mappings(sorted(pending))

    next_symbol_id = symbols.next_symbol_id()
    symbol_rows: list[tuple[int, int, str, str | None, int | None, int]] = []
    frame_updates: list[tuple[str, int | None, int]] = []
    # Code in no loaded object (JIT): named from its process's perf map, at the end only.
    jit_reports = [] if cache_only else [
        _name_from_perf_map(mapping_id, path, pending.pop(mapping_id), perf_maps, frame_updates)
        for mapping_id in sorted(pending)
        if (path := mappings.get(mapping_id, ("", ""))[0]) and unknown_code_pid(path) is not None]

    context = cache_context(tool, locator, list(debuginfod.urls) if debuginfod else None) if cache else ""
    work = []
    entries: list[Entry | None] = []
    mapping_ids: list[int] = []
    in_cache: set[int] = set()  # mappings whose entry was in the cache before this pass
    for mapping_id in sorted(pending):
        path, build_id = mappings.get(mapping_id, ("", ""))
        frames = pending[mapping_id]
        entry = None
        if cache_only:
            entry = cache.lookup(path, build_id, context) if cache is not None and cache.cacheable(
                path, build_id) else None
            if entry is None:
                continue
            _answer_from_ranges(entry, frames)
            cached = [f for f in frames if f[1] in entry.answers]
            if len(cached) < len(frames) and entry.located.status == "found" and entry.located.debug_file:
                report.unanswered.append((entry.located.debug_file,
                                          [pc for _, pc, _ in frames if pc not in entry.answers]))
            elif len(cached) < len(frames) and entry.located.symbol_files:
                report.unnamed.append(entry.located.symbol_files[0])
            elif entry.located.status == "found" and cache is not None:
                # Answered whole so far: no reason left to warm it next time, unless the end
                # pass still has to ask the tool for it (then it notes that again).
                cache.note_asked(path, build_id, False)
            frames = pending[mapping_id] = cached
            if not frames:
                continue
        m = MappingReport(mapping_id, path, build_id, len(frames))
        report.mappings.append(m)
        mapping_ids.append(mapping_id)
        if cache is not None and cache.cacheable(path, build_id):
            entry = cache.lookup(path, build_id, context)
            if entry is None:
                from heapscope.symbolize.cache import Entry, file_identity

                located, consulted = locator.locate_traced(path, build_id)
                if debuginfod is None or located.status == "found":  # a server may have it later
                    entry = Entry(path, build_id, context, [(f, file_identity(f)) for f in consulted], located)
            else:
                in_cache.add(mapping_id)
                located = entry.located
            if entry is not None:
                _answer_from_ranges(entry, frames)
                answered = sum(1 for _, pc, _ in frames if pc in entry.answers)
                cache.hits += answered
                cache.misses += len(frames) - answered
                frames = [f for f in frames if f[1] not in entry.answers]
        else:
            located = locator.locate(path, build_id)
        entries.append(entry)
        work.append((m, frames, located))
    all_chains = _all_chains(tool, work, warm)

    for (m, asked, located), asked_chains, entry, mapping_id in zip(work, all_chains, entries, mapping_ids,
                                                                    strict=True):
        path = m.name
        names = _SymtabNames(located.symbol_files)
        frames = pending[mapping_id]
        fresh = {rel_pc: chain for (_, rel_pc, _), chain in zip(asked, asked_chains, strict=True)}
        keep = entry is not None and m.outcome != "symbolizer_failed"  # a failure is not an answer to keep
        if keep and cache is not None and not cache_only and located.status == "found" and mapping_id in in_cache:
            # A known module that still needed the tool (sampling meets new addresses of a large
            # library run after run): the next recording warms the tool for it early.
            cache.note_asked(path, m.build_id, bool(asked))
        for frame_id, rel_pc, old_name in frames:
            known = entry.answers.get(rel_pc) if entry is not None and rel_pc not in fresh else None
            chain = list(known[0]) if known is not None else fresh[rel_pc]
            if keep and known is None and entry is not None and len(entry.answers) < _CACHE_MAX_FRAMES:
                needs_name = not chain or not chain[-1].function
                entry.answers[rel_pc] = (tuple(chain), (names.lookup(rel_pc) or "") if needs_name else None)
                entry.changed = True
                if not chain and entry.located.status != "found" and (r := names.lookup_range(rel_pc)) is not None:
                    entry.add_range(r[1], r[2], r[0])
            if chain:
                set_id = next_symbol_id
                for depth, f in enumerate(chain):
                    symbol_rows.append((next_symbol_id, set_id, f.function, f.file or None, f.line or None,
                                        int(depth < len(chain) - 1)))
                    next_symbol_id += 1
                outer = chain[-1].function or _symtab_name(known, names, rel_pc)
                m.with_lines += 1
                if outer:
                    m.named += 1
                frame_updates.append((outer or old_name or fallback_frame_name(path, rel_pc), set_id, frame_id))
                continue
            fn = _symtab_name(known, names, rel_pc)
            if fn:
                m.named += 1
            frame_updates.append((fn or old_name or fallback_frame_name(path, rel_pc), None, frame_id))

    symbols.write_symbols(symbol_rows, frame_updates)
    if done is not None:
        done.update(frame_id for _, _, frame_id in frame_updates)
    if cache is not None:
        _packages_of_unnamed(report, entries)
        for entry, m in zip(entries, report.mappings, strict=True):
            if entry is not None and entry.changed and m.outcome != "symbolizer_failed":
                cache.store(entry)
    report.mappings.extend(jit_reports)  # after the zips with `entries` above: they have none
    if debuginfod is not None:
        report.debuginfod_errors = list(dict.fromkeys(debuginfod.errors))
        report.debuginfod_missing = dict(debuginfod.missing)
    return report


def _name_from_perf_map(mapping_id: int, path: str, frames: list[tuple[int, int, str]],
                        perf_maps: dict[int, PerfMap] | None,
                        frame_updates: list[tuple[str, int | None, int]]) -> MappingReport:
    """Names for the frames of one process's code in no loaded object, from its perf map
    (their rel_pc is the address itself); the report's detail says what map there was."""
    pid = unknown_code_pid(path)
    m = MappingReport(mapping_id, path, "", len(frames), outcome="not_a_file", detail="no perf map read")
    perf_map = perf_maps.get(pid) if perf_maps is not None and pid is not None else None
    if perf_map is not None:
        from heapscope.symbolize.perfmap import describe

        m.file, m.detail = perf_map.path, describe(perf_map)
    for frame_id, rel_pc, old_name in frames:
        fn = perf_map.lookup(rel_pc) if perf_map is not None else None
        fallback = fallback_frame_name(path, rel_pc)
        if fn or (old_name and old_name != fallback):  # a name `record` gave from the map is kept
            m.named += 1
        frame_updates.append((fn or old_name or fallback, None, frame_id))
    return m


def _answer_from_ranges(entry: Entry, frames: list[tuple[int, int, str]]) -> None:
    """No DWARF: a new address in a function answered before has that function's name."""
    if entry.ranges and entry.located.status != "found":
        for _, pc, _ in frames:
            if pc not in entry.answers and (fn := entry.range_name(pc)) is not None:
                entry.answers[pc] = ((), fn)


def _packages_of_unnamed(report: SymbolizeReport, entries: list[Entry | None]) -> None:
    """The Debian package of each module left with nameless frames (the summary names its
    -dbgsym), kept in its cache entry: dpkg-query costs ~50 ms of CPU, asked once per module."""
    ask: list[tuple[Entry, str]] = []
    for entry, m in zip(entries, report.mappings, strict=True):
        if entry is None or m.frames <= m.named or m.outcome == "not_a_file":
            continue
        if entry.package is not None:
            report.packages[m.name] = entry.package
        else:
            ask.append((entry, m.name))
    if not ask:
        return
    from heapscope.symbolize.missing import dpkg_owners

    found = dpkg_owners([name for _, name in ask])
    if found is None:
        return  # dpkg-query failed this time: not an answer to keep
    for entry, name in ask:
        entry.package = report.packages[name] = found.get(name, "")
        entry.changed = True


def _all_chains(tool: str | None, work: list[tuple[MappingReport, list[tuple[int, int, str]], Located]],
                warm: WarmSymbolizer | None = None) -> list[list[list[SourceFrame]]]:
    """Inline chains for every mapping: one llvm-symbolizer run for all of them.

    Should that run fail, each file is tried on its own, so that one bad file
    costs only its own frames and its report says why.
    """
    # Only files with addresses to ask: a running tool answers in order, so asking it nothing
    # would still wait for every file it is warming.
    ready = [i for i, (m, frames, located) in enumerate(work)
             if tool is not None and located.status == "found" and frames]
    out: list[list[list[SourceFrame]] | None] = [None] * len(work)
    if ready:
        assert tool is not None
        requests = [(work[i][2].debug_file, [pc for _, pc, _ in work[i][1]]) for i in ready]
        from heapscope.symbolize.llvm import symbolize_files

        try:
            batch = warm.symbolize_files(requests) if warm is not None else symbolize_files(tool, requests)
        except SymbolizerError:
            batch = None
        if batch is not None:
            for i, chains in zip(ready, batch, strict=True):
                m, _, located = work[i]
                m.file, m.outcome = located.debug_file, "symbolized"
                out[i] = chains
    return [chains if chains is not None else _chains(tool, located, [pc for _, pc, _ in frames], m)
            for chains, (m, frames, located) in zip(out, work, strict=True)]


def _chains(tool: str | None, located: Located, addresses: list[int], m: MappingReport) -> list[list[SourceFrame]]:
    """Inline chains per address when DWARF and the tool are there; else [] each, with m.outcome saying why."""
    none: list[list[SourceFrame]] = [[] for _ in addresses]
    if located.status != "found":
        m.outcome = located.status
        m.file = located.symbol_files[0] if located.symbol_files else ""
        if located.mismatches:
            refused = ", ".join(f"{p} has {b or 'no build id'}" for p, b in located.mismatches)
            m.detail = refused if m.outcome == "build_id_mismatch" else f"refused (build id mismatch): {refused}"
        return none
    m.file = located.debug_file
    if tool is None:
        m.outcome = "no_symbolizer"
        return none
    from heapscope.symbolize.llvm import symbolize_file

    try:
        chains = symbolize_file(tool, located.debug_file, addresses)
    except SymbolizerError as e:
        m.outcome = "symbolizer_failed"
        m.detail = str(e)
        return none
    m.outcome = "symbolized"
    return chains


_CACHE_MAX_FRAMES = 200_000


def _debuginfod_from_env() -> Debuginfod | None:
    """A client for DEBUGINFOD_URLS; urllib is imported only when the variable is set."""
    if not os.environ.get("DEBUGINFOD_URLS", "").strip():
        return None
    from heapscope.symbolize.debuginfod import Debuginfod

    return Debuginfod.from_env()


def _symtab_name(known: tuple[object, str | None] | None, names: _SymtabNames, rel_pc: int) -> str | None:
    """The symbol-table name of a frame: the cached one when the frame was answered from the cache."""
    if known is not None and known[1] is not None:
        return known[1] or None
    return names.lookup(rel_pc)


def debuginfod_urls_from_env() -> list[str] | None:
    """The servers symbolize_profile(debuginfod="env") would ask, None for none (for cache_context)."""
    if not os.environ.get("DEBUGINFOD_URLS", "").strip():
        return None
    from heapscope.symbolize.debuginfod import urls_from_env

    return urls_from_env() or None


def cache_context(tool: str | None, locator: Locator, debuginfod_urls: list[str] | None) -> str:
    """What else decides a module's answers besides its files: the tool (and its build) and the lookup settings."""
    import json

    from heapscope.symbolize.cache import file_identity

    # How symbol-table names are demangled: by the C++ runtime's __cxa_demangle, looked up by
    # soname at the first mangled name (symtab.py; neither loaded nor imported here: a recording
    # answered from the cache needs neither). True, as when the cxxfilt package did it (the same
    # names), so that the caches built then still answer.
    demangler = True
    return json.dumps([tool, file_identity(tool) if tool else None, locator.binary_path, locator.debug_roots,
                       locator.index is not None, debuginfod_urls, demangler])


class _SymtabNames:
    """Function names from the symbol table of the first readable file, loaded on first use."""

    def __init__(self, files: list[str]) -> None:
        self._files = files
        self._symbols: ElfSymbols | None = None
        self._loaded = False

    def lookup(self, addr: int) -> str | None:
        symbols = self._table()
        return symbols.lookup(addr) if symbols is not None else None

    def lookup_range(self, addr: int) -> tuple[str, int, int] | None:
        symbols = self._table()
        return symbols.lookup_range(addr) if symbols is not None else None

    def _table(self) -> ElfSymbols | None:
        if not self._loaded:
            from heapscope.symbolize.symtab import ElfReadError, read_elf_symbols_shared

            self._loaded = True
            for path in self._files:
                try:
                    self._symbols = read_elf_symbols_shared(path)  # record may have started it (live.py)
                except (OSError, ElfReadError):
                    continue
                if len(self._symbols):
                    break
        return self._symbols
