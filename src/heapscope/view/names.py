"""Function names made to fit: C++ template arguments, return types, parameters and namespaces
elided in the middle, so a table fits a terminal and its location column stays on screen.

    void std::vector<std::pair<std::string, ...>, std::allocator<...> >::_M_realloc_insert<...>(...)
    -> std::vector<…>::_M_realloc_insert

Steps, each taken only while the name is still too wide: template arguments become `<…>`;
the return type goes; the parameters become `(…)`, then go; middle namespaces become `…`
(`a::…::f`); last, the middle of what is left is cut. `report --wide` keeps full names.
docs/views.md says the same for users.
"""

from __future__ import annotations

ELLIPSIS = "…"


def _groups(name: str, open_: str, close: str) -> list[tuple[int, int]]:
    """Spans [start, end] of the outermost `open_`...`close` groups (an `operator<` is no group)."""
    spans = []
    depth = 0
    start = 0
    for i, c in enumerate(name):
        if c == open_:
            if open_ == "<" and name[max(0, i - 8):i].endswith("operator"):
                continue
            if depth == 0:
                start = i
            depth += 1
        elif c == close and depth > 0:
            if close == ">" and name[max(0, i - 9):i].endswith("operator"):
                continue
            depth -= 1
            if depth == 0:
                spans.append((start, i))
    return spans


def template_spans(name: str) -> list[tuple[int, int]]:
    """Spans [start, end] of the outermost `<...>` groups of `name`."""
    return _groups(name, "<", ">")


def collapse(name: str, open_: str = "<", close: str = ">") -> str:
    """Every outermost `<...>` (or `(...)`) group of `name` as `<…>`; the name as it is when
    its brackets do not balance."""
    spans = _groups(name, open_, close)
    if not spans:
        return name
    out = []
    last = 0
    for start, end in spans:
        out.append(name[last:start + 1])
        out.append(ELLIPSIS if end > start + 1 else "")
        last = end
    out.append(name[last:])
    return "".join(out)


def without_return_type(name: str) -> str:
    """`void ns::f<…>(int)` -> `ns::f<…>(int)`: what follows the last blank outside brackets
    before the parameters, unless that blank is part of the name (`operator new`)."""
    depth = 0
    cut = -1
    for i, c in enumerate(name):
        if c == "(" and depth == 0 and i > 0:
            break  # the parameters: blanks in and after them (` const`) are not a return type's
        if c in "<(":
            depth += 1
        elif c in ">)" and depth > 0:
            depth -= 1
        elif c == " " and depth == 0 and not name[:i].endswith("operator"):
            cut = i
    return name if cut < 0 else name[cut + 1:]


def elide(name: str, width: int) -> str:
    """`name` at most `width` characters (module doc); as it is when it fits."""
    if len(name) <= width:
        return name
    steps = (
        lambda s: collapse(s),
        without_return_type,
        lambda s: collapse(s, "(", ")"),
        lambda s: s[:s.rfind("(")] if s.endswith(")") and "(" in s else s,
        _middle_namespaces,
    )
    for step in steps:
        name = step(name)
        if len(name) <= width:
            return name
    return cut_middle(name, width)


def _middle_namespaces(name: str) -> str:
    """`a::b::c::f` -> `a::…::f` (separators outside brackets only)."""
    depth = 0
    seps = []
    i = 0
    while i < len(name) - 1:
        c = name[i]
        if c in "<(":
            depth += 1
        elif c in ">)" and depth > 0:
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            seps.append(i)
            i += 2
            continue
        i += 1
    if len(seps) < 3:
        return name
    return name[:seps[0]] + "::" + ELLIPSIS + name[seps[-1]:]


def cut_middle(text: str, width: int) -> str:
    """`text` at most `width` characters, its middle cut to `…` (a command line, a path)."""
    if len(text) <= width:
        return text
    if width < 2:
        return text[:max(width, 0)]
    head = (width - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head):]
