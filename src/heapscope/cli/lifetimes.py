"""`report --view temporary`, `report --lifetimes`, `report --sizes`: the lifetime views as text.

The figures come from view/lifetimes.py; this module parses --temporary and lays the tables out.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from heapscope.errors import UsageError
from heapscope.model import CallsiteId
from heapscope.store.labels import process_label
from heapscope.store.lifetimes import CallsiteLife, has_lifetimes, read_lifetimes, read_lifetimes_by_process
from heapscope.store.reader import Process, Profile
from heapscope.store.select import process_interval
from heapscope.units import format_bytes, parse_duration
from heapscope.view import lifetimes as lt
from heapscope.view.units import format_count, format_percent

TYPE_CHECKING = False
if TYPE_CHECKING:
    from heapscope.estimate import Estimate

NO_LIFETIMES = ("this profile has no lifetimes (it was recorded before heapscope kept them);"
                " record the program again for --view temporary, --lifetimes and --sizes")
TEMPORARY_HELP = ("with --view temporary and --lifetimes: an allocation freed within DURATION is temporary"
                  " (default 1ms; us, ms, s; taken down to a 1-2-5 step), or `heaptrack`: freed before its"
                  " thread's next allocation, heaptrack's definition, exact at -i 1")
_W = len("alloc_objects:")


def parse_temporary(text: str | None) -> int | str:
    """--temporary: a threshold in ns, or lt.HEAPTRACK."""
    if text is None:
        return lt.DEFAULT_TEMPORARY_NS
    t = text.strip().lower()
    if t == lt.HEAPTRACK:
        return lt.HEAPTRACK
    for suffix in ("us", "µs"):
        if t.endswith(suffix):
            try:
                value = float(t[: -len(suffix)])
            except ValueError:
                break
            if value > 0 and value < 1e12:
                return round(value * 1000)
            break
    else:
        return round(parse_duration(t, "--temporary", 3600.0) * 1e9)
    raise UsageError(f"--temporary must be a time like 50us, 1ms or 2s, or heaptrack, not {text!r}")


def threshold_line(threshold: int | str, interval: int) -> str:
    """What counts as temporary, said in the header."""
    if threshold == lt.HEAPTRACK:
        text = "freed before the allocating thread's next allocation (heaptrack's definition)"
        if interval > 1:
            text += (f"; at interval {interval:,} that is its next sampled allocation: exact only at -i 1,"
                     " record with -i 1 for it")
        return text
    assert isinstance(threshold, int)
    eff = lt.effective_threshold(threshold)
    text = f"freed within {lt.format_ns(eff)} (--temporary DURATION)"
    if eff != threshold:
        text += f"; {lt.format_ns(threshold)} taken down to the bucket bound {lt.format_ns(eff)}"
    return text


def _estimate(e: Estimate, interval: int) -> str:
    if interval <= 1:
        return format_count(round(e.value))
    return f"~{format_count(round(e.value))} ± {format_count(round(e.stderr))}"


def _header(p: Process, interval: int) -> list[str]:
    info = p.info
    sampling = "every allocation (exact)" if interval <= 1 else f"one sample per {interval:,} bytes on average" \
        " (allocations estimated, ± one standard error)"
    return [f"pid {info.pid}  {process_label(info)}  (upid {info.upid})", f"  {'sampling:':<{_W}} {sampling}"]


def _stack_text(profile: Profile, cs: CallsiteId, frames: int = 4) -> str:
    got = profile.stack_frames(cs, frames + 1)
    names = ["?" if f is None else f.display_name for f in got[:frames]][::-1]
    return ("… > " if len(got) > frames else "") + " > ".join(names)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Right-aligned numbers, then `left` left-aligned columns at the end."""
    cells = [tuple(header), *(tuple(r) for r in rows)]
    n = len(header) - left
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    return ["  " + "  ".join([*(c[i].rjust(widths[i]) for i in range(n)),
                             *(c[i].ljust(widths[i]) for i in range(n, len(header)))]).rstrip() for c in cells]


