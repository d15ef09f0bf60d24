"""Callgrind's output format, read once for every benchmark driver that counts instructions,
and the stats of the profile each of them records beside it (`profile_stats`).

    from callgrind import parse          # benchmarks/ on sys.path (the drivers run from there)
    prof = parse(Path("callgrind.out"))
    key = prof.find("libheapscope", "hs_record_alloc_slow")
    prof.calls[key], prof.get(prof.inclusive, key, "Ir")

The format is https://valgrind.org/docs/manual/cl-format.html: names compressed
as "(id) name" on first use, position columns ("positions:", one by default),
then one column per event ("events:"). A cost line after "calls=" is the
inclusive cost of that call (charged to the callee named by "cfn="); any
other cost line is the current function's own. Every event is kept, so the
same reader serves Ir-only runs and --cache-sim runs.
"""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from pathlib import Path

Key = tuple[str, str]  # (object file, function)

_NAMED = re.compile(r"^\((\d+)\)(?: (.*))?$")


class Callgrind:
    """Per-function exclusive costs, inclusive costs of the calls made to it (a vector per
    event, in `events` order), call counts, and the whole run's totals."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.totals: list[int] = []
        self.exclusive: dict[Key, list[int]] = {}
        self.inclusive: dict[Key, list[int]] = {}
        self.calls: dict[Key, int] = defaultdict(int)

    def find(self, obj: str, name: str) -> Key:
        """The key of function `name` in an object whose path contains `obj` (("", name) if none)."""
        for key in list(self.exclusive) + list(self.calls):
            if key[1] == name and obj in key[0]:
                return key
        return ("", name)

    def ev(self, vec: list[int], event: str) -> int:
        """`event`'s figure in a cost vector of this run (0 when not recorded)."""
        if event not in self.events:
            return 0
        i = self.events.index(event)
        return vec[i] if i < len(vec) else 0

    def get(self, table: dict[Key, list[int]], key: Key, event: str) -> int:
        return self.ev(table.get(key, []), event)

    def total(self, event: str = "Ir") -> int:
        return self.ev(self.totals, event)


def _add(table: dict[Key, list[int]], key: Key, costs: list[int]) -> None:
    row = table.setdefault(key, [0] * len(costs))
    if len(row) < len(costs):
        row.extend([0] * (len(costs) - len(row)))
    for i, c in enumerate(costs):
        row[i] += c


def parse(path: Path) -> Callgrind:
    prof = Callgrind()
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}, "fl": {}}
    npos = 1

    def name(kind: str, value: str) -> str:
        m = _NAMED.match(value)
        if not m:
            return value
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), value)

    ob = cob = ""
    fn: Key = ("", "")
    callee: Key | None = None
    for line in path.read_text(errors="replace").splitlines():
        if not line or line[0] == "#":
            continue
        if line.startswith("events:"):
            prof.events = line.split()[1:]
            continue
        if line.startswith(("summary:", "totals:")):
            prof.totals = [int(x) for x in line.split()[1:]]
            continue
        if line.startswith("positions:"):
            npos = len(line.split()) - 1
            continue
        head, _, rest = line.partition("=")
        if head == "ob":
            ob = name("ob", rest)
        elif head == "fn":
            fn = (ob, name("fn", rest))
            cob = ob
        elif head == "cob":
            cob = name("ob", rest)
        elif head == "cfn":
            callee = (cob, name("fn", rest))
        elif head in ("cfi", "cfl", "fl", "fi", "fe"):
            name("fl", rest)
        elif head == "calls":
            if callee is not None:
                prof.calls[callee] += int(rest.split()[0])
        elif line[0] in "0123456789+-*":
            costs = [int(x) for x in line.split()[npos:]]
            if callee is not None:
                _add(prof.inclusive, callee, costs)
                callee = None
                cob = ob
            else:
                _add(prof.exclusive, fn, costs)
    return prof


def profile_stats(db: Path) -> dict[str, int]:
    """The `stats` table of a heapscope profile, summed over processes ({} when there is none),
    with "frees:HEAP": the sampled frees sent per heap (the exit dump's negative rows)."""
    stats: dict[str, int] = {}
    if not db.exists():
        return stats
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for n, v in con.execute("SELECT name, sum(value) FROM stats GROUP BY name"):
            stats[str(n)] = int(v or 0)
        for heap, v in con.execute("SELECT heap_name, -sum(count) FROM heap_profile_allocation "
                                   "WHERE count < 0 GROUP BY heap_name"):
            stats["frees:" + str(heap)] = int(v or 0)
    finally:
        con.close()
    return stats
