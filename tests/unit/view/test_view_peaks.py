"""view.peaks.distinct_lines: the summary's lines of the largest stacks tell themselves apart."""

from __future__ import annotations

from heapscope.view.peaks import distinct_lines

INNER = ["xmalloc_r", "alloc_entry", "grow", "insert"]  # the same four innermost frames


def test_stacks_with_the_same_innermost_frames_show_where_they_differ() -> None:
    # GIVEN git's two stacks: the same four innermost frames, different commands further out
    big = [*INNER, "add_object", "cmd_pack_objects", "run_builtin", "main"]
    small = [*INNER, "add_object", "cmd_index_pack", "run_builtin", "main"]
    # WHEN the summary's lines are made, 4 frames each
    lines = distinct_lines([(big, None, 87 << 20), (small, None, 5 << 20)], top=3, frames=4)
    # THEN each names its command, and the two lines differ
    assert lines == [("… > cmd_pack_objects > … > insert > grow > alloc_entry > xmalloc_r", 87 << 20),
                     ("… > cmd_index_pack > … > insert > grow > alloc_entry > xmalloc_r", 5 << 20)]


def test_stacks_that_read_the_same_are_one_line_their_bytes_summed() -> None:
    a = ["parse", "main"]
    lines = distinct_lines([(a, None, 10), (["emit", "main"], None, 7), (list(a), None, 5)], top=3, frames=4)
    assert lines == [("main > parse", 15), ("main > emit", 7)]


def test_the_deepest_frame_of_the_programs_own_code_is_shown() -> None:
    # GIVEN a stack whose innermost frames are all in a library, the program's code at position 5
    path = ["std::__detail::_Hashtable_alloc::_M_allocate_node", "std::_Hashtable::_M_emplace",
            "std::_Hashtable::emplace", "std::unordered_map::emplace", "std::unordered_map::operator[]",
            "Index::add", "main"]
    [(text, _)] = distinct_lines([(path, 5, 100)], top=3, frames=4)
    assert text.startswith("… > Index::add > … > std::unordered_map::emplace"), text


def test_shallow_stacks_are_shown_whole() -> None:
    assert distinct_lines([(["leaf", "main"], None, 1)], top=3, frames=4) == [("main > leaf", 1)]
