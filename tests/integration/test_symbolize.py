"""Symbolization end to end: `heapscope record` symbolizes at the end (inlined frames
included), and `heapscope symbolize` does the same later for a profile recorded with
--no-symbolize, from debug files found by build id (lookup order or --index)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Recorder, run_process

from heapscope.symbolize.llvm import find_llvm_symbolizer

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(find_llvm_symbolizer() is None, reason="llvm-symbolizer not installed (Debian package `llvm`)"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("c++", "objcopy")), reason="needs c++ and objcopy"),
]

# The inlined C++ program of the symbolizer unit tests (line numbers matter).
SOURCE = (Path(__file__).parents[1] / "unit" / "symbolize" / "inlined.cpp").read_text()


def _compile(out: Path, source: str = SOURCE) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".cc")
    src.write_text(source)
    subprocess.run(["c++", "-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id=sha1", "-o", str(out), str(src)],
                   check=True, timeout=120)
    return out


def _build_id(path: Path) -> str:
    note = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True).stdout
    return note.split("Build ID:")[1].split()[0]


def _split(full: Path, stripped: Path, sym_dir: Path, name: str | None = None) -> None:
    """stripped = `full` without symbols or DWARF; its debug file in sym_dir (.build-id layout or `name`)."""
    stripped.parent.mkdir(parents=True, exist_ok=True)
    bid = _build_id(full)
    debug = sym_dir / name if name else sym_dir / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    debug.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-all", str(full), str(stripped)], check=True)


def _names(db_path: Path, prog_name: str) -> dict[tuple[str, int], str]:
    """Frame names by (mapping basename, rel_pc); the program's mapping is called `prog` whatever its path."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT m.name, f.rel_pc, f.name FROM stack_profile_frame f"
                          " JOIN stack_profile_mapping m ON m.id = f.mapping").fetchall()
    return {(Path(m).name if m.endswith(prog_name) else m, pc): n for m, pc, n in rows}


def _outer_fn_symbols(db_path: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT s.name, s.line_number, s.inlined FROM stack_profile_frame f"
            " JOIN stack_profile_symbol s ON s.symbol_set_id = f.symbol_set_id"
            " WHERE f.name = 'app::outer_fn(unsigned long)' ORDER BY s.id").fetchall()
    return [(str(n), int(ln), int(i)) for n, ln, i in rows]


INLINE_CHAIN = [("inner_alloc", 4, 1), ("middle_alloc", 5, 1), ("app::outer_fn(unsigned long)", 7, 0)]


def test_record_symbolizes_inlined_frames(record: Recorder, tmp_path: Path) -> None:
    # GIVEN a -O2 program whose malloc call sits in two inlined helpers
    prog = _compile(tmp_path / "full" / "prog")
    # WHEN it is recorded with the defaults
    rec = record([prog])
    assert rec.returncode == 0, rec.describe()
    # THEN its allocating frame carries the whole inline chain, innermost first, with lines
    assert _outer_fn_symbols(rec.db) == INLINE_CHAIN


def test_symbolize_later_gives_the_names_of_a_default_record(record: Recorder, tmp_path: Path) -> None:
    # GIVEN a default record of the program, and a --no-symbolize record of its stripped copy
    full = _compile(tmp_path / "full" / "prog")
    sym = tmp_path / "sym"
    _split(full, tmp_path / "deployed" / "prog", sym)
    default = record([full])
    later = record([tmp_path / "deployed" / "prog"], extra=["--no-symbolize"])
    assert default.returncode == 0 and later.returncode == 0, later.describe()
    with sqlite3.connect(later.db) as db:
        assert {n for (n,) in db.execute("SELECT name FROM stack_profile_frame")} == {""}
    # WHEN the second profile is symbolized with the directory of debug files
    run = run_process([*HEAPSCOPE, "symbolize", str(later.db), "--binary-path", str(sym)], timeout=120)
    # THEN it succeeds and every frame has the name the default record gave it, inline chain included
    assert run.returncode == 0, run.describe()
    assert _names(later.db, "prog") == _names(default.db, "prog")
    assert _outer_fn_symbols(later.db) == INLINE_CHAIN
    # AND a second run has nothing to do
    again = run_process([*HEAPSCOPE, "symbolize", str(later.db)], timeout=60)
    assert again.returncode == 0 and b"already symbolized" in again.stderr, again.describe()


