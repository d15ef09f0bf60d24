"""Symbolization for `record`: nothing paid for what is already known, the rest overlapped with the run.

`record` hands every module the client announces to `module()`, which only
notes it. The per-user symbol cache (cache.py) knows most modules already
(libc, ld.so, ...): their frames cost nothing but a few stat() calls at the
end. A target that runs on past WARM_AFTER_S gets the rest warmed on the
producer's idle core: `tick()`, from the recording loop, locates each module
the cache does not know and has llvm-symbolizer start reading its debug info.
When recording ends, `finish()` symbolizes the frames the profile uses: cache
hits from the cache, the others on that warm process (or on a fresh one), and
adds their answers to the cache. A known module without DWARF names a new
address from its symbol table: tick() has that read on a thread while the
target runs (symtab.read_ahead). A short command (`record -- /bin/true`)
never starts llvm-symbolizer for modules it has seen before, nor imports its
machinery before the target has connected, unless the last recording that
used a module had to run the tool for it (cache.py's `ask-` files): that one
is warmed as soon as it is announced.

Given the recording's writer, tick() also symbolizes, every EARLY_EVERY_S while
the target runs, the frames written since its last pass that the cache answers
(symbolize_profile's cache_only: no file read, no tool run): the end then has
only the frames of the last moments and of modules the cache did not know (a
compiler's ~2,500 frames took ~16 ms after its exit). The end's pass
looks at every other frame, so the profile is as complete, and its report adds
the early passes' figures. A pass that meets addresses the cache does not know in
a known module with DWARF asks the warm tool for them there and then (as many as
its pipe takes without waiting): the end finds their answers ready, instead of
starting a tool that reads the module's debug info first (a Python program's new
libpython addresses cost ~55-75 ms after its exit before).
"""

from __future__ import annotations

import time

from heapscope.symbolize.cache import SymbolCache, default_dir
from heapscope.units import format_in

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from heapscope.store.writer import ProfileWriter
    from heapscope.symbolize.llvm import WarmSymbolizer
    from heapscope.symbolize.locate import Located, Locator
    from heapscope.symbolize.perfmap import PerfMap
    from heapscope.symbolize.profile import SymbolizeReport

# A target still running after this long gets its unknown modules warmed while it runs;
# one that ends sooner is symbolized at the end (usually all from the cache).
WARM_AFTER_S = 0.25
EARLY_EVERY_S = 0.2  # a cache-only pass over the frames written since the last one
# Frames looked at per pass, at most (~3 us each): the loop drains no ring meanwhile. A
# Python program's imports intern ~20k frames at its start; the passes take them in turns.
EARLY_MAX_FRAMES = 2000
PERF_MAPS_MAX_BYTES = 256 << 20  # perf maps read in one recording, all processes together


