"""The maps are true: the package docstring's folder list, each part's "May import:" line, and
the direction of every import are checked against the code's real import graph.

A part is a folder of src/heapscope (a package) or one of its top-level modules (model.py,
errors.py, ...). Each part's docstring (the package's __init__.py, or the module's own) has a
line `May import: heapscope.a, heapscope.b.c.` (or `May import: nothing of heapscope.`) naming
exactly what of heapscope its modules import: every import of another part must be named there,
and every name there must be imported. An import counts wherever it is (at module level or
inside a function: a lazy import still runs), except under `if TYPE_CHECKING:` (never run).
The graph of parts has no cycle, nor has the graph of modules: every import points down.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "heapscope"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. heapscope.view.report
    target: str  # the imported module (not an attribute), e.g. heapscope.store.reader
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the package, by name; the C extensions by their .pyi stubs."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py*")):
        if path.suffix in (".py", ".pyi") and "__pycache__" not in path.parts:
            found.setdefault(module_name(path), path)
    return found


def part_of(module: str) -> str:
    """heapscope.view.report -> heapscope.view; heapscope.model -> heapscope.model."""
    return ".".join(module.split(".")[:2])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included, except the bodies of `if TYPE_CHECKING:`."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            yield from _statements(stmt.orelse)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(stmt, field, None)
            for child in children or ():
                if isinstance(child, ast.stmt):
                    yield from _statements([child])
                elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    yield from _statements(child.body)


def imports_of(module: str, path: Path, modules: Set[str]) -> Iterator[Import]:
    """The heapscope modules `module` imports (`from a import b` is module a.b when that is one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for stmt in _statements(tree.body):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name.split(".")[0] == "heapscope":
                    yield Import(module, alias.name, stmt.lineno)
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                base = package.split(".")[: len(package.split(".")) - stmt.level + 1]
                origin = ".".join(base + ([stmt.module] if stmt.module else []))
            else:
                origin = stmt.module or ""
            if origin.split(".")[0] != "heapscope":
                continue
            for alias in stmt.names:
                name = f"{origin}.{alias.name}"
                yield Import(module, name if name in modules else origin, stmt.lineno)


def import_graph() -> list[Import]:
    """Every import of a heapscope module by another, the first of each pair only."""
    modules = all_modules()
    first: dict[tuple[str, str], Import] = {}
    for name, path in modules.items():
        if path.suffix == ".py":
            for imp in imports_of(name, path, modules.keys()):
                first.setdefault((imp.source, imp.target), imp)
    return list(first.values())


def parts() -> dict[str, Path]:
    """Each part and the file whose docstring has its "May import:" line."""
    # The package itself: its __getattr__ hands out the public API (heapscope.label).
    found: dict[str, Path] = {"heapscope": PACKAGE / "__init__.py"}
    for path in sorted(PACKAGE.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            found[f"heapscope.{path.name}"] = path / "__init__.py"
        elif path.suffix == ".py" and path.stem != "__init__":
            found[f"heapscope.{path.stem}"] = path
    return found


MAY_IMPORT = re.compile(r"May import:(.*?)\.(?:\s|$)", re.DOTALL)


def may_import(path: Path) -> set[str] | None:
    """The names of a part's "May import:" line (parenthesised remarks dropped), None without one."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    # A dotted name's dots are not the sentence's end: the lazy match stops at ". " or the end.
    match = MAY_IMPORT.search(re.sub(r"\([^()]*\)", "", doc))
    if match is None:
        return None
    text = " ".join(match.group(1).split())
    if text == "nothing of heapscope":
        return set()
    return {name.strip() for name in text.split(",")}


def allowed(target: str, names: Set[str]) -> bool:
    return any(target == name or target.startswith(name + ".") for name in names)


def cycles(edges: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def package_doc() -> str:
    return ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))) or ""


def part_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for imp in import_graph():
        source, target = part_of(imp.source), part_of(imp.target)
        if target not in ("heapscope", source):
            edges.setdefault(source, set()).add(target)
    return edges


def reachable(edges: Mapping[str, Set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_import_reader_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    """The reader under the checks: a function's import counts, `if TYPE_CHECKING:` does not."""
    path = tmp_path / "sample.py"
    path.write_text(
        "from __future__ import annotations\n"
        "import os\n"
        "from heapscope import model\n"
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    from heapscope.view import report\n"
        "else:\n"
        "    import heapscope.errors\n"
        "def f() -> None:\n"
        "    try:\n"
        "        from heapscope.store.reader import Profile\n"
        "    except ImportError:\n"
        "        from . import sibling\n",
        encoding="utf-8")
    modules = {"heapscope.model", "heapscope.store.reader", "heapscope.store.sibling"}
    found = {imp.target for imp in imports_of("heapscope.store.sample", path, modules)}
    assert found == {"heapscope.model", "heapscope.errors", "heapscope.store.reader", "heapscope.store.sibling"}


def test_every_part_names_what_it_may_import() -> None:
    missing = [str(path.relative_to(PACKAGE)) for path in parts().values() if may_import(path) is None]
    assert not missing, f"no 'May import:' line in the docstring of: {', '.join(missing)}"


def test_every_import_is_one_its_part_may_make() -> None:
    lines = {part: may_import(path) or set() for part, path in parts().items()}
    wrong = [f"{imp.source} (line {imp.line}) imports {imp.target}, not in {part_of(imp.source)}'s 'May import:'"
             for imp in import_graph()
             if part_of(imp.target) not in ("heapscope", part_of(imp.source))
             and not allowed(imp.target, lines[part_of(imp.source)])]
    assert not wrong, "\n".join(wrong)


def test_every_may_import_name_is_imported() -> None:
    """A name on a line that no module imports any more is a map that lies: it goes."""
    used: dict[str, set[str]] = {}
    for imp in import_graph():
        used.setdefault(part_of(imp.source), set()).add(imp.target)
    modules = all_modules()
    stale = [f"{part}: {name}" for part, path in parts().items() for name in sorted(may_import(path) or ())
             if name not in modules or not any(allowed(t, {name}) for t in used.get(part, ()))]
    assert not stale, "named on a 'May import:' line, never imported:\n" + "\n".join(stale)


def test_no_cycle_between_parts() -> None:
    found = cycles(part_edges())
    assert not found, "parts that import each other (through others, maybe):\n" + "\n".join(map(", ".join, found))


def test_no_cycle_between_modules() -> None:
    edges: dict[str, set[str]] = {}
    for imp in import_graph():
        # A module's package is imported before it, by Python: that edge is no cycle of ours.
        if not imp.source.startswith(imp.target + "."):
            edges.setdefault(imp.source, set()).add(imp.target)
    found = cycles(edges)
    assert not found, "modules that import each other (through others, maybe):\n" + "\n".join(map(", ".join, found))


def test_the_package_map_arrows_are_imports() -> None:
    """`imports point one way: a -> b | c -> d, ...`: a imports b and c (directly or through
    other parts), and they import d; with no cycle, never the other way round."""
    match = re.search(r"imports point one way:(.*?);", package_doc(), re.DOTALL)
    assert match is not None, "the package docstring no longer says which way imports point"
    edges = part_edges()
    wrong = []
    for chain in " ".join(match.group(1).split()).split(","):
        steps = [[f"heapscope.{name.strip()}" for name in step.split("|")] for step in chain.split("->")]
        for upper, lower in zip(steps, steps[1:], strict=False):
            wrong += [f"{a} -> {b}" for a in upper for b in lower if b not in reachable(edges, a)]
    assert not wrong, "the package docstring's arrows that no import makes: " + ", ".join(wrong)


def test_the_package_map_lists_every_folder() -> None:
    """src/heapscope/__init__.py's map: one line `    name/   what it is` a folder, all of them."""
    doc = package_doc()
    mapped = set(re.findall(r"^    (\w+)/ ", doc, re.MULTILINE))
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert mapped == folders, f"in the map, no such folder: {sorted(mapped - folders)}; " \
                              f"folders missing from it: {sorted(folders - mapped)}"