def test_symbolize_index_and_mismatch_report(record: Recorder, tmp_path: Path) -> None:
    # GIVEN a --no-symbolize record of a stripped program; the debug file under an unrelated
    # name deep in a directory that also holds a rebuild of the program under its own name
    full = _compile(tmp_path / "full" / "prog")
    sym = tmp_path / "sym"
    _split(full, tmp_path / "deployed" / "prog", sym, name="x/y/whatever.dbg")
    rebuild = _compile(tmp_path / "rebuild" / "prog", SOURCE.replace("n + 1", "n + 9"))
    shutil.copy(rebuild, sym / "prog")
    rec = record([tmp_path / "deployed" / "prog"], extra=["--no-symbolize"])
    assert rec.returncode == 0, rec.describe()
    copy = tmp_path / "copy.db"
    shutil.copy(rec.db, copy)
    # WHEN symbolized with the lookup order only
    plain = run_process([*HEAPSCOPE, "symbolize", str(rec.db), "--binary-path", str(sym)], timeout=120)
    # THEN the rebuild is refused and reported (the stripped recorded file itself has no debug info)
    err = plain.stderr.decode()
    assert plain.returncode == 0, plain.describe()
    assert "build id mismatch" in err and str(sym / "prog") in err and _build_id(rebuild) in err, err
    assert _outer_fn_symbols(rec.db) == []
    # WHEN symbolized with --index
    indexed = run_process([*HEAPSCOPE, "symbolize", str(copy), "--binary-path", str(sym), "--index"], timeout=120)
    # THEN the debug file is found by build id
    assert indexed.returncode == 0, indexed.describe()
    assert b"indexed 2 ELF files" in indexed.stderr, indexed.describe()
    assert _outer_fn_symbols(copy) == INLINE_CHAIN


def test_symbolize_refuses_a_bad_profile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("not a profile")
    run = run_process([*HEAPSCOPE, "symbolize", str(bad)], timeout=60)
    assert run.returncode == 1
    assert run.stderr.decode().strip() == f"heapscope: error: {bad}: not a heapscope profile (not an SQLite database)"
    usage = run_process([*HEAPSCOPE, "symbolize", str(bad), "--index"], timeout=60)
    assert usage.returncode == 2 and b"--index needs --binary-path" in usage.stderr, usage.describe()


def test_symbolize_without_llvm_symbolizer_says_so_and_names_from_symtab(record: Recorder, tmp_path: Path) -> None:
    # GIVEN a --no-symbolize record of a program with symbols, and llvm-symbolizer disabled
    prog = _compile(tmp_path / "full" / "prog")
    rec = record([prog], extra=["--no-symbolize"])
    assert rec.returncode == 0, rec.describe()
    env = {**os.environ, "HEAPSCOPE_LLVM_SYMBOLIZER": "none"}
    # WHEN symbolized
    run = run_process([*HEAPSCOPE, "symbolize", str(rec.db)], timeout=120, env=env)
    # THEN it says so once, names frames from the symbol tables, and writes no symbol rows
    assert run.returncode == 0, run.describe()
    assert run.stderr.decode().count("llvm-symbolizer not found") == 1, run.describe()
    with sqlite3.connect(rec.db) as db:
        names = {n for (n,) in db.execute("SELECT name FROM stack_profile_frame")}
        assert db.execute("SELECT COUNT(*) FROM stack_profile_symbol").fetchone()[0] == 0
    assert {"main", "app::outer_fn(unsigned long)"} <= names


def _symbol_rows(db_path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute("SELECT f.rel_pc, f.name, s.name, s.source_file, s.line_number, s.inlined"
                          " FROM stack_profile_frame f LEFT JOIN stack_profile_symbol s"
                          " ON s.symbol_set_id = f.symbol_set_id ORDER BY f.rel_pc, f.mapping, s.id").fetchall()


def _stat(db_path: Path, name: str) -> int:
    with sqlite3.connect(db_path) as db:
        return int(db.execute("SELECT value FROM stats WHERE name = ?", (name,)).fetchone()[0])


def test_record_symbolizes_from_the_symbol_cache(tmp_path: Path) -> None:
    # GIVEN an empty per-user cache and a program recorded exactly (interval 1: the same frames every run)
    prog = _compile(tmp_path / "full" / "prog")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))

    def record_once(name: str) -> tuple[Path, str]:
        out = tmp_path / f"{name}.db"
        run = run_process([*HEAPSCOPE, "record", "-i", "1", "-o", str(out), "--", str(prog)], env=env, timeout=120)
        assert run.returncode == 0, run.describe()
        return out, run.stderr.decode()

    # WHEN it is recorded twice
    first, _ = record_once("first")
    second, _ = record_once("second")
    # THEN the second run answered every frame from the cache, with the same symbols as the first
    assert _stat(first, "symbol_cache_hits") == 0 and _stat(first, "symbol_cache_misses") > 0
    assert _stat(second, "symbol_cache_misses") == 0
    assert _stat(second, "symbol_cache_hits") == _stat(first, "symbol_cache_misses")
    assert _symbol_rows(second) == _symbol_rows(first)
    assert _outer_fn_symbols(second) == INLINE_CHAIN
    # AND the cache is private
    cache = tmp_path / "xdg" / "heapscope"
    assert (cache.stat().st_mode & 0o777) == 0o700
    # WHEN every entry is damaged and it is recorded again
    for entry in cache.glob("sym-*.json"):
        entry.write_text("{")
    third, err = record_once("third")
    # THEN the entries are ignored, counted, said in one line, and the symbols are complete
    damaged = len(list(cache.glob("sym-*.json")))
    assert _stat(third, "symbol_cache_corrupt") == damaged > 0
    assert f"symbol cache: {damaged} damaged or foreign entries ignored" in err, err
    assert _symbol_rows(third) == _symbol_rows(first)
