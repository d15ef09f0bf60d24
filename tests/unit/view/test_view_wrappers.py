"""view.wrappers: which names are allocator wrappers, and how a fold rewrites callsites."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from heapscope.errors import UsageError
from heapscope.model import CallsiteId, Frame, FrameId, Mapping, MappingId
from heapscope.store.paths import stack_paths
from heapscope.store.reader import open_profile
from heapscope.store.writer import ProfileWriter
from heapscope.view.wrappers import (
    UNION_AFTER,
    WRAPPERS,
    WrapperPattern,
    _fold,
    base_name,
    fold_line,
    fold_wrappers,
    is_wrapper,
    wrapper_pattern,
)


@pytest.mark.parametrize(("name", "base"), [
    ("operator new(unsigned long)", "operator new"),
    ("operator new[](unsigned long, std::align_val_t)", "operator new[]"),
    ("xmalloc.part.0", "xmalloc"),
    ("zmalloc_usable(unsigned long, unsigned long*) [clone .constprop.0]", "zmalloc_usable"),
    ("Foo::operator()(int) const", "Foo::operator()"),
    ("std::vector<int, std::allocator<int> >::_M_realloc_insert(int const&)",
     "std::vector<int, std::allocator<int> >::_M_realloc_insert"),
])
def test_base_name_drops_parameters_and_clone_suffixes(name: str, base: str) -> None:
    assert base_name(name) == base


FOLDED = [
    "xmalloc", "xcalloc", "xrealloc", "xstrdup", "zmalloc_usable", "ztrymalloc_usable_internal", "zcalloc",
    "sqlite3Malloc", "sqlite3MemMalloc", "sqlite3DbMallocRawNN", "sqlite3_malloc64", "g_malloc0", "g_malloc_n",
    "PyMem_Malloc", "PyObject_Malloc", "_PyObject_GC_New", "operator new(unsigned long)",
    "operator new[](unsigned long)", "__libc_malloc", "je_malloc", "tc_newarray",
    "std::__new_allocator<char>::allocate(unsigned long, void const*)",
    # seen on real programs: gcc's cc1 (its GC's entry points, vec's reserve, obstacks), binutils' as,
    # node's Buffer allocations, a class's own operator new
    "ggc_internal_alloc(unsigned long, void (*)(void*), unsigned long, unsigned long)",
    "ggc_internal_cleared_alloc(unsigned long, void (*)(void*), unsigned long, unsigned long)",
    "va_heap::reserve<int>(vec<int, va_heap, vl_embed>*&, unsigned int, bool)",
    "vec<int, va_heap, vl_ptr>::reserve(unsigned int, bool)", "_obstack_newchunk", "bfd_zalloc", "bfd_alloc",
    "_objalloc_alloc", "node::NodeArrayBufferAllocator::AllocateUninitialized(unsigned long)",
    "v8::internal::BackingStore::Allocate(v8::internal::Isolate*, unsigned long, v8::internal::SharedFlag,"
    " v8::internal::InitializedFlag)", "v8::internal::AllocAtLeastWithRetry(unsigned long)",
    "v8::internal::Malloced::operator new(unsigned long)",
    # node's V8 pages in the mmap heap: the commit and the chunk allocator down to it
    "v8::base::OS::SetPermissions(void*, unsigned long, v8::base::OS::MemoryPermission)",
    "v8::internal::MemoryAllocator::AllocateAlignedMemory(unsigned long, unsigned long, unsigned long,"
    " v8::internal::AllocationSpace, v8::internal::Executability, void*, v8::internal::VirtualMemory*)",
    "v8::internal::MemoryAllocator::AllocateLargePage(v8::internal::LargeObjectSpace*, unsigned long,"
    " v8::internal::Executability)",
]


@pytest.mark.parametrize("name", FOLDED)
def test_the_allocator_wrappers_are_folded(name: str) -> None:
    assert is_wrapper(name)


@pytest.mark.parametrize("name", [
    "main", "parse_input", "__libc_start_main", "xmalloc_stats", "std::vector<int>::_M_realloc_insert",
    "operator delete(void*)", "sqlite3VdbeExec", "libsqlite3.so+0x1234",
    # growing a container is the caller's decision, as std::vector's _M_realloc_insert
    "vec<int, va_heap, vl_ptr>::safe_grow_cleared(unsigned int, bool)",
    "node::Buffer::New(v8::Isolate*, unsigned long)", "htab_find_slot_with_hash",
    # the space that grew is the row a V8 page is booked to
    "v8::internal::NewLargeObjectSpace::AllocateRaw(int)", "v8::internal::SemiSpace::GrowTo(unsigned long)",
])
def test_code_that_does_more_than_pass_an_allocation_through_is_not(name: str) -> None:
    assert not is_wrapper(name)


LIBRARIES = ("libc.so.6", "libstdc++.so.6", "libglib-2.0.so.0", "libsqlite3.so.0")


def _exported_names() -> list[str]:
    """The base names of the functions the system's libc, libstdc++, glib and sqlite export."""
    names: set[str] = set()
    for lib in LIBRARIES:
        path = Path("/usr/lib/x86_64-linux-gnu") / lib
        out = subprocess.run(["nm", "-D", "-C", "--defined-only", str(path)], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        # `0000000000098930 T malloc@@GLIBC_2.2.5`: the name without its version
        names.update(base_name(line.split(" ", 2)[2].split("@")[0]) for line in out.splitlines()
                     if line.count(" ") >= 2)
    return sorted(names)


def test_each_familys_words_are_in_every_name_it_matches() -> None:
    # GIVEN ~9k real function names and the wrappers above, and the families' expressions as one
    union = re.compile("|".join(f"(?:{regex})" for regex, _words in WRAPPERS))
    names = _exported_names() + [base_name(name) for name in FOLDED]
    assert len(names) > 5000
    by_words = WrapperPattern(WRAPPERS, union_after=len(names))  # every name through the words
    # THEN the words skip no family a name matches
    matched = [name for name in names if union.fullmatch(name)]
    assert len(matched) > 60  # malloc, memalign, g_malloc0, sqlite3_malloc64, operator new, xmalloc, ...
    assert [name for name in names if by_words.fullmatch(name)] == matched


def test_a_few_names_compile_only_the_families_whose_words_they_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    real = re.compile

    def counted(regex: str, *flags: int) -> re.Pattern[str]:
        compiled.append(regex)
        return real(regex, *flags)

    monkeypatch.setattr(re, "compile", counted)
    pattern = wrapper_pattern()
    assert pattern is not None
    assert pattern.fullmatch("xmalloc") and not pattern.fullmatch("main") and not pattern.fullmatch("parse_args")
    # xmalloc ends with "alloc": libc's family is tried and then xmalloc's matches; main holds no word
    assert len(compiled) == 2
    # AND a word only where every match holds it: ls's libc names compile nothing more
    assert not any(pattern.fullmatch(n) for n in ("_IO_doallocbuf", "set_binding_values", "__nss_action_allocate"))
    assert len(compiled) == 2
    # AND past UNION_AFTER names one expression of all the families answers, the same
    for i in range(UNION_AFTER):
        pattern.fullmatch(f"f{i}")
    assert pattern.fullmatch("g_malloc0") and not pattern.fullmatch("g_main_loop_run")
    assert len(compiled) == 3 and all(regex in compiled[-1] for regex, _words in WRAPPERS)


def test_fold_adds_a_projects_wrappers_and_keep_turns_the_list_off() -> None:
    assert is_wrapper("pool_alloc", wrapper_pattern(extra=["pool_.*"]))
    assert not is_wrapper("xmalloc", wrapper_pattern(keep=True, extra=["pool_.*"]))
    assert wrapper_pattern(keep=True) is None
    with pytest.raises(UsageError, match="--fold"):
        wrapper_pattern(extra=["("])


def test_a_folded_callsite_takes_its_callers_frame_and_parent() -> None:
    # GIVEN main(1) > parse(2) > xstrdup(3) > xmalloc(4), and main > xmalloc(5), and a stack of wrappers only (6)
    c = CallsiteId
    f = FrameId
    parent = {c(1): None, c(2): c(1), c(3): c(2), c(4): c(3), c(5): c(1), c(6): None}
    frame = {c(1): f(10), c(2): f(20), c(3): f(30), c(4): f(40), c(5): f(40), c(6): f(40)}
    # WHEN xstrdup and xmalloc are folded
    folded, rows = _fold({cs: (parent[cs], frame[cs]) for cs in parent}, {f(30): "xstrdup", f(40): "xmalloc"})
    by_id = {int(r[0]): r[1:] for r in rows}
    # THEN both wrappers of the first stack become parse, under main, at parse's depth
    assert by_id[3] == (1, 1, 20) and by_id[4] == (1, 1, 20)
    # AND main's own xmalloc call becomes main, a root; the stack of wrappers only stays as it is
    assert by_id[5] == (0, None, 10) and by_id[6] == (0, None, 40)
    assert by_id[1] == (0, None, 10) and by_id[2] == (1, 1, 20)
    assert folded == {"xstrdup", "xmalloc"}


def test_a_parent_cycle_ends_the_walk() -> None:
    c, f = CallsiteId, FrameId
    folded, rows = _fold({c(1): (c(2), f(1)), c(2): (c(1), f(1))}, {f(1): "xmalloc"})
    assert sorted(r[0] for r in rows) == [1, 2] and not folded


# main(1) parse(2) xmalloc(3) xstrdup(4) callback(5): every place a wrapper can be in a stack
TREE = [(1, None, 1), (2, 1, 2), (3, 2, 3), (4, 2, 4), (5, 4, 3), (6, 5, 5), (7, 6, 3), (8, 6, 2),
        (9, 1, 3), (10, None, 3), (11, 10, 4), (12, 11, 5), (13, 12, 3), (14, 3, 3)]


def folded_table(tmp_path: Path, tree: list[tuple[int, int | None, int]]) -> tuple[list[str], list[tuple[int, ...]]]:
    path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("ab" * 20, 0x1000, 0, 0x5000, 0x7000, 0x4000, "/bin/demo"))])
    names = ["main", "parse", "xmalloc", "xstrdup", "callback"]
    w.add_frames([(i + 1, Frame(MappingId(1), 0x1100 + i, name)) for i, name in enumerate(names)])
    w.add_callsites([(cs, 0, par, fid) for cs, par, fid in tree])
    w.close()
    profile = open_profile(path)
    folded = fold_wrappers(profile)
    profile.callsites_in_sql()
    rows = profile.sql_connection().execute(
        "SELECT id, parent_id, frame_id FROM temp.stack_profile_callsite ORDER BY id").fetchall()
    assert sorted((int(cs), par, fid) for cs, (par, fid) in profile.callsites().items()) == rows
    return folded, rows