def render_temporary(profile: Profile, p: Process, lives: dict[CallsiteId, CallsiteLife],
                     threshold: int | str, top: int) -> str:
    interval = process_interval(profile, p)
    rows = lt.temporary_rows(lives, threshold, interval)
    total_temp = sum(r.temp_bytes for r in rows)
    alloc = sum(c.size for life in lives.values() for c in life.sizes.values())
    lines = _header(p, interval)
    lines.append(f"  {'temporary:':<{_W}} {threshold_line(threshold, interval)}")
    est = lt.total([r.temp for r in rows])
    lines.append(f"  {'total:':<{_W}} {format_bytes(total_temp)} temporary of {format_bytes(alloc)} allocated"
                 f" ({format_percent(total_temp, alloc)}), {_estimate(est, interval)} allocations")
    lines.append("")
    if not rows:
        lines.append("  (no temporary allocations)")
        return "\n".join(lines) + "\n"
    table = [(format_bytes(r.temp_bytes), format_percent(r.temp_bytes, r.alloc_bytes), _estimate(r.temp, interval),
              format_bytes(r.alloc_bytes), _stack_text(profile, r.callsite)) for r in rows[:top]]
    lines += _table(("temporary", "of stack", "allocations", "allocated", "stack"), table)
    if len(rows) > top:
        lines.append(f"  ({len(rows) - top} more stacks; --top N shows more)")
    return "\n".join(lines) + "\n"


def render_lifetimes(profile: Profile, p: Process, lives: dict[CallsiteId, CallsiteLife],
                     threshold: int | str, top: int, python_only: bool) -> str:
    interval = process_interval(profile, p)
    rows = lt.lifetime_rows(profile, lives, threshold, interval, python_only)
    lines = _header(p, interval)
    lines.append(f"  {'temporary:':<{_W}} {threshold_line(threshold, interval)}")
    lines.append(f"  {'lifetimes:':<{_W}} of the freed allocations, the bucket their median and 90th percentile"
                 " fall in; held: not freed at the end")
    lines.append("")
    if not rows:
        lines.append("  (no allocations)")
        return "\n".join(lines) + "\n"
    table = [(format_bytes(r.alloc_bytes), _estimate(r.alloc, interval), share(r.temp, r.alloc),
              lt.format_bucket(r.median), lt.format_bucket(r.p90), share(r.held, r.alloc),
              r.function, r.library) for r in rows[:top]]
    lines += _table(("allocated", "allocations", "temporary", "median", "p90", "held", "function", "library"),
                    table, left=2)
    if len(rows) > top:
        lines.append(f"  ({len(rows) - top} more functions; --top N shows more)")
    return "\n".join(lines) + "\n"


def render_sizes(profile: Profile, p: Process, lives: dict[CallsiteId, CallsiteLife], top: int,
                 per_stack: bool) -> str:
    interval = process_interval(profile, p)
    lines = _header(p, interval)
    lines.append(f"  {'sizes:':<{_W}} asked-for sizes in power-of-two buckets"
                 + (", per stack (--focus)" if per_stack else " (--focus REGEX: per stack)"))
    groups: list[tuple[str, list[CallsiteLife]]]
    if per_stack:
        ranked = sorted(lives.items(), key=lambda kv: -sum(c.size for c in kv[1].sizes.values()))
        groups = [(_stack_text(profile, cs, 6), [life]) for cs, life in ranked[:top]]
    else:
        groups = [("", list(lives.values()))]
    for title, group in groups:
        rows = lt.size_rows(group, interval)
        lines.append("")
        if title:
            lines.append(f"  {title}")
        if not rows:
            lines.append("  (no allocations)")
            continue
        whole = sum(r.size for r in rows)
        lines += _table(("size", "allocations", "bytes", "%", ""),
                        [(f"{format_bytes(r.lo)}-{format_bytes(r.hi)}", _estimate(r.allocations, interval),
                          format_bytes(r.size), format_percent(r.size, whole), _bar(r.size, whole)) for r in rows])
    if per_stack and len(lives) > top:
        lines.append(f"  ({len(lives) - top} more stacks; --top N shows more)")
    return "\n".join(lines) + "\n"


def _bar(part: int, whole: int, width: int = 30) -> str:
    return "#" * max(1 if part else 0, round(width * part / whole)) if whole else ""


