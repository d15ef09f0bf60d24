"""The end of a recording: final dumps, stats, symbolization, the summary's figures, signals back."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time

from heapscope import sigmask
from heapscope.closing import close_profile
from heapscope.model import CallsiteId, FrameId
from heapscope.producer.producer import Producer
from heapscope.session.core import (
    PEAKS_SHOWN,
    STACK_FRAMES_SHOWN,
    TOP_STACKS,
    UNSYMBOLIZED_SHOWN,
    ProcessPeak,
    _describe,
)
from heapscope.session.loop import Loop
from heapscope.store.names import WRITTEN_SIDECARS
from heapscope.wire.handshake import MAX_FRAMES

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
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
            s.label_overflow = sum(p.labels.overflow_samples for p in procs)
            s.labels_unnamed = sum(len(p.labels.unnamed) for p in procs)
            from heapscope.view.summary import busiest_moment  # what ran together, not a sum over all
            busiest = busiest_moment((p.info.start_ts, p.info.end_ts, p.final_stats.get("peak_unfreed", 0),
                                      p.peak_rss, p.own_rss) for p in procs)
            s.peak_heap, s.peak_rss, s.own_rss = busiest.seen, busiest.rss, busiest.own_rss
            from heapscope.producer.stats import attach_heaps_note  # only where it applies
            s.attached_heaps_note = attach_heaps_note(procs)
            direct = sum(p.final_meta.get("direct_map_calls", 0) for p in procs)
            if direct:
                from heapscope.view.summary import direct_map_line
                s.unseen.append(direct_map_line(direct, sum(p.final_meta.get("direct_map_bytes", 0) for p in procs)))
            invalid = sum(p.final_meta.get("python_walks_invalid", 0) for p in procs)
            unplaced = sum(p.heap.python.unplaced for p in procs)
            if invalid:
                s.python.append(f"python frames: {invalid:,} walks cut short by a failed check")
            if unplaced:
                # Mostly stacks cut at --max-frames: an import's native frames nest ~10 deep per level.
                cut = sum(p.final_meta.get("truncated_stacks", 0) for p in procs)
                from heapscope.view.summary import unplaced_line
                s.python.append(unplaced_line(unplaced, cut, self.config.max_frames, MAX_FRAMES))

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
        mods, self._unsymbolized = self._unsymbolized, []
        try:
            if report is not None:
                s.symbol_notes = list(report.debuginfod_errors) + list(report.cache_notes)
                s.unsymbolized_frames = sum(m.frames for m in mods)
                s.unsymbolized = mods if len(mods) <= UNSYMBOLIZED_SHOWN + 1 else mods[:UNSYMBOLIZED_SHOWN]
            if (self.producer is None or not os.path.isfile(self.output) or not self.producer.ended or not s.samples
                    or not self.options.peaks):
                return  # no sample, no peak (or no summary to show them): the profile need not be read back
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
                    used = profile.used_callsites([upid])
                    shallow, n = mostly_shallow([_depth(callsites, depth, cs) for cs in used],
                                                [_root_name(profile, cs) for cs in used])
                    if not is_mostly_shallow(shallow, n):
                        continue
                    line = (f"{p.info.name or '?'} (pid {p.info.pid}): {shallow:,} of {n:,} stacks are at most"
                            f" {SHALLOW_DEPTH} frames deep with --unwinder fp: its code has no frame pointers;"
                            " record with --unwinder auto, the default (or build with -fno-omit-frame-pointer)")
                    self.summary.shallow_stacks.append(line)
                    rows.append(("shallow_fp_stacks", upid, "data_loss", "producer", shallow, line))
        except Exception as e:  # a check of the data, never a reason to lose it
            self.log(f"frame-pointer depth check unavailable: {_describe(e)}")
        return rows

    def _peaks(self, profile: Profile) -> None:
        """Each process's peak, and the largest stacks of those the summary shows, read with a few
        queries (the callsite and frame tables, ~100k rows for a compiler, are never loaded whole)."""
        s = self.summary
        # One heap (store.select: a pool's memory is in its malloc block too); the others by their peaks.
        from heapscope.store.labels import process_label  # `cc1 parse.c`, named as in every view
        from heapscope.store.peak_tops import peak_totals
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
        totals = peak_totals(profile)
        listed = [(upid, pr) for upid, pr in ((int(pr.info.upid), pr) for pr in profile.processes())
                  if upid in totals and (totals[upid] > 0 or upid in others)]
        listed.sort(key=lambda item: -totals[item[0]])
        # The stacks of those the summary can show only: a build's 113 processes' took ~0.5 s
        # after make's exit, for 6 at most shown.
        peaks = peak_stacks(profile, [(upid, upid in python, pr.info.exe) for upid, pr in listed[:PEAKS_SHOWN + 1]],
                            TOP_STACKS, STACK_FRAMES_SHOWN)
        for upid, proc in listed:
            st = ended.get(upid)
            s.peaks.append(ProcessPeak(proc.info.pid, process_label(proc.info), totals[upid],
                                       peaks[upid][1] if upid in peaks else [],
                                       heap_label(heap) if upid in others and heap else "",
                                       others.get(upid, []),
                                       st.final_stats.get("peak_unfreed", 0) if st else 0,
                                       st.peak_rss if st else 0, st.own_rss if st else 0))


def _root_name(profile: Profile, cs: CallsiteId) -> str:
    """The function of the outermost frame of callsite `cs`'s stack ('' when not symbolized)."""
    callsites = profile.callsites()
    node, seen = cs, 0
    while True:
        entry = callsites.get(node)
        if entry is None:
            return ""
        parent, frame = entry
        if parent is None or seen > len(callsites):
            info = profile.frames().get(frame)
            return info.name if info is not None else ""
        node, seen = parent, seen + 1


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


