"""The tree stays `ruff` clean, and `mypy --strict` clean: the package with the dev install's packages
and with the runtime dependencies alone (`pip install .`: the optional ones typed at their boundary),
and tests/ (all three come with the `dev` extra)."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
import venv
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


@pytest.mark.timeout(120)
def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def mypy(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """mypy with pyproject.toml's settings (strict), in a child: runs share no state."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=580, env=env)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    """The package type-checks under mypy --strict (settings in pyproject.toml)."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")  # never a silent pass: dev has it
    status, out = mypy(str(ROOT / "src" / "heapscope"))
    assert status == 0, out


def runtime_distributions() -> set[str]:
    """heapscope's dependencies without any extra, and theirs, as installed here."""
    found: set[str] = set()
    todo = ["heapscope"]
    while todo:
        for line in metadata.requires(todo.pop()) or []:
            req = Requirement(line)
            if (req.marker is None or req.marker.evaluate({"extra": ""})) and req.name.lower() not in found:
                found.add(req.name.lower())
                todo.append(req.name)
    return found


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean_with_the_runtime_dependencies_only(tmp_path: Path) -> None:
    """`pip install .` brings none of the extras (textual, grpcio, clickhouse-connect, chdb, pytest):
    the package type-checks without them too. mypy reads the packages a Python of its own sees: a
    venv whose site-packages holds only the runtime distributions' files (links to this install's)."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    env_dir = tmp_path / "runtime"
    venv.create(env_dir, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    linked = 0
    for name in sorted(runtime_distributions()):
        for file in metadata.distribution(name).files or []:
            if file.parts[0] == ".." or ".dist-info" in file.parts[0] or file.suffix not in (".py", ".pyi", ".typed"):
                continue
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(Path(str(file.locate())).resolve())
                linked += 1
    assert linked > 0, "no runtime distribution found installed"
    status, out = mypy("--python-executable", str(python), "--cache-dir", str(tmp_path / "cache"),
                       str(ROOT / "src" / "heapscope"))
    assert status == 0, out


# tests/ files that mypy --strict does not pass yet, each typed when next worked on: a file
# made clean must leave this list (the test below says so), and no other file may join it.
NOT_YET_STRICT: frozenset[str] = frozenset()


def python_folders() -> list[Path]:
    """tests/'s folders of Python files: mypy checks each on its own (their conftest.py share a name)."""
    return sorted({path.parent for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts})


@pytest.mark.timeout(600)
@pytest.mark.parametrize("folder", python_folders(), ids=lambda p: str(p.relative_to(ROOT)))
def test_mypy_strict_is_clean_on_tests(folder: Path) -> None:
    """A test imports helpers from its folder and the folders above it, up to tests/ (pytest puts
    each on sys.path, with their conftest.py; fault/conftest.py adds integration/): mypy is given
    the same path. Errors count in the folder's own files (those of a helper imported from
    elsewhere count in the helper's folder)."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    above = [folder, *[p for p in folder.parents if p.is_relative_to(TESTS)]]
    extra = [TESTS / "integration"] if folder == TESTS / "fault" else []
    # src/ first: the tests are checked against this tree's heapscope, not an installed one.
    path = os.pathsep.join(map(str, [ROOT / "src", *above, *extra]))
    files = sorted(folder.glob("*.py"))
    status, out = mypy(*map(str, files), env={**os.environ, "MYPYPATH": path})
    mine = {str(file.relative_to(ROOT)) for file in files}
    failing = {line.split(":")[0] for line in out.splitlines() if ": error: " in line} & mine
    assert status == 0 or failing or " error: " in out, out  # a failure of mypy's own, not a file's
    new = sorted(failing - NOT_YET_STRICT)
    assert not new, "\n".join(line for line in out.splitlines() if line.split(":")[0] in new)
    typed = sorted((NOT_YET_STRICT & mine) - failing)
    assert not typed, f"mypy --strict passes these now: take them out of NOT_YET_STRICT: {typed}"


# -- comments say why, without tracker numbers -------------------------------------------------------------------

PACKAGE = ROOT / "src" / "heapscope"
# "issue 13", "issues 12 and 13", "Issue #7", "bug 4", "(h42)", "h46": the forms a tracker number takes. A
# comment gives the reason itself, or names the docs/ section that tells the longer story.
TRACKER = re.compile(r"\b(?:issues?|bugs?|tickets?)\s*#?\d+|\(h\d+\)|\bh\d{2,}\b", re.IGNORECASE)


def python_comments(path: Path) -> Iterator[tuple[int, str]]:
    """Each comment and docstring of a Python file, with its first line."""
    source = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value


C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def c_comments(path: Path) -> Iterator[tuple[int, str]]:
    """Each comment of a C file, with its first line (string literals holding `/*` are not expected here)."""
    source = path.read_text()
    for m in C_COMMENT.finditer(source):
        yield source.count("\n", 0, m.start()) + 1, m.group()


def tracker_citations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix == ".py":
            comments = python_comments(path)
        elif path.suffix in (".c", ".h"):
            comments = c_comments(path)
        else:
            continue
        for line, text in comments:
            for m in TRACKER.finditer(text):
                found.append(f"{path.relative_to(ROOT)}:{line + text.count(chr(10), 0, m.start())}: {m.group()!r}")
    return found


def test_the_tracker_pattern_finds_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Fast (issue 13)."""\n\n\ndef f() -> None:\n    """Issues 12 and 13."""\n'
                      "    x = 1  # since h46\n    y = 2  # (h30)\n    z = 3  # bug #7\n"
                      "    w = 4  # a hash h1, heap 12\n")
    got = [(line, m.group()) for line, text in python_comments(sample) for m in TRACKER.finditer(text)]
    assert sorted(got) == [(1, "issue 13"), (5, "Issues 12"), (6, "h46"), (7, "(h30)"), (8, "bug #7")]
    c = tmp_path / "sample.c"
    c.write_text("/* the free path\n * (issue 13) */\nint h46 = 1; // h48 here\n")
    assert [(line, m.group()) for line, text in c_comments(c) for m in TRACKER.finditer(text)] == \
        [(1, "issue 13"), (3, "h48")]


