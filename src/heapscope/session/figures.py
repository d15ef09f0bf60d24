"""The summary's figures: counted from the producer's ended processes, read back from the profile."""

from __future__ import annotations

import contextlib

from heapscope.model import CallsiteId, FrameId
from heapscope.producer.producer import Producer
from heapscope.session.core import STACK_FRAMES_SHOWN, TOP_STACKS, UNSYMBOLIZED_SHOWN, _describe
from heapscope.session.loop import Loop
from heapscope.session.summary import ProcessPeak
from heapscope.wire.handshake import MAX_FRAMES

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:

    from heapscope.store.reader import Profile


class Figures(Loop):
    """The summary's figures, from the producer's ended processes and the written profile."""

    def _figures(self) -> None:
        producer = self.producer
        if producer is None:
            return
        procs = producer.ended
        s = self.summary
        s.processes = len(procs)
        s.no_descriptors = producer.no_descriptors
        with contextlib.suppress(Exception):
            self.progress = producer.stats()  # every process has ended: the final figures
            s.samples = self.progress.samples
            # What the dumps summed: all sampled bytes, or with --dump-at-max those at the peak.
            key = "peak_unfreed" if self.config.dump_at_max else "sampled_bytes"
            s.sampled_bytes = sum(p.final_stats.get(key, 0) for p in procs)
            s.blocked_ms = sum(p.final_meta.get("blocked_ns", 0) for p in procs) / 1e6
            s.dropped_records = sum(p.final_meta.get("dropped_records", 0) for p in procs)
            s.unwinders = sorted({p.flags.unwinder for p in procs if p.flags.unwinder})
            s.client_errors = sorted({f"{p.info.name}: {p.flags.client_error}"
                                      for p in procs if p.flags.client_error})
            s.python = sorted({p.python_status for p in procs if p.python_status})
            s.peak_heap = sum(p.final_stats.get("peak_unfreed", 0) for p in procs)
            s.peak_rss = sum(p.peak_rss for p in procs)
            s.own_rss = sum(p.own_rss for p in procs)
            if any(not p.flags.from_startup for p in procs):
                from heapscope.producer.stats import ATTACH_HEAPS_NOTE
                s.attached_heaps_note = ATTACH_HEAPS_NOTE
            invalid = sum(p.final_meta.get("python_walks_invalid", 0) for p in procs)
            unplaced = sum(p.heap.python.unplaced for p in procs)
            if invalid:
                s.python.append(f"python frames: {invalid:,} walks cut short by a failed check")
            if unplaced:
                # Mostly stacks cut at --max-frames: an import's native frames nest ~10 deep per level.
                cut = sum(p.final_meta.get("truncated_stacks", 0) for p in procs)
                why = "their eval activation was not in the native stack"
                if cut and self.config.max_frames < MAX_FRAMES:
                    why += (f"; {cut:,} stacks were cut at --max-frames {self.config.max_frames},"
                            f" {MAX_FRAMES} keeps more whole")
                s.python.append(f"python frames: {unplaced:,} frames put at the root ({why})")

    def _not_profiled_stats(self, producer: Producer) -> list[tuple[str, int | None, str, str, int, str]]:
        """The started target when its pid never connected: a line for the summary, a row for `stats`."""
        child, target = self.child, self._target
        if child is None or target is None or (self.config.names and not target[1]):
            return []  # with -n the target may rightly stay dormant
        connected = {p.info.pid for p in producer.ended} | {p.info.pid for p in producer.processes.values()}
        if child.pid in connected:
            return []
        path, why = target
        why = why or ("it never connected to heapscope: it (or a wrapper) cleared LD_PRELOAD before exec,"
                      " or the client could not start in it")
        line = f"{path} (pid {child.pid}) was not profiled: {why}"
        self.summary.not_profiled.append(line)
        return [("target_not_profiled", None, "data_loss", "producer", 1, line)]

    def _missing_figures(self) -> None:
        """Peaks, shallow fp stacks and unsymbolized modules, read back from the written profile."""
        s = self.summary
        report, self._symbol_report = self._symbol_report, None
        try:
            if report is not None:
                from heapscope.symbolize.missing import unsymbolized_modules
                mods = unsymbolized_modules(report)
                s.symbol_notes = list(report.debuginfod_errors) + list(report.cache_notes)
                s.unsymbolized_frames = sum(m.frames for m in mods)
                s.unsymbolized = mods if len(mods) <= UNSYMBOLIZED_SHOWN + 1 else mods[:UNSYMBOLIZED_SHOWN]
            if self.producer is None or not self.output.is_file() or not self.producer.ended or not s.samples:
                return  # no sample, no peak: the profile need not be read back
            from heapscope.store.reader import open_profile
            with open_profile(self.output) as profile:
                self._peaks(profile)
        except Exception as e:  # the profile is written; these figures are a bonus
            self.log(f"summary figures unavailable: {_describe(e)}")

    def _shallow_stats(self, producer: Producer) -> list[tuple[str, int | None, str, str, int, str]]:
        """--unwinder fp on code without frame pointers: the processes whose stacks are mostly
        one or two frames deep (read from what the producer committed), for `stats` and the summary."""
        fp = {int(p.info.upid): p for p in producer.ended if p.flags.unwinder == "frame pointers"}
        if not fp:
            return []
        rows: list[tuple[str, int | None, str, str, int, str]] = []
        try:
            from heapscope.store.reader import open_profile
            from heapscope.symbolize.missing import SHALLOW_DEPTH, is_mostly_shallow, mostly_shallow
            with open_profile(self.output) as profile:
                callsites = profile.callsites()
                depth: dict[CallsiteId, int] = {}
                for upid, p in sorted(fp.items()):
                    shallow, n = mostly_shallow(_depth(callsites, depth, cs) for cs in profile.used_callsites([upid]))
                    if not is_mostly_shallow(shallow, n):
                        continue
                    line = (f"{p.info.name or '?'} (pid {p.info.pid}): {shallow:,} of {n:,} stacks are at most"
                            f" {SHALLOW_DEPTH} frames deep with --unwinder fp: its code has no frame pointers;"
                            " record with --unwinder libunwind (or build with -fno-omit-frame-pointer)")
                    self.summary.shallow_stacks.append(line)
                    rows.append(("shallow_fp_stacks", upid, "data_loss", "producer", shallow, line))
        except Exception as e:  # a check of the data, never a reason to lose it
            self.log(f"frame-pointer depth check unavailable: {_describe(e)}")
        return rows

    def _peaks(self, profile: Profile) -> None:
        """Each process's peak and its largest stacks, read with a few indexed queries (the
        callsite and frame tables, ~100k rows for a compiler, are never loaded whole)."""
        s = self.summary
        # One heap (store.select: a pool's memory is in its malloc block too); the others by their peaks.
        from heapscope.store.select import heap_label, heap_members, heap_names, heap_peaks, select_heap
        from heapscope.view.peaks import peak_stacks  # a Python process's lines: its Python frames
        python = profile.python_upids()
        heap = select_heap(profile, None)
        members = heap_members(heap) or []
        others: dict[int, list[tuple[str, int]]] = {}
        # Only when the profile has another heap (a heap's peak rows come with its dumps): the
        # sums group every peak row (~3 ms on a compiler's, after the target's exit).
        if set(heap_names(profile)) - set(members):
            for upid_, name, size, _count in heap_peaks(profile):
                if name not in members:
                    others.setdefault(upid_, []).append((name, size))
        ended = {int(p.info.upid): p for p in self.producer.ended} if self.producer is not None else {}
        for stored in profile.processes():
            upid = int(stored.info.upid)
            peak = peak_stacks(profile, upid, TOP_STACKS, STACK_FRAMES_SHOWN, upid in python)
            if peak is not None:
                total, rows = peak
                if total > 0 or upid in others:
                    st = ended.get(upid)
                    s.peaks.append(ProcessPeak(stored.info.pid, stored.info.name or "?", total, rows,
                                               heap_label(heap) if upid in others and heap else "",
                                               others.get(upid, []),
                                               st.final_stats.get("peak_unfreed", 0) if st else 0,
                                               st.peak_rss if st else 0, st.own_rss if st else 0))
        s.peaks.sort(key=lambda pk: -pk.peak_bytes)


def _depth(callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]], memo: dict[CallsiteId, int],
           cs: CallsiteId) -> int:
    """Frames in the stack of callsite `cs` (memoized; the reader has refused parent cycles)."""
    chain: list[CallsiteId] = []
    node: CallsiteId | None = cs
    base = 0
    while node is not None:
        if node in memo:
            base = memo[node]
            break
        entry = callsites.get(node)
        if entry is None:
            break
        chain.append(node)
        node = entry[0]
    for i, n in enumerate(reversed(chain)):
        memo[n] = base + i + 1
    return memo.get(cs, 0)
