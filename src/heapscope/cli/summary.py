"""`record`'s status line and its summary at the end (`live` prints the same summary).

Imported once the target runs (cli/record.py): nothing here is on the target's start path.
"""

from __future__ import annotations

import sys

from heapscope.session.core import PEAKS_SHOWN
from heapscope.units import format_bytes
from heapscope.view.summary import count_names, is_minor, rss_line

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off a short recording's path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Callable

    from heapscope.session import Recording, Summary


class StatusLine:
    """One line on the terminal that the next write replaces; never on a pipe."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def updater(self, rec: Recording) -> Callable[[float], None] | None:
        """What the recording calls to refresh the line; None when there is no line."""
        started = rec.started
        if not self.enabled:
            return None

        def update(now: float) -> None:
            progress = rec.progress  # published by the loop just before this call
            self.show(f"heapscope: {now - started:6.1f} s  {progress.samples:,} samples"
                      f"  {format_bytes(progress.live_bytes)} live")
        return update

    def show(self, text: str) -> None:
        sys.stderr.write(f"\r\x1b[K{text}\r")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def print_summary(s: Summary) -> None:
    unwinders = s.unwinders or ["none (no process connected)"]
    share = s.blocked_ms / 1e3 / s.elapsed_s * 100 if s.elapsed_s > 0 else 0.0
    lines = [
        f"recorded {s.processes} process{'es' if s.processes != 1 else ''}, {s.samples:,} samples, "
        f"{format_bytes(s.sampled_bytes)} sampled, interval {s.interval} B, {s.elapsed_s:.2f} s",
        f"unwinder {', '.join(unwinders)}; target blocked {s.blocked_ms:.1f} ms ({share:.1f}%); "
        f"{s.dropped_records:,} records dropped",
    ]
    lines += s.python
    largest = s.peaks[0].peak_bytes if s.peaks else 0
    major = [pk for pk in s.peaks if not is_minor(pk.peak_bytes, 0, largest, 0)]
    seen, rss, own_rss, where = s.peak_heap, s.peak_rss, s.own_rss, ""
    if len(major) == 1 < len(s.peaks) and major[0].rss:
        # The process shown below, not a sum over shells and tools of ~3 MiB each (pyenv's
        # python3 shim: 38 of them doubled the RSS of its one Python process)
        seen, rss, own_rss, where = major[0].seen, major[0].rss, major[0].own_rss, \
            f" in {major[0].name} (pid {major[0].pid})"
    # several processes: those that ran together, said so (rss_line)
    lines += [rss_line(seen, rss, own_rss, s.processes, where)] if rss else []
    lines += s.unseen
    if s.client_errors:
        lines.append("client stopped early: " + "; ".join(s.client_errors))
    if s.no_descriptors:
        lines.append(f"{s.no_descriptors:,} processes not profiled: heapscope ran out of file descriptors "
                     "(raise `ulimit -n`)")
    if s.exit_status is not None and s.exit_status > 128:
        import signal

        try:  # noqa: SIM105
            lines.append(f"target died of {signal.Signals(s.exit_status - 128).name}")
        except ValueError:
            pass
    if s.problems:
        lines.append(f"profile incomplete: {s.problems[0]}")
    lines += s.not_profiled
    if s.attached_heaps_note:
        lines.append(f"attached: {s.attached_heaps_note}")
    shown = major if len(major) <= PEAKS_SHOWN + 1 and len(major) == len(s.peaks) else major[:PEAKS_SHOWN]
    for pk in shown:
        heap = f" in {pk.heap}" if pk.heap else ""
        lines.append(f"{pk.name} (pid {pk.pid}): peak {format_bytes(pk.peak_bytes)} sampled unreleased{heap};"
                     " largest stacks:")
        lines += [f"  {format_bytes(size):>10}  {path}" for path, size in pk.top]
        if pk.other_heaps:  # custom heaps: each at its own peak, never added to the one above
            lines.append("  other heaps, each at its own peak (report --heap NAME): "
                         + ", ".join(f"{name} {format_bytes(size)}" for name, size in pk.other_heaps))
    if len(shown) < len(s.peaks):
        names = count_names([pk.name.split(" ", 1)[0] for pk in s.peaks[len(shown):]])  # cc1 ×90, not each file
        lines.append(f"... and {len(s.peaks) - len(shown):,} more processes with smaller peaks"
                     f" ({names}; heapscope report {s.output})")
    lines += [f"shallow stacks: {line}" for line in s.shallow_stacks]
    if s.label_overflow:
        lines.append(f"labels: {s.label_overflow:,} samples came past the cap of 1024 label sets per process and"
                     " are under heapscope.overflow=true; fix: fewer distinct label values (not one per request)")
    if s.labels_unnamed:
        lines.append(f"labels: {s.labels_unnamed:,} label sets lost their names (a full ring dropped their records):"
                     " their samples are under heapscope.label_set=ID; fix: a larger --shmem-size")
    lines += s.symbol_notes
    if s.unsymbolized:
        lines.append(f"{_frames(s.unsymbolized_frames)} left unsymbolized (shown as module+0x...):")
        for m in s.unsymbolized:
            line = f"  {m.module}: {_frames(m.frames)}; fix: {m.fix}"
            # A long path and its fix go on two lines: the summary stays within 120 columns.
            fits = len("heapscope: ") + len(line) <= 120
            lines += [line] if fits else [f"  {m.module}: {_frames(m.frames)}", f"    fix: {m.fix}"]
        rest = s.unsymbolized_frames - sum(m.frames for m in s.unsymbolized)
        if rest > 0:
            lines.append(f"  ... and {_frames(rest)} of other modules (heapscope symbolize {s.output} lists them)")
        from heapscope.symbolize.missing import debug_archive_advice  # loaded by the summary already
        lines += debug_archive_advice([m.fix for m in s.unsymbolized], str(s.output))  # the archive -dbgsym needs
    lines.append(f"profile written to {s.output} ({format_bytes(s.output_bytes)})")
    lines.append(f"next: heapscope report {s.output}")
    for line in lines:
        print(f"heapscope: {line}", file=sys.stderr)


def _frames(n: int) -> str:
    return f"{n:,} frame{'s' if n != 1 else ''}"
