"""view.tree: the merged tree and experimental_flamegraph rows on the known profile
(tests/unit/conftest.py). At ts 2000, upid 1, the merged tree in preorder is

    id  node                       own space  own alloc_space
    0   main                              0        0
    1     emit                            0        0
    2       malloc (site B)               0       30
    3     parse                           0        0
    4       malloc (site D)             300      300
    5       parse (site E)               16       16
    6         malloc (site A)           110      150
    7     prog+0x1a2b (site C)            8        8
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from heapscope.estimate import estimate_int
from heapscope.model import CallsiteId
from heapscope.store.lifetimes import Cell
from heapscope.store.reader import ViewValues, open_profile
from heapscope.view.tree import COLUMNS, build_tree, experimental_flamegraph, path_filter

NAMES = ["main", "emit", "malloc", "parse", "malloc", "parse", "malloc", "prog+0x1a2b"]


def test_columns_are_those_of_perfetto() -> None:
    assert COLUMNS == (
        "id", "ts", "upid", "profile_type", "focus_str", "depth", "name", "map_name", "count",
        "cumulative_count", "size", "cumulative_size", "alloc_count", "cumulative_alloc_count", "alloc_size",
        "cumulative_alloc_size", "parent_id", "source_file", "line_number")


def test_rows_merge_by_function_and_mapping(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        rows = experimental_flamegraph(prof, 2000, 1)
    assert [r.name for r in rows] == NAMES
    assert [r.parent_id for r in rows] == [None, 0, 1, 0, 3, 3, 5, 0]
    assert [r.depth for r in rows] == [0, 1, 2, 1, 2, 2, 3, 1]
    assert [r.size for r in rows] == [0, 0, 0, 0, 300, 16, 110, 8]
    assert [r.cumulative_size for r in rows] == [434, 0, 0, 426, 300, 126, 110, 8]
    assert [r.cumulative_alloc_size for r in rows] == [504, 30, 30, 466, 300, 166, 150, 8]
    assert [r.cumulative_count for r in rows] == [7, 0, 0, 6, 3, 3, 2, 1]
    assert [r.cumulative_alloc_count for r in rows] == [9, 1, 1, 7, 3, 4, 3, 1]
    assert rows[2].map_name.endswith("libc.so.6") and rows[0].map_name == "/usr/bin/prog"
    assert {(r.ts, r.upid, r.profile_type, r.focus_str) for r in rows} == {(2000, 1, "native", None)}


def test_earlier_dump(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        rows = experimental_flamegraph(prof, 1000, 1)
    assert rows[0].cumulative_size == 138 and rows[0].cumulative_alloc_size == 138


def test_focus_keeps_matches_ancestors_and_descendants(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        rows = experimental_flamegraph(prof, 2000, 1, focus_str="EMIT")
    assert [(r.id, r.name, r.alloc_size, r.cumulative_alloc_size) for r in rows] == [
        (0, "main", 0, 30), (1, "emit", 0, 30), (2, "malloc", 30, 30)]
    with open_profile(known_profile) as prof:
        rows = experimental_flamegraph(prof, 2000, 1, focus_str="pars")
    # parse and everything below it; main only as the path to it (no self value of its own)
    assert [r.id for r in rows] == [0, 3, 4, 5, 6]
    assert rows[0].cumulative_size == 426


def test_path_filter(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        tree = build_tree(prof, sorted(prof.callsite_values(1, 2000)))
    assert path_filter(tree, re.compile("emit"), None) == [False, True, True, False, False, False, False, False]
    assert path_filter(tree, None, re.compile("^parse$")) == [True, True, True, False, False, False, False, True]


def test_focus_means_one_thing_everywhere() -> None:
    # report --focus and sql --focus: a regular expression searched case-insensitively, so a
    # plain word is Perfetto's case-insensitive substring
    from heapscope.errors import UsageError
    from heapscope.view.tree import focus_pattern

    assert focus_pattern("EMIT").search("emit_node") and focus_pattern("^pars").search("Parse")
    assert not focus_pattern("^emit$").search("emit_node")
    with pytest.raises(UsageError, match="--focus '\\(': not a regular expression"):
        focus_pattern("(")


def test_every_views_own_values_in_one_pass_are_each_views(known_profile: Path) -> None:
    """desampled_selfs at interval 1 (one pass over the callsites, for a diff's sides and the tree
    rows) gives what self_values gives view by view, callsites of the same node summed."""
    from heapscope.model import VIEWS

    with open_profile(known_profile) as prof:
        for upid, ts in ((1, 2000), (1, 1000)):
            values = prof.callsite_values(upid, ts)
            tree = build_tree(prof, sorted(values))
            assert tree.desampled_selfs(values, 1) == {v: tree.self_values(values, v) for v in VIEWS}
            assert list(tree.desampled_selfs(values, 1)) == list(VIEWS)


def _selfs_in_python(node_of: dict[CallsiteId, int], values: dict[CallsiteId, ViewValues], n: int,
                     interval: int) -> tuple[list[int], ...]:
    """desampled_selfs' sums written out as estimate.py defines them, for the C loop to match."""
    sums = [[0] * n for _ in range(4)]
    for cs, v in values.items():
        node = node_of.get(cs)
        if node is None:
            continue
        sums[0][node] += v.space
        sums[2][node] += v.alloc_space
        sums[1][node] += estimate_int(v.objects, v.space, interval, v.real_space) if interval > 1 else v.objects
        sums[3][node] += estimate_int(v.alloc_objects, v.alloc_space, interval, v.alloc_real_space) \
            if interval > 1 else v.alloc_objects
    return tuple(sums)


