"""Allocation labels in the producer (docs/labels.md): each process's label sets as the
client sends them (HS_REC_LABELSET), and at each dump the trackers' rows per (callsite,
label set) for store/writer.py. The trackers keep the label dimension themselves
(bookkeeping/tracker_labels.h); this only names the sets and writes the rows.
"""

from __future__ import annotations

from heapscope.bookkeeping.rows import LABEL_DUMP_ROW, LABEL_PEAK_ROW, unpack_rows
from heapscope.records import Record, field
from heapscope.wire.codec import LABEL_SET_OVERFLOW, LabelSetRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing stays off the start path (docs/README.md)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from heapscope.bookkeeping._native import Tracker

    class LabelWriter(Protocol):
        """store/writer.py's ProfileWriter, or the producer's NoProfile."""

        def add_label_sets(self, upid: int, sets: Sequence[tuple[int, tuple[tuple[str, str], ...]]]) -> None: ...
        def rename_label_set(self, upid: int, label_set: int, pairs: tuple[tuple[str, str], ...]) -> None: ...
        def add_label_dump(self, upid: int, ts: int, heap_name: str, values: Sequence[int]) -> None: ...
        def add_label_peak(self, upid: int, ts: int, heap_name: str, values: Sequence[int]) -> None: ...

#: How the overflow bucket (sets past the client's cap, wire.h HS_LABEL_SET_OVERFLOW) is named.
OVERFLOW_PAIRS = (("heapscope.overflow", "true"),)


class ProcessLabels(Record):
    """The label sets one process sent, and which of them the profile has."""

    sets: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    written: set[int] = field(default_factory=set)
    # Written named by their id, their record not yet come (a full ring dropped it; the client
    # sends it again): renamed at the next dump after it comes, counted if it never does.
    unnamed: set[int] = field(default_factory=set)
    overflow_samples: int = 0  # samples booked to the overflow bucket, over every dump

    def add(self, r: LabelSetRecord) -> None:
        self.sets.setdefault(r.label_set, r.pairs)  # sent again after a dropped write: the same set

    def write(self, w: LabelWriter, upid: int, ts_start: int, ts_end: int, heap_name: str,
              tracker: Tracker, final: bool) -> None:
        """One dump's label rows of one heap's tracker (after its callsites were bound), and at
        the final dump its rows at the peak; the sets they name first."""
        flat = unpack_rows(LABEL_DUMP_ROW, tracker.label_dump())
        peak = unpack_rows(LABEL_PEAK_ROW, tracker.label_peak()) if final else ()
        for i in sorted(self.unnamed & self.sets.keys()):  # renamed at the first dump after: rows or not
            w.rename_label_set(upid, i, self.sets[i])
            self.unnamed.discard(i)
        if not flat and not peak:
            return
        ids = set(flat[1::5]) | set(peak[1::8])
        new = sorted(ids - self.written)
        if new:
            w.add_label_sets(upid, [(i, self._pairs(i)) for i in new])
            self.written.update(new)
        self.overflow_samples += sum(c for i, c in zip(flat[1::5], flat[2::5], strict=True)
                                     if i == LABEL_SET_OVERFLOW and c > 0)
        if flat:
            w.add_label_dump(upid, ts_end, heap_name, flat)
        if peak:
            w.add_label_peak(upid, tracker.stats()["peak_ts"], heap_name, peak)

    def _pairs(self, label_set: int) -> tuple[tuple[str, str], ...]:
        if label_set == LABEL_SET_OVERFLOW:
            return OVERFLOW_PAIRS
        # A set whose record was lost (a full ring): named by its id, never dropped.
        pairs = self.sets.get(label_set)
        if pairs is None:
            self.unnamed.add(label_set)
            return (("heapscope.label_set", str(label_set)),)
        return pairs

    def stats_rows(self, upid: int) -> list[tuple[str, int | None, str, str, int, str]]:
        if not self.written:
            return []
        return [("label_sets", upid, "info", "producer", len(self.written - {LABEL_SET_OVERFLOW}),
                 "allocation label sets seen"),
                ("label_set_overflow", upid, "data_loss" if self.overflow_samples else "info", "producer",
                 self.overflow_samples,
                 "samples whose label set came past the cap of 1024 sets per process: booked under"
                 " heapscope.overflow=true (use fewer distinct label values)"),
                ("label_sets_unnamed", upid, "data_loss" if self.unnamed else "info", "producer", len(self.unnamed),
                 "label sets whose record never came (a full ring dropped it): their samples are booked under"
                 " heapscope.label_set=ID (a larger --shmem-size)")]
