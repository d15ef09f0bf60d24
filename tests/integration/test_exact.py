"""At sampling interval 1 every view of every call path is exact."""

from __future__ import annotations

import pytest
from hs_integration import Profile, Programs, Recorder, Recording, assert_exact, frame_matches


def _recorded_upid(rec: Recording, name: str) -> tuple[Profile, int]:
    assert rec.returncode == 0, rec.describe()
    profile = rec.profile()
    return profile, profile.only_upid(name)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unwinder", ["auto", "fp"])
def test_basic_every_entry_point_exact(programs: Programs, record: Recorder, unwinder: str) -> None:
    """malloc, free, realloc growth, calloc, posix_memalign, aligned_alloc, memalign,
    valloc and pvalloc on their own paths, at several depths. The programs keep frame
    pointers, so the frame-pointer unwinder must find every path too."""
    rec = record([programs.path("basic")], interval=1, extra=["--unwinder", unwinder])
    profile, upid = _recorded_upid(rec, "basic")
    assert_exact(profile, upid, programs.truth("basic"), context=rec.describe())


@pytest.mark.timeout(120)
def test_basic_process_facts(programs: Programs, record: Recorder) -> None:
    rec = record([programs.path("basic")], interval=1)
    profile, upid = _recorded_upid(rec, "basic")
    hp = profile.heapscope_process(upid)
    assert hp is not None, profile.describe_process(upid)
    assert hp["from_startup"] == 1
    assert not hp["disconnected"]
    assert not hp["client_error"], hp["client_error"]
    assert hp["unwinder"], "heapscope_process.unwinder should say which unwinder ran"


@pytest.mark.timeout(120)
def test_no_callsite_goes_negative(programs: Programs, record: Recorder) -> None:
    """Profiled from startup, no callsite can have freed more than it allocated."""
    rec = record([programs.path("basic")], interval=1)
    profile, upid = _recorded_upid(rec, "basic")
    negative = {cs: v for cs, v in profile.callsite_views(upid).items() if v.space < 0 or v.objects < 0}
    assert not negative, f"{negative}\n{profile.describe_process(upid)}"


@pytest.mark.timeout(120)
def test_cxx_new_delete_exact(programs: Programs, record: Recorder) -> None:
    rec = record([programs.path("cxx")], interval=1)
    profile, upid = _recorded_upid(rec, "cxx")
    assert_exact(profile, upid, programs.truth("cxx"), context=rec.describe())


@pytest.mark.timeout(120)
def test_cxx_leaf_is_operator_new_and_parent_is_caller(programs: Programs, record: Recorder) -> None:
    rec = record([programs.path("cxx")], interval=1)
    profile, upid = _recorded_upid(rec, "cxx")
    stacks = profile.stacks(upid)
    # libstdc++'s operator new[](unsigned long) is a bare `jmp` to operator new
    # (a tail call, no frame of its own), so new[] also shows operator new as leaf.
    expected_leaf = {
        "make_widgets": "operator new(unsigned long)",
        "churn_widgets": "operator new(unsigned long)",
        "make_arrays": "operator new(unsigned long)",
    }
    for caller, leaf in expected_leaf.items():
        mine = [s for s in stacks.values() if any(frame_matches(n, caller) for n in s)]
        assert mine, f"no callsite under {caller}\n{profile.describe_process(upid)}"
        for stack in mine:
            assert stack[0] == leaf and frame_matches(stack[1], caller), (
                f"stack under {caller} (leaf first): {stack}, expected [{leaf!r}, {caller}(), ...]"
            )


@pytest.mark.timeout(120)
def test_leaf_frame_is_the_function_that_called_malloc(programs: Programs, record: Recorder) -> None:
    """Our own client frames and malloc itself are stripped from the stack."""
    rec = record([programs.path("tiny")], interval=1)
    profile, upid = _recorded_upid(rec, "tiny")
    stacks = profile.stacks(upid)
    for fn in programs.truth("tiny"):
        mine = [s for s in stacks.values() if fn in s]
        assert mine, f"no callsite with {fn}\n{profile.describe_process(upid)}"
        for stack in mine:
            assert stack[0] == fn, f"leaf of a {fn} stack is {stack[0]!r}; stack leaf first: {stack}"
            assert "main" in stack[1:], f"{fn} stack does not reach main: {stack}"


@pytest.mark.timeout(120)
def test_callsite_tree_is_consistent(programs: Programs, record: Recorder) -> None:
    """depth 0 is a root with no parent; a child is exactly one deeper than its parent."""
    rec = record([programs.path("basic")], interval=1)
    profile, _ = _recorded_upid(rec, "basic")
    bad = profile.query(
        """
        SELECT c.id, c.depth, c.parent_id, p.depth AS parent_depth
        FROM stack_profile_callsite c LEFT JOIN stack_profile_callsite p ON p.id = c.parent_id
        WHERE (c.depth = 0 AND c.parent_id IS NOT NULL)
           OR (c.depth > 0 AND (p.id IS NULL OR p.depth != c.depth - 1))
        LIMIT 10
        """
    )
    assert not bad, [dict(r) for r in bad]
    dangling = profile.query(
        """
        SELECT a.callsite_id FROM heap_profile_allocation a
        LEFT JOIN stack_profile_callsite c ON c.id = a.callsite_id WHERE c.id IS NULL LIMIT 10
        """
    )
    assert not dangling, [dict(r) for r in dangling]


@pytest.mark.timeout(180)
def test_more_stacks_than_the_first_table_holds(programs: Programs, record: Recorder) -> None:
    """20,000 distinct paths (manystacks.c): most of their stack ids go to the client's big
    table (client/stacks.c: 2 MiB aligned, huge pages where the kernel has them). Each path is
    a callsite of its own, sent and booked exactly."""
    rec = record([programs.path("manystacks")], interval=1)
    profile, upid = _recorded_upid(rec, "manystacks")
    assert_exact(profile, upid, programs.truth("manystacks"), context=rec.describe())
    stacks = profile.stacks(upid)
    leaves = {tuple(s) for s in stacks.values() if s and frame_matches(s[0], "leaf_alloc")}
    assert len(leaves) == 20000, f"{len(leaves)} distinct paths to leaf_alloc, not 20000"
    hp = profile.heapscope_process(upid)
    assert hp is not None and not hp["client_error"], profile.describe_process(upid)