def test_desampled_selfs_in_c_are_estimate_ints_sums() -> None:
    """The C loop (_selfs.c) gives estimate_int's sums exactly: real bytes known or not, negative
    (freed) rows, allocations of at least the interval, numbers past 2^53 (handed to Python) and
    callsites outside the tree; a sum past 64 bits gives None."""
    from heapscope.view._paths import desampled_selfs

    rng = random.Random(7)
    checked = 0
    for case in range(300):
        n = rng.randint(1, 40)
        node_of = {CallsiteId(cs): rng.randrange(n) for cs in range(0, 120, 2)}
        values: dict[CallsiteId, ViewValues] = {}
        for cs in range(rng.randint(0, 120)):
            samples = 2**54 + 1 if rng.random() < 0.01 else rng.choice([0, 1, 2, 3, 7, 1000, -1, -5])
            size = abs(samples) * rng.choice([1, 3, 16, 4096, 5000, 100_000]) * (1 if samples >= 0 else -1)
            real = 2**60 if rng.random() < 0.01 else \
                rng.choice([None, 0, abs(size) // 2 + 1, abs(size), rng.randint(1, 10**6)])
            if abs(samples) > 2**53:  # past C's exact range: handed to estimate_int's real-bytes branch
                real = abs(size) // 3 + 1
            if real is not None and samples < 0 and real:
                real = -real
            alloc_real = None if real is None else abs(real)
            values[CallsiteId(cs)] = ViewValues(size, samples, abs(size), abs(samples), real, alloc_real)
        for interval in (1, 2, 4096, 512 * 1024, 2**54):
            want = _selfs_in_python(node_of, values, n, interval)
            fits = all(-2**63 <= x < 2**63 for sums in want for x in sums)
            got = desampled_selfs(node_of, values, n, interval, estimate_int)
            assert got == (want if fits else None), (case, interval)
            checked += fits
    assert checked > 1000, checked  # most cases fit 64 bits: the C sums were compared
    one, two = CallsiteId(1), CallsiteId(2)
    big = {one: ViewValues(2**62, 1, 2**62, 1, 2**62, 2**62), two: ViewValues(2**62, 1, 2**62, 1, 2**62, 2**62)}
    assert desampled_selfs({one: 0, two: 0}, big, 1, 4096, estimate_int) is None
    with pytest.raises(IndexError):
        desampled_selfs({one: 5}, {one: ViewValues(1, 1, 1, 1)}, 2, 4096, estimate_int)


def _size_cells_in_python(node_of: dict[CallsiteId, int], items: list[tuple[CallsiteId, dict[tuple[int, int], Cell]]],
                          interval: int) -> list[int]:
    """The flamegraph's "sizes" list as view/flamegraph_lifetimes.py wrote it before _selfs.c."""
    out: list[int] = []
    for cs, cells in items:
        node = node_of.get(cs)
        if node is not None:
            for (lo, _hi), (count, size, real) in sorted(cells.items()):
                out += (node + 1, max(lo, 1).bit_length() - 1, estimate_int(count, size, interval, real), size)
    return out


def test_size_cells_in_c_are_the_python_loops_list() -> None:
    """size_cells (_selfs.c) gives the Python loop's list exactly: cells in (lo, hi) order
    whatever the dict's, size classes of 0, 1 and 2^40, real bytes unknown (estimate_int called),
    numbers past 2^53 and callsites outside the tree; None for a value past 64 bits."""
    from heapscope.view._paths import size_cells

    rng = random.Random(11)
    checked = 0
    for case in range(300):
        node_of = {CallsiteId(cs): rng.randrange(50) for cs in range(0, 60, 3)}
        items = []
        for cs in sorted(rng.sample(range(60), rng.randint(0, 20))):
            cells: dict[tuple[int, int], Cell] = {}
            for _ in range(rng.randint(1, 6)):
                lo = 2**62 if rng.random() < 0.01 else rng.choice([0, 1, 2, 3, 16, 4096, 2**40])
                count = 2**54 + 1 if rng.random() < 0.01 else rng.choice([1, 2, 7, 1000])
                size = count * max(lo, 1)
                real = rng.choice([None, 0, size // 2 + 1, size, rng.randint(1, 10**6)])
                cells[(lo, 2 * lo)] = Cell(count, size, real)  # type: ignore[arg-type]
            items.append((CallsiteId(cs), cells))
        # C takes the keys, samples and real bytes of the callsites shown as 64-bit integers
        fits = all(-2**63 <= x < 2**63 for cs, cells in items if cs in node_of for k, c in cells.items()
                   for x in (*k, c.samples, c.real or 0))
        for interval in (1, 2, 4096, 512 * 1024):
            want = _size_cells_in_python(node_of, items, interval) if fits else None
            assert size_cells(node_of, items, interval, estimate_int) == want, (case, interval)
            checked += fits
    assert checked > 600, checked
    past = [(CallsiteId(0), {(2**64, 2**65): Cell(1, 2**64, 2**64)})]
    assert size_cells({CallsiteId(0): 0}, past, 4096, estimate_int) is None


def test_sparse_pairs_in_c_are_the_gaps_and_values_of_the_non_zero_nodes() -> None:
    """sparse (_selfs.c), the page's encoding of a per-node list: (gap, value) pairs of the
    non-zero values, the first gap counted from node 0, node i of the list being node i + shift."""
    from heapscope.view._paths import sparse

    def in_python(values: list[int], shift: int) -> list[int]:
        out: list[int] = []
        last = 0
        for i, v in enumerate(values):
            if v:
                out += (i + shift - last, v)
                last = i + shift
        return out

    rng = random.Random(5)
    for _ in range(300):
        values = [rng.choice([0, 0, 0, 0, 1, -3, 2**70, 4096]) for _ in range(rng.randint(0, 60))]
        for shift in (0, 1, 7):
            assert sparse(values, shift) == in_python(values, shift)
    assert sparse([0, 0, 5, 0, -2], 1) == [3, 5, 2, -2] and sparse([], 1) == [] and sparse([0, 0], 0) == []
