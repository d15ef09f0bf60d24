"""view.names: function names elided to fit a column, the readable parts kept."""

from __future__ import annotations

import pytest

from heapscope.view.names import collapse, cut_middle, elide, without_return_type

REALLOC = ("void std::vector<std::pair<std::__cxx11::basic_string<char, std::char_traits<char>,"
           " std::allocator<char> >, long>, std::allocator<std::pair<std::__cxx11::basic_string<char,"
           " std::char_traits<char>, std::allocator<char> >, long> > >::_M_realloc_insert<long>"
           "(__gnu_cxx::__normal_iterator<std::pair<long, long>*, std::vector<long> >, long&&)")


def test_a_name_that_fits_is_kept_whole() -> None:
    assert elide("parse_input", 20) == "parse_input"
    assert elide(REALLOC, 1000) == REALLOC


@pytest.mark.parametrize(("width", "text"), [
    (80, "std::vector<…>::_M_realloc_insert<…>(__gnu_cxx::__normal_iterator<…>, long&&)"),
    (60, "std::vector<…>::_M_realloc_insert<…>(…)"),
    (37, "std::vector<…>::_M_realloc_insert<…>"),
    (20, "std::vect…_insert<…>"),
])
def test_templates_return_type_and_parameters_go_first(width: int, text: str) -> None:
    assert elide(REALLOC, width) == text
    assert len(elide(REALLOC, width)) <= width


def test_middle_namespaces_are_elided_before_the_cut() -> None:
    assert elide("outer::middle::inner::deepest::function_name(int)", 30) == "outer::…::function_name"


@pytest.mark.parametrize(("name", "text"), [
    ("operator new(unsigned long)", "operator new(unsigned long)"),
    ("unsigned long count()", "count()"),
    ("Foo::operator bool() const", "Foo::operator bool() const"),
    ("std::pair<A, B> f<int>(x y)", "f<int>(x y)"),
])
def test_the_return_type_goes_and_operators_stay(name: str, text: str) -> None:
    assert without_return_type(name) == text


def test_collapse_keeps_comparison_operators() -> None:
    assert collapse("bool operator<(A<int> const&, A<int> const&)") == "bool operator<(A<…> const&, A<…> const&)"
    assert collapse("f(int, long)", "(", ")") == "f(…)"


def test_cut_middle() -> None:
    assert cut_middle("abcdefghij", 5) == "ab…ij" and cut_middle("abc", 5) == "abc"