def test_the_fold_in_c_gives_what_the_walk_does(tmp_path: Path) -> None:
    # GIVEN stacks with wrappers at the leaf, in a chain, above other code, at the root, and
    # a parent that does not exist; one profile numbered parent first, one not
    damaged = [*TREE, (15, 99, 3), (16, 15, 2)]
    reordered = [(100 - cs, None if par is None else 100 - par, fid) for cs, par, fid in damaged]
    for tree in (damaged, reordered):
        # WHEN the fold runs on the profile
        folded, rows = folded_table(tmp_path, tree)
        # THEN its callsites are the walk's of the whole table
        callsites = {CallsiteId(cs): (None if par is None else CallsiteId(par), FrameId(fid)) for cs, par, fid in tree}
        names, expected = _fold(callsites, {FrameId(3): "xmalloc", FrameId(4): "xstrdup"})
        assert rows == sorted((cs, par, fid) for cs, _, par, fid in expected)
        assert folded == sorted(names) == ["xmalloc", "xstrdup"]
        # AND parse's xmalloc reads parse, under main
        main, xmalloc = (1, 3) if tree is damaged else (99, 97)
        assert (xmalloc, main, 2) in rows


@pytest.mark.parametrize("seed", range(40))
def test_the_fold_in_c_is_the_walk_on_random_trees(seed: int) -> None:
    """store.tree.fold_tree (C) against the walk above, on trees numbered as `record` numbers
    them (dense from 1) and not (gaps, ids below 0), with dangling parents."""
    import random

    from heapscope.store.tree import fold_tree

    rng = random.Random(seed)
    start, step = rng.choice([(1, 1), (-50, 1), (3, 7), (10**12, 1000)])
    ids = [CallsiteId(start + k * step) for k in range(rng.randrange(1, 300))]
    callsites: dict[CallsiteId, tuple[CallsiteId | None, FrameId]] = {}
    for k, cs in enumerate(ids):
        roll = rng.random()
        parent = None if k == 0 or roll < 0.1 else CallsiteId(cs - 1 - step // 2) if roll < 0.15 and step > 1 \
            else ids[rng.randrange(max(0, k - 20), k)]
        callsites[cs] = (parent, FrameId(rng.randrange(1, 7)))
    wrappers = {FrameId(3): "xmalloc", FrameId(4): "xstrdup"}
    got = fold_tree(callsites, set(wrappers))
    assert got is not None
    moved, depths, frames = got
    names, expected = _fold(callsites, wrappers)
    assert {wrappers[f] for f in frames} == names
    folded = {**callsites, **moved}
    assert folded == {cs: (par, fid) for cs, _, par, fid in expected}
    depth = {cs: d for cs, d, _, _ in expected}
    assert list(moved) == sorted(moved) and [depth[cs] for cs in moved] == depths
    # only what moved: a callsite left out keeps its parent and frame
    assert all(callsites[cs] == folded[cs] for cs in callsites if cs not in moved)


def test_the_fold_in_c_leaves_trees_not_numbered_parent_first_to_the_walk() -> None:
    from heapscope.store.tree import fold_tree

    c, f = CallsiteId, FrameId
    assert fold_tree({c(2): (None, f(1)), c(1): (c(2), f(3))}, {f(3)}) is None  # a parent after its child
    assert fold_tree({c(1): (c(1), f(3))}, {f(3)}) is None  # its own parent
    assert fold_tree({c(2): (None, f(1)), c(1): (None, f(3))}, {f(3)}) is None  # ids not in order
    assert fold_tree({}, {f(3)}) == ({}, [], set())


def test_the_header_line_names_the_folded_wrappers() -> None:
    assert fold_line([]) == ""
    assert fold_line(["xcalloc", "xmalloc"]) == (
        "wrappers folded into their callers: xcalloc, xmalloc (--keep-wrappers shows them)")
    many = fold_line([f"wrapper_function_{i}" for i in range(10)])
    assert len(many) <= 120 and many.endswith(" more (--keep-wrappers shows them)"), many
    assert fold_line(["std::__new_allocator<A>::allocate", "std::__new_allocator<B>::allocate"], 50) == (
        "wrappers folded into their callers: std::__new_allocator<A>::allocate and 1 more (--keep-wrappers shows them)")


def test_every_read_sees_the_fold_until_it_is_undone(tmp_path: Path) -> None:
    # GIVEN the tree above, numbered parents first as `record` writes it
    path = tmp_path / "p.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("ab" * 20, 0x1000, 0, 0x5000, 0x7000, 0x4000, "/bin/demo"))])
    w.add_frames([(i + 1, Frame(MappingId(1), 0x1100 + i, name))
                  for i, name in enumerate(["main", "parse", "xmalloc", "xstrdup", "callback"])])
    w.add_callsites([(cs, 0, par, fid) for cs, par, fid in TREE])
    w.close()
    callsites = {CallsiteId(cs): (None if par is None else CallsiteId(par), FrameId(fid)) for cs, par, fid in TREE}
    _, expected = _fold(callsites, {FrameId(3): "xmalloc", FrameId(4): "xstrdup"})
    with open_profile(path) as profile:
        unfolded = dict(profile.callsites())
        # WHEN the wrappers are folded
        fold_wrappers(profile)
        # THEN the callsite tree and the SQL walks read the folded stacks
        assert profile.callsites() == {cs: (par, fid) for cs, _, par, fid in expected}
        assert [f.name if f else "?" for f in profile.stack_frames(CallsiteId(7), 9)] == ["callback", "parse", "main"]
        assert [p.info.name if p.info else "?" for p in stack_paths(profile, [CallsiteId(3)], 9)[CallsiteId(3)]] == [
            "parse", "main"]
        # AND once they are kept again, the profile's own rows are back
        fold_wrappers(profile, keep=True)
        assert profile.callsites() == unfolded
        assert [f.name if f else "?" for f in profile.stack_frames(CallsiteId(3), 9)] == ["xmalloc", "parse", "main"]


def _damaged(tmp_path: Path, column: str, bad: str) -> Path:
    """main > xmalloc > main with `bad` in callsite 1's `column`."""
    import sqlite3

    path = tmp_path / "bad.db"
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping("", 0, 0, 0x5000, 0x7000, 0, "/bin/demo"))])
    w.add_frames([(i + 1, Frame(MappingId(1), 0x1100 + i, name)) for i, name in enumerate(["main", "xmalloc"])])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 1)])
    w.close()
    db = sqlite3.connect(path)
    db.execute(f"UPDATE stack_profile_callsite SET {column} = {bad} WHERE id = 1")
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize("bad", ["''", "'x'", "2.5", "x'00'"])
def test_a_frame_of_the_wrong_type_above_a_wrapper_is_damage(tmp_path: Path, bad: str) -> None:
    """Found by the readers fuzz target: text in the frame_id of a wrapper's caller's callsite
    ended the fold in ValueError; the profile is said to be damaged, in one line."""
    from heapscope.errors import ProfileError

    with open_profile(_damaged(tmp_path, "frame_id", bad)) as profile, pytest.raises(ProfileError,
                                                                                     match="corrupt profile"):
        fold_wrappers(profile)


@pytest.mark.parametrize("bad", ["9223372036854775807", "'18446744073709551615'"])
def test_the_fold_gives_depths_of_its_own_whatever_the_table_says(tmp_path: Path, bad: str) -> None:
    """Found by the readers fuzz target: a depth of 2^63 - 1 above a wrapper ended the fold in
    OverflowError (its child's depth, one more, did not fit an INTEGER). The fold counts depths
    from the parents now; the table's are not read."""
    with open_profile(_damaged(tmp_path, "depth", bad)) as profile:
        assert fold_wrappers(profile) == ["xmalloc"]
        assert profile.callsites() == {1: (None, 1), 2: (None, 1), 3: (1, 1)}
        profile.callsites_in_sql()
        assert profile.sql_connection().execute(
            "SELECT id, depth, parent_id, frame_id FROM temp.heapscope_callsite_overlay ORDER BY id").fetchall() == [
            (2, 0, None, 1), (3, 1, 1, 1)]