class LiveSymbolizer:
    def __init__(self, cache: SymbolCache | None = None, writer: ProfileWriter | None = None) -> None:
        self.cache = cache if cache is not None else SymbolCache(default_dir())
        self.writer = writer  # the recording's: tick() symbolizes early from the cache into it
        self._done: set[int] = set()  # frames symbolized by the early passes
        self._after = 0  # frames up to this id were looked at by an early pass
        self._early: list[SymbolizeReport] = []
        self._early_at = 0.0  # the next early pass, once warming has begun
        self.warm: WarmSymbolizer | None = None
        self._pending: list[tuple[str, str]] = []  # announced, not yet looked at
        self._seen: set[tuple[str, str]] = set()
        self._warm_from = time.monotonic() + WARM_AFTER_S
        self._locator: Locator | None = None
        self._context: str | None = None
        self._broken = False  # llvm-symbolizer missing or failed: no more warming
        self._debuginfod: list[str] | None = None
        self._tool = ""
        # Modules tick() located (the cache did not know them), with the files consulted.
        self._traced: dict[tuple[str, str], tuple[Located, list[str]]] = {}
        self._read_ahead: list[str] = []  # symbol tables tick() started reading (symtab.read_ahead)
        self.perf_maps: dict[int, PerfMap] = {}  # pid -> the perf map read as it ended (process_ended)
        self._perf_map_bytes = 0

    def module(self, path: str, build_id: str) -> None:
        """A module of a profiled process: noted (warmed later by tick(), if the target runs that
        long; at once when the last recording that used it had to run the tool for it)."""
        if (path, build_id) not in self._seen:
            self._seen.add((path, build_id))
            self._pending.append((path, build_id))
            if self._warm_from and self.cache.asked_last(path, build_id):
                self._warm_from = 0.0

    def process_ended(self, pid: int, uid: int, jitdump: str | None = None) -> None:
        """A process with code in no loaded object ended: its perf map (perfmap.py), if it
        wrote one, and the jitdump file it mapped, if any, are read now, while the pid is
        still its own, to name that code at the end.

        The images of one pid (an exec) share its `[unknown pid N]` frames, so what one image's
        end read is kept by another's: the names are what all of them found. Their ends come in
        no fixed order (`sh -c 'exec node --perf-prof ...'`: sh's may be seen after node's), and
        only node's knew its jitdump."""
        from heapscope.symbolize.perfmap import MAX_BYTES, PerfMap, merged, perf_map_path, read_jitdump, read_perf_map

        before = self.perf_maps.get(pid)
        left = PERF_MAPS_MAX_BYTES - self._perf_map_bytes
        if left <= 0:
            if before is None:
                most = format_in(PERF_MAPS_MAX_BYTES, "MiB", digits=0)
                self.perf_maps[pid] = PerfMap(perf_map_path(pid), f"not read: {most}"
                                                                  " of perf maps were read in this recording already")
            return
        m = read_perf_map(pid, uid, limit=min(MAX_BYTES, left))
        self._perf_map_bytes += m.bytes_read
        if jitdump is not None and PERF_MAPS_MAX_BYTES - self._perf_map_bytes > 0:
            dump = read_jitdump(jitdump, uid, limit=min(MAX_BYTES, PERF_MAPS_MAX_BYTES - self._perf_map_bytes))
            self._perf_map_bytes += dump.bytes_read
            m = dump if m.status != "read" else merged(m, dump) if dump.status == "read" else m
        if before is not None and before.status == "read":
            m = merged(before, m) if m.status == "read" else before
        self.perf_maps[pid] = m

    def tick(self, now: float) -> None:
        """From the recording loop: warm the modules the cache does not know, once the target has
        run a while, and symbolize from the cache what was written since the last pass."""
        if now < self._warm_from or self._broken:
            return
        if self._pending:
            self._warm()
        if self.writer is not None and now >= self._early_at and self._locator is not None:
            self._early_at = now + EARLY_EVERY_S
            self._early_pass()

    def _early_pass(self) -> None:
        writer = self.writer
        if writer is None or not writer.connected or self._debuginfod is not None:
            return  # debuginfod: the end fetches what the cache lacks, with the rest
        symbols = writer.symbols()
        last = min(symbols.last_frame_id(), self._after + EARLY_MAX_FRAMES)  # ids are dense, from 1
        if last <= self._after:
            return
        from heapscope.symbolize.profile import symbolize_profile

        try:
            report = symbolize_profile(writer, symbolizer=self._tool, cache=self.cache, locator=self._locator,
                                       debuginfod=None, done=self._done, cache_only=True, after=self._after,
                                       upto=last)
        except Exception:
            self.writer = None  # the end does it all, as without early passes
            raise
        self._after = last
        if report.mappings:
            self._early.append(report)
        for debug_file, addresses in report.unanswered:
            self._warm_file(debug_file, addresses)
        for symbol_file in report.unnamed:
            self._read_symbols_ahead(symbol_file)

    def _read_symbols_ahead(self, symbol_file: str) -> None:
        """Have a symbol table read on a thread now, while the target runs (a compiler's takes
        ~10 ms, more from a cold disk), for the end to name new addresses from; once per file."""
        if symbol_file in self._read_ahead:
            return
        from heapscope.symbolize.symtab import read_ahead

        read_ahead(symbol_file)
        self._read_ahead.append(symbol_file)

    def _warm_file(self, debug_file: str, addresses: list[int] | None = None) -> None:
        """Have the warm tool read a file's debug info now, on the idle core, starting the
        tool for the first file; with `addresses` (a known module's new ones, which the end
        would otherwise ask a tool started then: libpython's cost ~55-75 ms after a Python
        program's exit), have it look them up too."""
        from heapscope.symbolize.llvm import SymbolizerError, WarmSymbolizer

        try:
            if self.warm is None:
                self.warm = WarmSymbolizer(self._tool)
            if addresses:
                self.warm.prefetch(debug_file, addresses)
            else:
                self.warm.warm(debug_file)
        except (OSError, SymbolizerError):
            self._broken = True
            self.close()

    def _warm(self) -> None:
        pending, self._pending = self._pending, []
        from heapscope.symbolize.llvm import find_llvm_symbolizer
        from heapscope.symbolize.locate import Locator
        from heapscope.symbolize.profile import cache_context, debuginfod_urls_from_env

        if self._locator is None:
            tool = find_llvm_symbolizer()
            if tool is None:
                self._broken = True
                return
            self._tool = tool
            self._locator = Locator(())
            self._debuginfod = debuginfod_urls_from_env()
            self._context = cache_context(tool, self._locator, self._debuginfod)
        assert self._context is not None
        for path, build_id in pending:
            entry = self.cache.lookup(path, build_id, self._context)
            if entry is not None and entry.located.status == "found" and self.cache.asked_last(path, build_id):
                # Known, but the last recording met new addresses of it (a large library, sampled):
                # the tool reads its debug info now, and the end's new ones cost it no start.
                self._warm_file(entry.located.debug_file)
                if self._broken:
                    return
                continue
            if entry is not None:
                # Known: its frames come from the cache (new addresses are few). Without DWARF,
                # a new address is named from the symbol table, read ahead on a thread once an
                # early pass meets such an address (report.unnamed): read for every module
                # announced, it cost each recording that ran past WARM_AFTER_S ~40 ms of CPU to
                # import the ELF reader and more to read tables that named nothing (every
                # process of a build announces ld.so, libc, sh...). Without early passes, now.
                if entry.located.status != "found" and entry.located.symbol_files and (
                        self.writer is None or self._debuginfod is not None):
                    self._read_symbols_ahead(entry.located.symbol_files[0])
                continue
            located, consulted = self._locator.locate_traced(path, build_id)
            self._traced[(path, build_id)] = (located, consulted)
            if located.status == "found":
                self._warm_file(located.debug_file)  # the tool is started for the first module that needs it
                if self._broken:
                    return

    def finish(self, writer: ProfileWriter) -> SymbolizeReport | None:
        """Symbolize the profile's frames, and count the cache's work in its stats;
        None when the profile has no frame to symbolize (nothing to report)."""
        try:
            if not self._early and not writer.symbols().any_unsymbolized():  # symbolize_profile reads them
                self._remember_located()
                self._drop_asked(set())
                writer.add_stats(self.cache.stats_rows())
                writer.commit()
                return None
            from heapscope.symbolize.profile import symbolize_profile

            # tick()'s locator read the modules' files already; it is the one symbolize_profile
            # would make, but for debuginfod (a server's files are fetched at the end only).
            reuse = self._locator if self._debuginfod is None else None
            # tick() found the tool too: the end does not look through PATH for it again.
            tool = self._tool if self._locator is not None else "auto"
            report = symbolize_profile(writer, symbolizer=tool, warm=self.warm, cache=self.cache, locator=reuse,
                                       done=self._done, perf_maps=self.perf_maps)
            _add_early(report, self._early)
            self._remember_located()
            self._drop_asked({m.build_id for m in report.mappings})
            report.cache_notes = self.cache.notes()
            writer.add_stats(self.cache.stats_rows())
            from heapscope.symbolize.missing import jit_stats_rows

            writer.add_stats(jit_stats_rows(report))
            writer.commit()
            return report
        finally:
            self.close()

    def _drop_asked(self, used: set[str]) -> None:
        """Drop the ask- file of each module announced whose build id no frame of the profile has
        (`used`: those that have): this run needed no tool for it. Only a run with its frames
        dropped it, so once set it warmed the tool at every later recording's start (ld.so, met
        by a run, then in no profile of `ls`: ~20-30 ms of CPU a recording)."""
        for path, build_id in self._seen:
            if build_id not in used:
                self.cache.note_asked(path, build_id, False)

    def _remember_located(self) -> None:
        """An entry, without answers, for each module tick() located that the profile has no
        frame of: the next recording knows it, and neither locates nor warms it again."""
        if self._context is None or self._debuginfod is not None:
            return
        from heapscope.symbolize.cache import Entry, file_identity

        for (path, build_id), (located, consulted) in self._traced.items():
            if (path, build_id) not in self.cache.stored and self.cache.cacheable(path, build_id):
                self.cache.store(Entry(path, build_id, self._context, [(f, file_identity(f)) for f in consulted],
                                       located))

    def close(self) -> None:
        if self._read_ahead:  # not needed after all: let go (each thread ends on its own)
            from heapscope.symbolize.symtab import forget_read_ahead

            forget_read_ahead(self._read_ahead)
            self._read_ahead = []
        if self.warm is not None:
            self.warm.stop()  # what it still warms is not needed any more
            self.warm = None
        self.cache.close()


def _add_early(report: SymbolizeReport, early: list[SymbolizeReport]) -> None:
    """The end's report, with the frames the early passes symbolized counted in, per mapping."""
    if not early:
        return
    by_id = {m.mapping_id: m for m in report.mappings}
    for r in early:
        for m in r.mappings:
            have = by_id.get(m.mapping_id)
            if have is None:
                by_id[m.mapping_id] = m
                report.mappings.append(m)
            else:
                have.frames += m.frames
                have.named += m.named
                have.with_lines += m.with_lines
        for path, package in r.packages.items():
            report.packages.setdefault(path, package)
    report.mappings.sort(key=lambda m: m.mapping_id)
