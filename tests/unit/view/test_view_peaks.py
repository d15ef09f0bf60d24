"""view.peaks.distinct_lines: the summary's lines of the largest stacks tell themselves apart."""

from __future__ import annotations

from heapscope.view.peaks import SUMMARY_LINE, _shrink, distinct_lines

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


def test_a_line_of_long_names_fits_120_columns_keeping_its_ends() -> None:
    # GIVEN node's stack: JIT code, then V8's long C++ names down to the Buffer function
    path = ["node::Buffer::(anonymous namespace)::CreateUnsafeArrayBuffer(v8::Isolate*, unsigned long)",
            "v8::internal::FunctionCallbackArguments::Call(v8::internal::CallHandlerInfo)",
            "v8::internal::(anonymous namespace)::HandleApiCallHelper<false>(v8::internal::Isolate*)",
            "v8::internal::Builtin_HandleApiCall(int, unsigned long*, v8::internal::Isolate*)",
            "Builtins_CEntry_Return1_ArgvOnStack_BuiltinExit", "[unknown pid 14696]+0x7fda20006e4c", "main"]
    [(text, _)] = distinct_lines([(path, 5, 100)], top=3, frames=4)
    # THEN it fits what `record` leaves it (120 columns), with the JIT frame and the innermost frame
    assert len(text) <= SUMMARY_LINE, text
    assert text.startswith("… > [unknown pid 14696]+0x7fda20006e4c > … > ") and "CreateUnsafeArrayBuffer" in text, text


def test_lines_that_fitting_would_make_the_same_stay_whole() -> None:
    # GIVEN two stacks whose only difference is the middle of a long name in the middle of the line
    a = ["leaf_function_allocating", "x" * 30 + "A" + "y" * 30, *[f"frame_number_{i}" for i in range(4)]]
    b = ["leaf_function_allocating", "x" * 30 + "B" + "y" * 30, *[f"frame_number_{i}" for i in range(4)]]
    lines = distinct_lines([(a, 5, 10), (b, 5, 5)], top=3, frames=4)
    # THEN the two lines differ still
    assert lines[0][0] != lines[1][0], lines


def test_a_python_frames_file_and_line_are_kept_when_its_name_is_shortened() -> None:
    label = "a_function_with_a_long_descriptive_name_in_pandas (construction.py:718)"
    assert _shrink(label, 32).endswith(" (construction.py:718)") and "…" in _shrink(label, 32)
    assert _shrink("load (pd_job.py:5) ×3-4", 12) == "load (pd_job.py:5) ×3-4"