def test_no_comment_in_the_package_cites_a_tracker_number() -> None:
    assert tracker_citations() == []


# -- sizes: no file over 800 lines, no function over 80 without its reason ---------------------------------------

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
# A long function says why just above itself, in the comment right above its def (or its first decorator) or C
# signature, or in the first line of its docstring: "Long on purpose: one switch over the opcodes, ...".
LONG_REASON = re.compile(r"\blong on purpose:\s*\S", re.IGNORECASE)
# Files over the limit that wait for a split along their seam; each named with why it is not split yet.
FILES_TO_SPLIT: set[str] = set()
C_SIGNATURE = re.compile(r"^[A-Za-z_][\w \t\*\(\),\[\]]*\(")


def comment_above(lines: list[str], index: int, c: bool) -> str:
    """The contiguous comment lines just above lines[index] (0-based), joined."""
    above = []
    i = index - 1
    while i >= 0:
        s = lines[i].strip()
        if (s.startswith(("/*", "*", "//")) or s.endswith("*/")) if c else s.startswith("#"):
            above.append(s)
            i -= 1
        else:
            break
    return "\n".join(reversed(above))


def long_python_functions(path: Path) -> Iterator[tuple[int, str, int, bool]]:
    """(line, name, length, justified) of each function of `path` over MAX_FUNCTION_LINES."""
    source = path.read_text()
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno
            if length <= MAX_FUNCTION_LINES:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            doc = ast.get_docstring(node) or ""
            reason = comment_above(lines, first - 1, c=False) + "\n" + doc.split("\n", 1)[0]
            yield node.lineno, node.name, length, bool(LONG_REASON.search(reason))


def c_functions(path: Path) -> Iterator[tuple[int, str, int, bool]]:
    """(line, signature, length, justified) of each top-level C function of `path`: a line at column 0 that
    opens a parenthesis, then braces counted (comments and literals blanked) to the one that closes its body."""
    source = C_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), path.read_text())
    source = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', source)
    code = source.splitlines()
    lines = path.read_text().splitlines()
    i = 0
    while i < len(code):
        if not C_SIGNATURE.match(code[i]):
            i += 1
            continue
        start, depth, opened = i, 0, False
        j = i
        while j < len(code):
            text = code[j]
            if not opened and ";" in text and "{" not in text:
                break  # a declaration, or a macro call
            depth += text.count("{") - text.count("}")
            opened = opened or "{" in text
            if opened and depth <= 0:
                break
            j += 1
        if opened:
            reason = comment_above(lines, start, c=True)
            yield start + 1, lines[start].strip(), j - start, bool(LONG_REASON.search(reason))
        i = max(j, i) + 1


def test_the_size_checks_find_long_functions_and_their_reasons(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES + 1))
    py = tmp_path / "m.py"
    py.write_text(f"def short() -> None:\n    pass\n\n\ndef bare() -> None:\n{body}\n\n"
                  f"# Long on purpose: one table, written in order.\n@staticmethod\ndef why() -> None:\n{body}\n\n"
                  f'def doc() -> None:\n    """Long on purpose: each kind of row in turn."""\n{body}')
    got_py = [(name, ok) for _, name, _, ok in long_python_functions(py)]
    assert got_py == [("bare", False), ("why", True), ("doc", True)]
    c_body = "".join(f"  x += {i}; /* {{ */\n" for i in range(MAX_FUNCTION_LINES))
    c = tmp_path / "m.c"
    c.write_text(f"int g(int);\nstatic int short_one(int x) {{\n  return x;\n}}\n\n"
                 f"int bare(int x)\n{{\n{c_body}  return x;\n}}\n\n"
                 "/* The state machine. Long on purpose:\n * one case per opcode. */\n"
                 f'static int why(int x) {{\n  const char *s = "}}";\n{c_body}  return x;\n}}\n')
    got = [(sig.split("(")[0], length, ok) for _, sig, length, ok in c_functions(c) if length > MAX_FUNCTION_LINES]
    assert got == [("int bare", MAX_FUNCTION_LINES + 3, False), ("static int why", MAX_FUNCTION_LINES + 3, True)]


def test_no_source_file_is_over_800_lines() -> None:
    long = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
            for path in sorted(PACKAGE.rglob("*")) if path.suffix in (".py", ".c", ".h")}
    over = {name: n for name, n in long.items() if n > MAX_FILE_LINES and name not in FILES_TO_SPLIT}
    assert over == {}
    assert all(name in long for name in FILES_TO_SPLIT)


def test_no_function_is_over_80_lines_without_its_reason() -> None:
    unexplained = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix == ".py":
            found = long_python_functions(path)
        elif path.suffix in (".c", ".h"):  # a header's inline functions too
            found = (f for f in c_functions(path) if f[2] > MAX_FUNCTION_LINES)
        else:
            continue
        unexplained += [f"{path.relative_to(ROOT)}:{line}: {name} ({length} lines)"
                        for line, name, length, ok in found if not ok]
    assert unexplained == []