def render(profile: Profile, processes: Sequence[Process], args: argparse.Namespace,
           focus: re.Pattern[str] | None, ignore: re.Pattern[str] | None) -> str:
    """The text of the lifetime view `args` asks for (--view temporary, --lifetimes or --sizes),
    one section per process, of the heap the profile shows (store/select.py select_heap)."""
    threshold = parse_temporary(args.temporary)
    if not has_lifetimes(profile):
        return f"{args.file}: {NO_LIFETIMES}\n"
    python = profile.python_upids() if args.lifetimes and not args.native else set()
    out = []
    by_process = read_lifetimes_by_process(profile, [p.info.upid for p in processes])  # one pass for all
    for p in processes:
        lives = by_process.get(p.info.upid, {})
        keep = lt.callsite_filter(profile, lives, focus, ignore)
        if keep is not None:
            lives = {cs: v for cs, v in lives.items() if keep(cs)}
        if args.sizes:
            out.append(render_sizes(profile, p, lives, args.top, per_stack=focus is not None))
        elif args.lifetimes:
            out.append(render_lifetimes(profile, p, lives, threshold, args.top, p.info.upid in python))
        else:
            out.append(render_temporary(profile, p, lives, threshold, args.top))
    return "\n".join(out)


def render_diff(profiles: Sequence[Profile], processes: Sequence[Process], labels: Sequence[str],
                args: argparse.Namespace) -> str:
    """`diff --view temporary`: per leaf function, the temporary bytes and allocations of the two
    profiles' processes, largest growths and shrinks first (lifetimes are whole runs: no dumps)."""
    threshold = parse_temporary(args.temporary)
    sides: list[dict[tuple[str, str], lt.LifetimeRow]] = []
    intervals = []
    for profile, p in zip(profiles, processes, strict=True):
        if not has_lifetimes(profile):
            return f"{profile.path}: {NO_LIFETIMES}\n"
        interval = process_interval(profile, p)
        intervals.append(interval)
        lives = read_lifetimes(profile, [p.info.upid])
        python = not args.native and p.info.upid in profile.python_upids()
        sides.append({(r.function, r.library): r for r in lt.lifetime_rows(profile, lives, threshold, interval,
                                                                            python)})
    a, b = sides
    ta, tb = (sum(r.temp_bytes for r in s.values()) for s in sides)
    lines = [f"temporary: {format_bytes(ta)} ({labels[0]}) -> {format_bytes(tb)} ({labels[1]}),"
             f" {'+' if tb >= ta else ''}{format_bytes(tb - ta)}",
             f"  {threshold_line(threshold, max(intervals))}", ""]
    keys = sorted(set(a) | set(b))
    changes = [(b[k].temp_bytes if k in b else 0) - (a[k].temp_bytes if k in a else 0) for k in keys]

    def est(side: dict[tuple[str, str], lt.LifetimeRow], k: tuple[str, str], interval: int) -> str:
        return _estimate(side[k].temp, interval) if k in side else "0"

    for title, sign in (("largest growths", 1), ("largest shrinks", -1)):
        part = sorted((kc for kc in zip(keys, changes, strict=True) if kc[1] * sign > 0),
                      key=lambda kc: (-abs(kc[1]), kc[0]))[:args.top]
        lines.append(f"{title}:")
        if not part:
            lines.append("  (none)")
        else:
            lines += _table(("change", "before", "after", "allocations before", "after", "function", "library"),
                            [(("+" if c > 0 else "") + format_bytes(c),
                              format_bytes(a[k].temp_bytes if k in a else 0), format_bytes(b[k].temp_bytes if k in b
                                                                                          else 0),
                              est(a, k, intervals[0]), est(b, k, intervals[1]), k[0], k[1]) for k, c in part],
                            left=2)
        lines.append("")
    return "\n".join(lines)


def share(part: Estimate, whole: Estimate) -> str:
    """part's share of whole in estimated allocations, at most 100%: part is a subset of whole's
    samples, but the two are estimated over different groupings of them (by lifetime, by size),
    so their ratio can pass 1 by the estimates' own error."""
    w = round(whole.value * 1000)
    return format_percent(min(round(part.value * 1000), w), w)