class Teardown(Figures):
    """The end: final dumps, the profile's last rows, symbolization, the summary, signals back."""

    def close(self) -> None:
        """Write what is left, symbolize, and let everything go; always safe to call."""
        self._ended = True
        self._release_waiters()
        try:
            self._chore(required_only=True)
            if self.child is not None and self.child.returncode is None:
                # An exception left the session early: the target still ends under us.
                self._end_profiling()
                self.summary.exit_status = self.child.exit_status()
            else:
                self._end_profiling()
            self._write_end()
        finally:
            if self.producer is not None:
                self.producer.abandon()
            for lock in self._locks:
                lock.release()
            self._locks.clear()
            self._figures()
            if self.writer is not None and self._discard:
                close_profile(self.writer, self.output)
                for path in (self.output, *(self.output + suffix for suffix in WRITTEN_SIDECARS)):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                self.writer = None
            if self.writer is not None:
                unfolded = close_profile(self.writer, self.output)
                if unfolded is not None:
                    self._problem(unfolded)
                self.summary.output_bytes = os.stat(self.output).st_size if os.path.exists(self.output) else 0
                self._missing_figures()
            self.summary.elapsed_s = time.monotonic() - self.started
            self._close_hosts()
            self._restore_nofile()
            self._nofile = None
            if self._child_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._child_fd)
                self._child_fd = None
            # Last: a signal after the target's end (say SIGUSR1) must find our handler.
            self._uninstall_signals()

    def _close_hosts(self) -> None:
        """The hosts' ends (on_close): a server stopped, the final dumps (now symbolized) pushed."""
        hooks, self.on_close = self.on_close, []
        complete = self.writer is not None and os.path.exists(self.output) and not self._failed
        for fn in hooks:
            try:
                self.host_lines += fn(complete)
            except Exception as e:  # a host's bug: one line, the recording's end goes on
                self.host_lines.append(f"{getattr(fn, '__name__', 'a host')} ended badly: {_describe(e)}")

    def _write_end(self) -> None:
        producer, writer = self.producer, self.writer
        if producer is None or writer is None or self._discard:
            return
        if not self._failed:
            try:
                # A started target: spawn to the exit seen (the loop wakes on its pidfd);
                # else the session, as before.
                end = self._exited if self._exited is not None else time.monotonic()
                begin = self._spawned if self._spawned is not None else self.started
                writer.set_metadata("target_wall_ns", int((end - begin) * 1e9))
                writer.add_stats(producer.global_stats())
                writer.add_stats(self._not_profiled_stats(producer))
                writer.add_stats(_own_usage())
                writer.set_metadata("duration_ns", int((time.monotonic() - self.started) * 1e9))
                writer.commit()
            except Exception as e:
                self._fail(e)
        symbolizer, self._symbolizer = self._symbolizer, None
        if symbolizer is not None:
            if self._failed:
                with contextlib.suppress(Exception):
                    symbolizer.close()
                return
            try:
                self._symbol_report = symbolizer.finish(writer)
            except Exception as e:
                self._fail(e)
        if not self._failed:
            try:  # after the symbols: a stack that ends in glibc's start is complete (ENTRY_FRAMES)
                writer.add_stats(self._shallow_stats(producer))
                writer.commit()
            except Exception as e:
                self._fail(e)
        report = self._symbol_report
        if report is not None and not self._failed:
            try:  # the modules left with nameless frames, and their packages kept for `report`
                from heapscope.symbolize.missing import unsymbolized_modules
                self._unsymbolized = unsymbolized_modules(report)
                writer.add_packages((m.module, report.packages[m.module]) for m in self._unsymbolized
                                    if m.module in report.packages)
                writer.commit()
            except Exception as e:  # a figure of the summary, never a reason to lose the profile
                self.log(f"unsymbolized modules unavailable: {_describe(e)}")

    def _restore_nofile(self) -> None:
        """heapscope's limit back as it was (the target, spawned before the raise, kept it)."""
        if self._nofile is not None:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, self._nofile)

    def _uninstall_signals(self) -> None:
        # A command that only prints and exits from here (exits_after_close: record, live): a
        # signal that would kill it now must not put its own death in place of the target's
        # status (SIGTERM just after the target's exit ended record with -15 instead of 3;
        # SIGINT raised KeyboardInterrupt: 130), so what had no handler of its own before (the
        # default, Python's for SIGINT) is ignored. Job control's (heapscope/jobs.py) go back to
        # their default, which kills nothing: Ctrl-Z stops record while it writes its summary,
        # and an ignored SIGCHLD would have the kernel reap children before we wait for them.
        ending = self.exits_after_close
        defaults = (signal.SIG_DFL, signal.default_int_handler)
        harmless = (signal.SIGCHLD, signal.SIGCONT, signal.SIGTSTP)
        for sig, handler in self._restore.items():
            with contextlib.suppress(ValueError, TypeError, OSError):
                ignore = ending and handler in defaults and sig not in harmless
                sigmask.swap(sig, signal.SIG_IGN if ignore else handler)
        self._restore.clear()
        if self._old_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        self._wake_r.close()
        self._wake_w.close()


def _own_usage() -> list[tuple[str, int | None, str, str, int, str]]:
    """heapscope's own CPU time and peak RSS so far (this process: the producer, not the targets)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so it would report
    # the peak of whatever process started heapscope when that was bigger.
    from heapscope.producer.procfs import status_field

    return [
        ("producer_cpu_ns", None, "info", "producer", int((ru.ru_utime + ru.ru_stime) * 1e9),
         "CPU time of the heapscope process (producer, bookkeeping, writing), user + system, up to the final dumps"),
        ("producer_peak_rss_bytes", None, "info", "producer", status_field("self", "VmHWM") * 1024,
         "peak resident set of the heapscope process up to the final dumps"),
    ]
