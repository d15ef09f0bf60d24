"""`report --by-label K`: allocated and unreleased bytes per value of one allocation label,
with the stacks that hold the most under each (docs/labels.md). Bytes are the samples'
estimates, as every report's: exact at -i 1."""

from __future__ import annotations

from heapscope.errors import UsageError
from heapscope.store.alloc_labels import callsite_names, has_labels, label_values
from heapscope.store.reader import Profile
from heapscope.units import format_bytes

#: The row of the samples without the key (no labels, or other keys only).
NO_VALUE = "(no {key})"


def render_by_label(profile: Profile, key: str, heaps: list[str] | None, top: int) -> str:
    """The table of `key`'s values, largest unreleased first, each with its `top` stacks."""
    if not has_labels(profile):
        raise UsageError(f"{profile.path}: no allocation labels in this profile")
    per: dict[str, list[tuple[int, int, int]]] = {}
    for value, callsite, allocated, unreleased, _objects in label_values(profile, key, heaps):
        per.setdefault(value, []).append((callsite, allocated, unreleased))
    db = profile.sql_connection()
    # heap_profile_allocation as the heap views show it (store/select.py): every sample's rows.
    total = db.execute("SELECT COALESCE(SUM(CASE WHEN size > 0 THEN size ELSE 0 END), 0), COALESCE(SUM(size), 0)"
                       " FROM heap_profile_allocation").fetchone()
    lines = [f"by label {key} (unreleased at the end; allocated over the run):",
             f"  {'unreleased':>12} {'allocated':>12}  {key}"]
    sums = {v: (sum(r[2] for r in rows), sum(r[1] for r in rows)) for v, rows in per.items()}
    for value in sorted(per, key=lambda v: (-sums[v][0], -sums[v][1], v)):
        unreleased, allocated = sums[value]
        lines.append(f"  {format_bytes(unreleased):>12} {format_bytes(allocated):>12}  {value}")
        for callsite, alloc, unrel in sorted(per[value], key=lambda r: (-r[2], -r[1]))[:top]:
            names = " < ".join(callsite_names(profile, callsite))
            lines.append(f"  {format_bytes(unrel):>12} {format_bytes(alloc):>12}      {names}")
    rest_unreleased = int(total[1]) - sum(s[0] for s in sums.values())
    rest_allocated = int(total[0]) - sum(s[1] for s in sums.values())
    lines.append(f"  {format_bytes(rest_unreleased):>12} {format_bytes(rest_allocated):>12}  "
                 + NO_VALUE.format(key=key))
    return "\n".join(lines)
