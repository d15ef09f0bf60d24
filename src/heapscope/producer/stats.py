"""Per-process statistics, as rows of the profile's `stats` table.

heapprofd's names where they mean the same (heap_samples, unwinding_errors,
map_reparses, total_unwinding_time_us); severity `data_loss` or `error` marks
what the report warns about.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

from heapscope.producer.process import ProcessState
from heapscope.wire import codec

StatRow = tuple[str, int | None, str, str, int, str]  # name, idx (upid), severity, source, value, description


def process_stats_rows(p: ProcessState, st: dict[str, int]) -> list[StatRow]:
    """The stats rows of one process that ended: the client's counters and the ingest's."""
    u = p.info.upid
    m = p.meta
    rows = [
        ("heap_samples", "info", "producer", st["mallocs"], "sampled mallocs received"),
        ("frees", "info", "producer", st["frees"], "frees of sampled addresses received"),
        ("unwinding_errors", "error", "client", m("unwinding_errors"), "unwinds that found no frame"),
        ("map_reparses", "info", "client", m("module_rescans"), "rescans of loaded objects"),
        ("total_unwinding_time_us", "info", "client", m("unwind_ns") // 1000,
         "estimated time spent unwinding in the target"),
        ("client_blocked_us", "info", "client", m("blocked_ns") // 1000,
         "time the target waited for ring space"),
        ("dropped_records", "data_loss", "client", m("dropped_records"), "records lost to a full ring"),
        ("stack_table_full", "info", "client", m("stack_table_full"), "stacks sent again"),
        ("addr_table_full", "data_loss", "client", m("addr_table_full"), "sampled addresses not tracked"),
        ("truncated_stacks", "info", "client", m("truncated_stacks"), "stacks cut at --max-frames"),
        ("malformed_records", "error", "producer",
         st["malformed_records"] + p.stats.malformed_records, "records skipped as malformed"),
        ("buffer_corrupted", "error", "producer", st["corrupt"], "ring found corrupt; reading stopped"),
        ("late_records", "info", "producer", st["late_records"], "operations applied after a gap"),
        ("sequence_gaps", "data_loss", "producer", st["gaps_skipped"], "sequence numbers never received"),
        ("implicit_frees", "info", "producer", st["implicit_frees"], "addresses reused before their free"),
        ("untracked_frees", "info", "producer", st["untracked_frees"], "frees of unknown addresses"),
        ("stacks", "info", "producer", p.stats.stacks, "distinct stacks received"),
        ("modules", "info", "producer", p.stats.modules, "loaded objects announced"),
        ("modules_replaced", "info", "producer", p.stats.modules_replaced,
         "loaded objects announced where an unloaded one was (each named as itself)"),
        ("peak_heap_bytes", "info", "producer", st.get("peak_unfreed", 0),
         "peak of the sampled unreleased bytes of libc.malloc, python.pymalloc, mmap and brk together"
         " (one moment)"),
        ("peak_rss_bytes", "info", "producer", p.peak_rss,
         "peak resident set size (VmHWM): the largest read while the process ran, by its client at its exit,"
         " or by record's wait for the process it started; 0 if never read"),
        ("client_own_rss_bytes", "info", "client", p.own_rss,
         "heapscope's own memory resident in the process at its exit (ring, tables, caches), part of"
         " peak_rss_bytes; 0 if not known (killed by a signal)"),
    ]
    rows += direct_map_rows(p)
    if p.python_state:
        supported = p.python_state == 1  # codec.PY_STATE_SUPPORTED
        rows += [
            ("python_frames", "info" if supported else "data_loss", "client", p.python_state, p.python_status),
            ("python_allocators", "info" if p.python_pymem else "data_loss", "client", int(p.python_pymem),
             "Python's allocator domains (pymalloc) sampled" if p.python_pymem else
             "Python's allocator domains (pymalloc) not sampled: objects of 512 bytes or less are not seen"),
            ("python_walks", "info", "client", m("python_walks"), "sampled stacks walked for Python frames"),
            ("python_walks_invalid", "error", "client", m("python_walks_invalid"),
             "Python frame walks cut by a check that failed"),
            ("python_walks_truncated", "info", "client", m("python_walks_truncated"),
             "Python stacks cut at 128 frames"),
            ("python_codes", "info", "producer", p.stats.python_codes, "Python code objects received"),
            ("python_codes_failed", "data_loss", "client", m("python_codes_failed"),
             "Python code objects that could not be read"),
            ("python_frames_unplaced", "info", "producer", p.heap.python.unplaced,
             "Python frames put at the root: their eval activation was not in the native stack"),
        ]
    return [(name, u, sev, src, int(v), desc) for name, sev, src, v, desc in rows]


#: Said for an attached process that uses custom heaps (stats, record's summary): include/heapscope.h, "Attach".
ATTACH_HEAPS_NOTE = ("custom heaps registered before the attach are not seen until the program registers them"
                     " again (heapscope_heap_register returned 0 before it)")
#: The custom heap API's function name, as the header's dlsym looks it up (in the program's strings).
_REGISTER_NAME = b"heapscope_heap_register"
_SCAN_LIMIT = 1 << 30  # executables larger than this are not searched for it (the note is then left out)


#: The heaps the client names itself (not the program's custom heaps): Python's, mmap and brk.
_BUILTIN_HEAPS = frozenset({codec.PY_HEAP_ID, *codec.MAP_HEAPS})

#: What the mapping calls made through syscall(2) mean (stats, record's summary): docs/mmap-heaps.md.
DIRECT_MAP_NOTE = ("made through syscall(2), not the C library's functions: the memory they mapped is not in"
                   " the mmap and brk heaps, nor in \"seen\"")


def direct_map_rows(p: ProcessState) -> list[tuple[str, str, str, int, str]]:
    """The client's count of mmap, munmap, mremap and brk calls it could not book (wire.h,
    direct_map_calls), with the bytes they asked for."""
    calls, size = p.meta("direct_map_calls"), p.meta("direct_map_bytes")
    return [("direct_map_calls", "data_loss", "client", calls, f"mmap, munmap, mremap and brk calls {DIRECT_MAP_NOTE}"),
            ("direct_map_bytes", "info", "client", size, "bytes those mmap, mremap and brk calls asked for")]


def map_heap_stats(p: ProcessState) -> list[StatRow]:
    """Rows of the mmap and brk heaps (client/maps.c), those the process has: samples, frees and
    sequence gaps each."""
    out: list[StatRow] = []
    for heap_id in sorted(codec.MAP_HEAPS):
        h = p.custom_heaps.get(heap_id)
        if h is None:
            continue
        out += [
            (f"{h.name}_heap_samples", p.info.upid, "info", "producer", h.samples,
             f"sampled {h.name} ranges booked (a range cut or moved is booked again)"),
            (f"{h.name}_heap_frees", p.info.upid, "info", "producer", h.frees,
             f"ends of sampled {h.name} ranges"),
            (f"{h.name}_heap_sequence_gaps", p.info.upid, "data_loss", "producer",
             h.tracker.stats()["gaps_skipped"], f"{h.name} sequence numbers never received"),
        ]
    return out


def attach_heaps_note(processes: Iterable[ProcessState]) -> str:
    """ATTACH_HEAPS_NOTE when it applies to one of `processes`, else '' (record's summary)."""
    return ATTACH_HEAPS_NOTE if any(uses_heaps_after_attach(p) for p in processes) else ""


def uses_heaps_after_attach(p: ProcessState) -> bool:
    """Whether an attached process may have custom heaps the attach missed: it registered one
    since (so it uses the API), or its executable names the API's register function (a program
    built with include/heapscope.h). A Python program's heapscope.heaps is seen only when it
    registers a heap again."""
    if p.flags.from_startup:
        return False
    if any(h.heap_id not in _BUILTIN_HEAPS for h in p.custom_heaps.values()):
        return True
    return _names_register(p.info.pid, p.info.exe)


@functools.lru_cache(maxsize=64)  # asked for the stats and for the summary
def _names_register(pid: int, exe: str) -> bool:
    import mmap

    for path in (f"/proc/{pid}/exe", exe):  # the running file first: exe's path may be replaced since
        if not path:
            continue
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if not 0 < size <= _SCAN_LIMIT:
                    return False
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    return m.find(_REGISTER_NAME) >= 0
        except (OSError, ValueError):
            continue
    return False


def custom_heap_stats(p: ProcessState) -> list[StatRow]:
    """Stats rows of a process's custom heaps, summed; the description names each heap's share.
    Python's heap (client/pymem.c) is the client's own, not a custom heap: rows of its own."""
    py = p.custom_heaps.get(codec.PY_HEAP_ID)
    own: list[StatRow] = [] if py is None else [
        ("python_heap_samples", p.info.upid, "info", "producer", py.samples,
         f"sampled allocations on {py.name} (Python's allocator domains)"),
        ("python_heap_frees", p.info.upid, "info", "producer", py.frees,
         f"frees of sampled {py.name} addresses"),
        ("python_heap_sequence_gaps", p.info.upid, "data_loss", "producer",
         py.tracker.stats()["gaps_skipped"], f"{py.name} sequence numbers never received"),
    ]
    own += map_heap_stats(p)
    heaps = [h for h in p.custom_heaps.values() if h.heap_id not in _BUILTIN_HEAPS]
    noted = uses_heaps_after_attach(p)
    if not heaps and not noted:
        return own
    stats = [h.tracker.stats() for h in heaps]

    def each(values: list[int]) -> str:
        return ", ".join(f"{h.name} {v}" for h, v in zip(heaps, values, strict=True))

    samples = [h.samples for h in heaps]
    frees = [h.frees for h in heaps]
    gaps = [s["gaps_skipped"] for s in stats]
    u = p.info.upid
    attached: list[StatRow] = [] if not noted else [
        ("custom_heaps_after_attach", u, "info", "producer", len(heaps),
         ATTACH_HEAPS_NOTE + (f" (registered since: {', '.join(h.name for h in heaps)})" if heaps else ""))]
    return own + attached + [
        ("custom_heap_samples", u, "info", "producer", sum(samples),
         f"sampled allocations on custom heaps: {each(samples)}"),
        ("custom_heap_frees", u, "info", "producer", sum(frees),
         f"frees of sampled custom heap addresses: {each(frees)}"),
        ("custom_heap_sequence_gaps", u, "data_loss", "producer", sum(gaps),
         f"custom heap sequence numbers never received: {each(gaps)}"),
    ]


def client_error_name(value: int) -> str:
    """The client's error code as the flags name it; "" for none."""
    if value == codec.ClientError.NONE:
        return ""
    try:
        return codec.ClientError(value).name.lower()
    except ValueError:
        return f"unknown error {value}"


def unwinder_name(value: int, state: int) -> str:
    """The unwinder the client used, as the summary says it; "" when it never ran."""
    if state != codec.ClientState.ACTIVE and value == 0:
        return ""
    try:
        return {codec.Unwinder.LIBUNWIND: "libunwind", codec.Unwinder.FP: "frame pointers",
                codec.Unwinder.CFA: "CFA walk (frame pointers where code has no unwind table)",
                codec.Unwinder.NONE: "none"}[codec.Unwinder(value)]
    except (KeyError, ValueError):
        return str(value)
