"""symbolize.cache.SymbolCache through symbolize_profile, on profiles written by the real
ProfileWriter with frames at real addresses of a program compiled here and of libc:
a cache hit gives the same symbols as no cache, a changed file makes an entry stale,
and the cache never reads or writes through a link someone planted; a damaged entry
is ignored and counted."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from symbolize_progs import INLINED_SOURCE, build_id, compile_cxx, malloc_call_pc, needs_toolchain

from heapscope.model import Frame, Mapping, MappingId
from heapscope.store.writer import ProfileWriter, SymbolWriter
from heapscope.symbolize import live as live_module
from heapscope.symbolize.cache import SymbolCache
from heapscope.symbolize.live import LiveSymbolizer
from heapscope.symbolize.llvm import PIPE_ROOM, WarmSymbolizer, find_llvm_symbolizer, symbolize_files
from heapscope.symbolize.missing import unsymbolized_modules
from heapscope.symbolize.profile import symbolize_profile
from heapscope.symbolize.symtab import read_elf_symbols

LLVM = find_llvm_symbolizer()
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
pytestmark = [needs_toolchain, pytest.mark.timeout(120),
              pytest.mark.skipif(LLVM is None, reason="llvm-symbolizer not installed (Debian package `llvm`)"),
              pytest.mark.skipif(not Path(LIBC).exists(), reason=f"no {LIBC}")]


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_cxx(INLINED_SOURCE, tmp_path_factory.mktemp("cache") / "prog")


@pytest.fixture(scope="module")
def template(prog: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unsymbolized profile: the program's malloc call (three inlined functions) and
    nearby addresses, and addresses in libc (symbol table or DWARF, whatever this machine has)."""
    pc = malloc_call_pc(prog)
    mappings = [Mapping(build_id(prog), 0, 0, 0x1000, 0x9000, 0, str(prog)),
                Mapping(build_id(Path(LIBC)), 0, 0, 0x1000, 0x9000, 0, LIBC)]
    frames = [Frame(MappingId(1), pc), Frame(MappingId(1), pc - 3), Frame(MappingId(1), 0x10)]
    frames += [Frame(MappingId(2), 0x28000 + 0x1357 * k) for k in range(6)]
    path = tmp_path_factory.mktemp("template") / "p.db"
    w = ProfileWriter(path)
    w.add_mappings(enumerate(mappings, start=1))
    w.add_frames(enumerate(frames, start=1))
    w.close()
    return path


def _symbolized(template: Path, out: Path,
                cache: SymbolCache | None) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Symbolize a copy of the template; its frame names and symbol rows."""
    shutil.copy(template, out)
    db = sqlite3.connect(out)
    try:
        symbolize_profile(SymbolWriter(db), debug_roots=["/usr/lib/debug"], debuginfod=None, cache=cache)
        frames = db.execute("SELECT id, name, symbol_set_id FROM stack_profile_frame ORDER BY id").fetchall()
        symbols = db.execute("SELECT * FROM stack_profile_symbol ORDER BY id").fetchall()
    finally:
        db.close()
    if cache is not None:
        cache.close()
    return frames, symbols


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("sym-*.json"))


def test_a_cache_hit_gives_identical_symbols(template: Path, tmp_path: Path) -> None:
    # GIVEN the symbols of the profile without any cache
    expected = _symbolized(template, tmp_path / "plain.db", None)
    assert any(name == "app::outer_fn(unsigned long)" for _, name, _ in expected[0])  # a real answer
    d = tmp_path / "cache" / "heapscope"
    # WHEN a first run fills an empty cache and a second run reads it
    first = SymbolCache(d)
    got_first = _symbolized(template, tmp_path / "first.db", first)
    second = SymbolCache(d)
    got_second = _symbolized(template, tmp_path / "second.db", second)
    # THEN both give exactly the symbols of the run without a cache
    assert got_first == expected
    assert got_second == expected
    # AND the first run asked for every frame, the second answered every one from the cache
    assert (first.hits, first.misses) == (0, 9)
    assert (second.hits, second.misses) == (9, 0)
    # AND the cache is a private directory of private files, one per module
    assert (d.stat().st_mode & 0o777) == 0o700
    assert len(_entries(d)) == 2
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in _entries(d))
    assert second.notes() == [] and second.corrupt == 0



def _program_entry(d: Path, prog: Path) -> Path:
    [entry] = [e for e in _entries(d) if json.loads(e.read_bytes())["path"] == str(prog)]
    return entry


def _filled(template: Path, prog: Path, tmp_path: Path) -> tuple[Any, Path, Path, dict[str, Any]]:
    """The symbols without a cache, a cache filled by one run, its program entry's file and content."""
    expected = _symbolized(template, tmp_path / "plain.db", None)
    d = tmp_path / "cache" / "heapscope"
    _symbolized(template, tmp_path / "first.db", SymbolCache(d))
    entry = _program_entry(d, prog)
    return expected, d, entry, json.loads(entry.read_bytes())


def test_an_entry_names_each_source_file_once(template: Path, prog: Path, tmp_path: Path) -> None:
    """An entry is read and written at every `record` that meets a new address of its module:
    its answers name their source files by index into one table (libpython's entry was
    mostly its ~150 file paths repeated, 630 KB instead of 240)."""
    d = tmp_path / "cache" / "heapscope"
    _symbolized(template, tmp_path / "first.db", SymbolCache(d))
    stored = json.loads(_program_entry(d, prog).read_bytes())
    assert stored["format"] == 2
    frames = [f for chain, _name in stored["answers"].values() for f in chain]
    assert frames and all(isinstance(f[1], int) for f in frames)
    used = {stored["sources"][f[1]] for f in frames}
    assert len(stored["sources"]) == len(used) and any(s.endswith(".cc") or s.endswith(".cpp") for s in used)


def test_an_entry_of_the_first_format_is_read_and_rewritten(template: Path, prog: Path, tmp_path: Path) -> None:
    # GIVEN a filled cache whose program entry is put back in the first format (each frame names its file)
    expected, d, entry, stored = _filled(template, prog, tmp_path)
    sources = stored.pop("sources")
    stored["format"] = 1
    stored["answers"] = {pc: [[[fn, sources[i], line] for fn, i, line in chain], name]
                         for pc, (chain, name) in stored["answers"].items()}
    entry.write_text(json.dumps(stored))
    # WHEN a run uses it
    cache = SymbolCache(d)
    got = _symbolized(template, tmp_path / "second.db", cache)
    # THEN it answers as before, is not counted damaged, and is written in today's format
    assert got == expected
    assert (cache.hits, cache.misses, cache.corrupt) == (9, 0, 0)
    assert json.loads(entry.read_bytes())["format"] == 2


def test_a_damaged_answer_is_dropped_counted_and_asked_again(template: Path, prog: Path, tmp_path: Path) -> None:
    # GIVEN a filled cache where one answer of the program's entry names a source file not in its table
    expected, d, entry, stored = _filled(template, prog, tmp_path)
    pc = next(pc for pc, (chain, _name) in stored["answers"].items() if chain)
    stored["answers"][pc][0][0][1] = len(stored["sources"])
    entry.write_text(json.dumps(stored))
    # WHEN a run uses it
    cache = SymbolCache(d)
    got = _symbolized(template, tmp_path / "second.db", cache)
    # THEN that address is symbolized anew, the others come from the cache, and the damage is said
    assert got == expected
    assert (cache.hits, cache.misses, cache.corrupt) == (8, 1, 1)
    assert any("damaged or foreign" in line for line in cache.notes())
    # AND the entry is whole again for the next run
    third = SymbolCache(d)
    assert _symbolized(template, tmp_path / "third.db", third) == expected
    assert (third.hits, third.corrupt) == (9, 0)

def test_a_changed_file_makes_its_entry_stale(template: Path, prog: Path, tmp_path: Path) -> None:
    # GIVEN a cache filled by a run
    d = tmp_path / "heapscope"
    _symbolized(template, tmp_path / "first.db", SymbolCache(d))
    # WHEN the program's file changes (same build id, new mtime: say it was rebuilt) and a run follows
    st = prog.stat()
    try:
        os.utime(prog, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        again = SymbolCache(d)
        got = _symbolized(template, tmp_path / "again.db", again)
    finally:
        os.utime(prog, ns=(st.st_atime_ns, st.st_mtime_ns))
    # THEN the program's frames are symbolized anew (libc's still come from the cache), with the same answers
    assert (again.hits, again.misses) == (6, 3)
    assert got == _symbolized(template, tmp_path / "plain.db", None)


def test_a_planted_symlink_entry_is_refused_and_replaced(template: Path, tmp_path: Path) -> None:
    # GIVEN a filled cache whose program entry is then replaced by a link to a file elsewhere
    d = tmp_path / "heapscope"
    _symbolized(template, tmp_path / "first.db", SymbolCache(d))
    entry = next(p for p in _entries(d) if p.stat().st_size < 100_000 and "prog" in p.read_text())
    target = tmp_path / "elsewhere.json"
    target.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(target)
    before = target.read_bytes()
    # WHEN a run uses the cache
    cache = SymbolCache(d)
    got = _symbolized(template, tmp_path / "second.db", cache)
    # THEN the link was not followed: counted, said, and the frames symbolized as without a cache
    assert cache.links == 1
    assert (cache.hits, cache.misses) == (6, 3)
    assert any("symbolic links refused" in line for line in cache.notes())
    assert got == _symbolized(template, tmp_path / "plain.db", None)
    # AND the new entry replaced the link itself; the file it pointed to is untouched
    assert not entry.is_symlink() and entry.is_file()
    assert target.read_bytes() == before


def test_a_symlinked_cache_directory_is_refused(template: Path, tmp_path: Path) -> None:
    # GIVEN $XDG_CACHE_HOME/heapscope planted as a link to another directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "xdg").mkdir(mode=0o700)
    d = tmp_path / "xdg" / "heapscope"
    d.symlink_to(elsewhere)
    # WHEN a run uses the cache
    cache = SymbolCache(d)
    got = _symbolized(template, tmp_path / "p.db", cache)
    # THEN nothing is read or written there, the run says why, and the symbols are complete
    assert list(elsewhere.iterdir()) == []
    assert cache.refused and "symbolic link" in cache.refused
    assert any("symbol cache not used" in line for line in cache.notes())
    assert got == _symbolized(template, tmp_path / "plain.db", None)


def test_a_cache_directory_others_may_write_is_refused(template: Path, tmp_path: Path) -> None:
    d = tmp_path / "heapscope"
    d.mkdir()
    d.chmod(0o777)
    cache = SymbolCache(d)
    _symbolized(template, tmp_path / "p.db", cache)
    assert "others may write" in cache.refused
    assert _entries(d) == []


@pytest.mark.parametrize("damage", [
    b"not json at all \x00\xff",
    b'{"format": 1, "path": 3}',
    b'{"format": 1, "path": "/x", "build_id": "ab", "context": "", "files": [], '
    b'"located": {"status": "found"}, "answers": {}}',
    b"",
])
def test_a_corrupted_entry_is_ignored_counted_and_rewritten(template: Path, tmp_path: Path, damage: bytes) -> None:
    # GIVEN a filled cache whose entries are then damaged
    d = tmp_path / "heapscope"
    _symbolized(template, tmp_path / "first.db", SymbolCache(d))
    for entry in _entries(d):
        entry.write_bytes(damage)
    # WHEN a run uses the cache
    cache = SymbolCache(d)
    got = _symbolized(template, tmp_path / "second.db", cache)
    # THEN each damaged entry is ignored and counted, the symbols are those of a run without a cache
    assert cache.corrupt == 2
    assert any("damaged or foreign" in line for line in cache.notes())
    assert got == _symbolized(template, tmp_path / "plain.db", None)
    # AND the next run finds good entries again
    third = SymbolCache(d)
    _symbolized(template, tmp_path / "third.db", third)
    assert (third.hits, third.corrupt) == (9, 0)


def test_an_entry_of_another_module_is_foreign(template: Path, tmp_path: Path) -> None:
    # GIVEN an entry copied under the name of another module's entry
    d = tmp_path / "heapscope"
    _symbolized(template, tmp_path / "first.db", SymbolCache(d))
    small, big = sorted(_entries(d), key=lambda p: p.stat().st_size)[:2]
    small.write_bytes(big.read_bytes())
    # WHEN a run reads it
    cache = SymbolCache(d)
    got = _symbolized(template, tmp_path / "second.db", cache)
    # THEN it is not used for that module
    assert cache.corrupt == 1
    assert got == _symbolized(template, tmp_path / "plain.db", None)


def _one_module_profile(path: Path, module: Path, pcs: list[int]) -> Path:
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping(build_id(module), 0, 0, 0x1000, 0x9000, 0, str(module)))])
    w.add_frames(enumerate((Frame(MappingId(1), pc) for pc in pcs), start=1))
    w.close()
    return path


def _names(path: Path, cache: SymbolCache | None) -> list[str]:
    db = sqlite3.connect(path)
    try:
        symbolize_profile(SymbolWriter(db), debug_roots=[], debuginfod=None, cache=cache)
        return [str(r[0]) for r in db.execute("SELECT name FROM stack_profile_frame ORDER BY id")]
    finally:
        db.close()
        if cache is not None:
            cache.close()


def test_new_addresses_in_functions_named_before_come_from_the_cache(prog: Path, tmp_path: Path) -> None:
    # GIVEN the program without DWARF (symbol table only), and a run that named one address of outer_fn
    bare = tmp_path / "bare"
    subprocess.run(["objcopy", "--strip-debug", str(prog), str(bare)], check=True, timeout=60)
    pc = malloc_call_pc(bare)
    found = read_elf_symbols(bare).lookup_range(pc)
    assert found is not None and found[0].startswith("app::outer_fn")
    name, start, end = found
    d = tmp_path / "cache" / "heapscope"
    assert _names(_one_module_profile(tmp_path / "first.db", bare, [pc]), SymbolCache(d)) == [name]
    # WHEN a later run samples other addresses of that function (and one outside any function)
    pcs = [start, end - 1, pc - 1, 0x10]
    second = SymbolCache(d)
    got = _names(_one_module_profile(tmp_path / "second.db", bare, pcs), second)
    # THEN the function's addresses are answered from the cache, named as without any cache
    assert got == _names(_one_module_profile(tmp_path / "plain.db", bare, pcs), None)
    assert got[:3] == [name] * 3 and got[3] != name
    assert (second.hits, second.misses) == (3, 1)
    # AND an address where no symbol is, near one seen before, is known as nameless too
    third = SymbolCache(d)
    assert start > 0x20
    got = _names(_one_module_profile(tmp_path / "third.db", bare, [0x20]), third)
    assert got == _names(_one_module_profile(tmp_path / "plain3.db", bare, [0x20]), None) == [f"{bare.name}+0x20"]
    assert (third.hits, third.misses) == (1, 0)


def test_addresses_a_kept_range_names_are_not_stored_one_by_one(prog: Path, tmp_path: Path) -> None:
    # GIVEN the program without DWARF, and a run that named one address of outer_fn (its range kept)
    bare = tmp_path / "bare"
    subprocess.run(["objcopy", "--strip-debug", str(prog), str(bare)], check=True, timeout=60)
    pc = malloc_call_pc(bare)
    found = read_elf_symbols(bare).lookup_range(pc)
    assert found is not None
    name, start, end = found
    d = tmp_path / "cache" / "heapscope"
    assert _names(_one_module_profile(tmp_path / "first.db", bare, [pc]), SymbolCache(d)) == [name]
    # WHEN a later run samples other addresses of that function and one outside any (a new range: stored)
    pcs = [start, end - 1, pc - 1, 0x10]
    assert _names(_one_module_profile(tmp_path / "second.db", bare, pcs), SymbolCache(d))[:3] == [name] * 3
    # THEN the entry keeps the ranges (the function's, and the nameless gap of 0x10), not the
    # addresses they answer one by one
    [entry] = _entries(d)
    stored = json.loads(entry.read_bytes())
    assert [[start, end, name]] == [r for r in stored["ranges"] if r[0] == start]
    assert any(r[0] <= 0x10 < r[1] and r[2] == "" for r in stored["ranges"])
    assert stored["answers"] == {}
    # AND a third run names all of them from the cache, as without one
    third = SymbolCache(d)
    got = _names(_one_module_profile(tmp_path / "third.db", bare, pcs), third)
    assert got == _names(_one_module_profile(tmp_path / "plain.db", bare, pcs), None)
    assert (third.hits, third.misses) == (4, 0)


GIT = shutil.which("git")


def _git_owner() -> str:
    if GIT is None or shutil.which("dpkg-query") is None:
        return ""
    run = subprocess.run(["dpkg-query", "-S", GIT], capture_output=True, text=True, timeout=10, check=False)
    return run.stdout.split(":")[0] if run.returncode == 0 else ""


@pytest.mark.skipif(not _git_owner() or not GIT or not build_id(Path(GIT)),
                    reason="no git installed by dpkg (with a build id)")
def test_the_package_of_a_module_left_nameless_is_kept_in_the_cache(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert GIT is not None
    git = Path(GIT)
    d = tmp_path / "cache" / "heapscope"
    a, b, c = (_one_module_profile(tmp_path / f"{n}.db", git, [0x10]) for n in "abc")
    owner = _git_owner()
    assert LLVM is not None
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)  # the same tool (cache context) whatever PATH says
    # GIVEN a frame of git that no symbol names, first symbolized while dpkg-query fails
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "dpkg-query").write_text("#!/bin/sh\nexit 2\n")
    (failing / "dpkg-query").chmod(0o755)
    monkeypatch.setenv("PATH", f"{failing}:{os.environ['PATH']}")
    report = symbolize_profile(SymbolWriter(sqlite3.connect(a)),
                               debug_roots=[], debuginfod=None, cache=SymbolCache(d))
    # THEN that failure is no answer: nothing is kept
    assert report.packages == {} and "-dbgsym" not in unsymbolized_modules(report)[0].fix
    # WHEN dpkg-query answers once, and a later run has no dpkg-query at all
    monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    report = symbolize_profile(SymbolWriter(sqlite3.connect(b)),
                               debug_roots=[], debuginfod=None, cache=SymbolCache(d))
    assert report.packages == {str(git): owner}
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    report = symbolize_profile(SymbolWriter(sqlite3.connect(c)),
                               debug_roots=[], debuginfod=None, cache=SymbolCache(d))
    # THEN the summary's fix still names the package, from the cache
    (mod,) = unsymbolized_modules(report)
    assert f"apt install {owner}-dbgsym" in mod.fix


def test_record_remembers_the_modules_it_located_and_starts_no_symbolizer_for_known_ones(
        prog: Path, tmp_path: Path) -> None:
    d = tmp_path / "cache" / "heapscope"
    pc = malloc_call_pc(prog)
    modules = [(str(prog), build_id(prog)), (LIBC, build_id(Path(LIBC)))]
    expected = _names(_one_module_profile(tmp_path / "plain.db", prog, [pc]), None)
    # GIVEN a recording told of two modules, whose target ran long enough to warm them,
    # and whose profile has frames of the program only
    live = LiveSymbolizer(SymbolCache(d))
    for path, bid in modules:
        live.module(path, bid)
    live.tick(time.monotonic() + 60)
    assert live.warm is not None  # the program has DWARF: warmed
    warm = live.warm
    w = ProfileWriter(tmp_path / "rec.db")
    w.add_mappings([(1, Mapping(modules[0][1], 0, 0, 0x1000, 0x9000, 0, str(prog)))])
    w.add_frames([(1, Frame(MappingId(1), pc))])
    live.finish(w)
    got = [str(r[0]) for r in w.db.execute("SELECT name FROM stack_profile_frame ORDER BY id")]
    w.close()
    # THEN its frames are named as without a recording, the warm tool has ended,
    # and the cache has an entry for each module, libc's too (it had no frame)
    assert got == expected
    assert warm.gone(10)
    assert {p.name.split("-")[1] for p in _entries(d)} == {bid for _, bid in modules}
    # WHEN the next recording is told of the same modules
    again = LiveSymbolizer(SymbolCache(d))
    for path, bid in modules:
        again.module(path, bid)
    again.tick(time.monotonic() + 60)
    # THEN it knows them all: no llvm-symbolizer is started while its target runs
    assert again.warm is None
    again.close()


def _recorded(path: Path, prog: Path, batches: list[list[Frame]], d: Path, early: bool
              ) -> tuple[list[tuple[object, ...]], list[tuple[str, int, int, int, str]], int]:
    """A recording's symbolization of frames written in batches: with `early`, the loop's
    tick() runs after each batch but the last (cache-only passes), then finish(); else only
    finish(). Per frame its name and symbol rows, the report's figures per mapping, and how
    many frames had a name before finish()."""
    mappings = [Mapping(build_id(prog), 0, 0, 0x1000, 0x9000, 0, str(prog)),
                Mapping(build_id(Path(LIBC)), 0, 0, 0x1000, 0x9000, 0, LIBC)]
    live = LiveSymbolizer(SymbolCache(d), writer=ProfileWriter(path) if early else None)
    w = live.writer or ProfileWriter(path)
    w.add_mappings(enumerate(mappings, start=1))
    for m in mappings:
        live.module(m.name, m.build_id)
    first = 1
    named_early = 0
    for i, batch in enumerate(batches):
        w.add_frames(enumerate(batch, start=first))
        w.commit()
        first += len(batch)
        if early and i < len(batches) - 1:
            live.tick(time.monotonic() + 60)
            named_early = w.db.execute("SELECT COUNT(*) FROM stack_profile_frame WHERE name != ''").fetchone()[0]
    report = live.finish(w)
    rows = w.db.execute(
        "SELECT f.id, f.name, s.name, s.source_file, s.line_number, s.inlined FROM stack_profile_frame f"
        " LEFT JOIN stack_profile_symbol s ON s.symbol_set_id = f.symbol_set_id ORDER BY f.id, s.id").fetchall()
    w.close()
    assert report is not None
    return rows, [(m.name, m.frames, m.named, m.with_lines, m.outcome) for m in report.mappings], named_early


@pytest.mark.parametrize("per_pass", [None, 1])
def test_frames_symbolized_early_from_the_cache_end_as_in_one_pass(prog: Path, tmp_path: Path, per_pass: int | None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert LLVM is not None
    if per_pass is not None:  # a pass looks at so many frames only: the others wait for the next, or the end
        monkeypatch.setattr(live_module, "EARLY_MAX_FRAMES", per_pass)
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)  # the same tool (cache context) whatever PATH says
    d = tmp_path / "cache" / "heapscope"
    pc = malloc_call_pc(prog)
    libc = [Frame(MappingId(2), 0x28000 + 0x1357 * k) for k in range(6)]
    # GIVEN a cache that knows some addresses of the program and of libc
    _recorded(tmp_path / "fill.db", prog, [[Frame(MappingId(1), pc), Frame(MappingId(1), 0x10), *libc[:3]]], d,
              early=False)
    # WHEN a recording writes frames in two batches, each with addresses the cache knows and does not,
    # and symbolizes early (from the cache) between them
    batches = [[Frame(MappingId(1), pc), Frame(MappingId(1), pc - 3), libc[0], libc[4]],
               [Frame(MappingId(1), 0x10), libc[1], libc[5]]]
    rows, figures, named_early = _recorded(tmp_path / "early.db", prog, batches, d, early=True)
    # THEN the frames the cache knew were named while it ran (pc and libc's first; with a pass
    # of one frame, pc only), the others at the end
    assert named_early == (2 if per_pass is None else 1)
    # AND its frames, symbols and report's figures are those of one pass at the end
    assert (rows, figures) == _recorded(tmp_path / "once.db", prog, batches, d, early=False)[:2]


def _ticked(path: Path, prog: Path, d: Path, pcs: list[int]) -> tuple[LiveSymbolizer, ProfileWriter]:
    """A recording into `path` whose target announced `prog` and wrote frames at `pcs` in it, its
    loop ticked long after the start (warming and an early pass done); the cache in `d`."""
    live = LiveSymbolizer(SymbolCache(d), writer=ProfileWriter(path))
    w = live.writer
    assert w is not None
    w.add_mappings([(1, Mapping(build_id(prog), 0, 0, 0x1000, 0x9000, 0, str(prog)))])
    live.module(str(prog), build_id(prog))
    w.add_frames([(i + 1, Frame(MappingId(1), pc)) for i, pc in enumerate(pcs)])
    w.commit()
    live.tick(time.monotonic() + 60)
    return live, w


def test_new_addresses_of_a_known_module_are_asked_while_the_target_runs(prog: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert LLVM is not None
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)  # the same tool (cache context) whatever PATH says
    d = tmp_path / "cache" / "heapscope"
    pc = malloc_call_pc(prog)
    # GIVEN a cache that knows the program (it has DWARF) from a run that saw one address
    _recorded(tmp_path / "fill.db", prog, [[Frame(MappingId(1), pc)]], d, early=False)
    # WHEN a recording's early pass meets that address and two the cache does not know
    live, w = _ticked(tmp_path / "early.db", prog, d, [pc, pc - 3, 0x10])
    # THEN a tool was started while the target runs and asked for the two new addresses (before,
    # the module being known, none was: the end started one and waited for it to read the DWARF)
    assert live.warm is not None
    asked = {a for (f, a) in live.warm._ahead if Path(f).resolve() == prog.resolve()}
    assert asked == {pc - 3, 0x10}
    warm = live.warm
    # AND the end names every frame as one pass without any cache or recording does
    live.finish(w)
    got = [str(r[0]) for r in w.db.execute("SELECT name FROM stack_profile_frame ORDER BY id")]
    w.close()
    assert got == _names(_one_module_profile(tmp_path / "plain.db", prog, [pc, pc - 3, 0x10]), None)
    assert warm.gone(10)



def _asked_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("ask-*"))


def _warms_at_once(d: Path, prog: Path) -> bool:
    """Whether a recording that announces `prog` has the tool read it as soon as its loop ticks."""
    live = LiveSymbolizer(SymbolCache(d))
    live.module(str(prog), build_id(prog))
    live.tick(time.monotonic())
    warmed = live.warm is not None
    live.close()
    return warmed


def test_a_module_the_tool_was_run_for_is_warmed_as_soon_as_the_next_recording_announces_it(
        prog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert LLVM is not None
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)  # the same tool (cache context) whatever PATH says
    d = tmp_path / "cache" / "heapscope"
    pc = malloc_call_pc(prog)
    # GIVEN a cache that knows the program (it has DWARF; a module met for the first time is
    # not yet a reason to warm it), and a run that still had to run the tool for a new address
    _names(_one_module_profile(tmp_path / "fill.db", prog, [pc]), SymbolCache(d))
    assert _asked_files(d) == []
    _names(_one_module_profile(tmp_path / "first.db", prog, [pc, pc - 3]), SymbolCache(d))
    [entry] = _entries(d)
    assert _asked_files(d) == [entry.name.replace("sym-", "ask-", 1).removesuffix(".json")]
    # WHEN a recording's target announces the program, and the loop ticks at once
    live = LiveSymbolizer(SymbolCache(d))
    live.module(str(prog), build_id(prog))
    live.tick(time.monotonic())
    # THEN the tool is reading its debug info already (a short target's new addresses cost no start at its end)
    assert live.warm is not None and Path(next(iter(live.warm._warmed))).resolve() == prog.resolve()
    live.close()
    # AND a run that the cache answers whole removes the file: its next recording warms nothing early
    _names(_one_module_profile(tmp_path / "second.db", prog, [pc]), SymbolCache(d))
    assert _asked_files(d) == []
    assert not _warms_at_once(d, prog)
    # AND a run that meets a new address makes it again
    _names(_one_module_profile(tmp_path / "third.db", prog, [pc, 0x10]), SymbolCache(d))
    assert len(_asked_files(d)) == 1


def test_a_run_whose_early_passes_answer_a_module_whole_drops_its_ask_file(
        prog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert LLVM is not None
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)
    d = tmp_path / "cache" / "heapscope"
    pc = malloc_call_pc(prog)
    # GIVEN a cache that knows two addresses of the program, and its ask- file from the run that met the second
    _recorded(tmp_path / "fill.db", prog, [[Frame(MappingId(1), pc)]], d, early=False)
    _recorded(tmp_path / "first.db", prog, [[Frame(MappingId(1), pc), Frame(MappingId(1), pc - 3)]], d, early=False)
    assert len(_asked_files(d)) == 1
    # WHEN a recording's early pass names all of its frames of the program from the cache, and the end has none left
    live, w = _ticked(tmp_path / "early.db", prog, d, [pc, pc - 3])
    live.finish(w)
    named = [str(r[0]) for r in w.db.execute("SELECT name FROM stack_profile_frame ORDER BY id")]
    w.close()
    assert named == _names(_one_module_profile(tmp_path / "plain.db", prog, [pc, pc - 3]), None)
    # THEN the file is gone: the next recording does not warm the tool for the program
    assert _asked_files(d) == []


@pytest.mark.parametrize("other_frames", [0, 1])
def test_a_run_without_frames_of_a_module_drops_its_ask_file(prog: Path, tmp_path: Path, other_frames: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A module announced but in no frame of the profile (ld.so in a recording of `ls`) needed no
    tool in that run: its ask- file, set by a run that met new addresses of it, goes. Before, only
    a run with its frames dropped it, and every later recording warmed the tool for it at start."""
    assert LLVM is not None
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)
    d = tmp_path / "cache" / "heapscope"
    pc = malloc_call_pc(prog)
    # GIVEN the program's ask- file, from a run that met a new address of it
    _names(_one_module_profile(tmp_path / "fill.db", prog, [pc]), SymbolCache(d))
    _names(_one_module_profile(tmp_path / "first.db", prog, [pc, pc - 3]), SymbolCache(d))
    assert len(_asked_files(d)) == 1
    # WHEN a recording announces the program and libc, and writes no frame of the program (none
    # at all, or one of libc)
    live = LiveSymbolizer(SymbolCache(d))
    w = ProfileWriter(tmp_path / "other.db")
    w.add_mappings([(1, Mapping(build_id(prog), 0, 0, 0x1000, 0x9000, 0, str(prog))),
                    (2, Mapping(build_id(Path(LIBC)), 0, 0, 0x1000, 0x9000, 0, LIBC))])
    w.add_frames([(1, Frame(MappingId(2), 0x1000))][:other_frames])
    w.commit()
    live.module(str(prog), build_id(prog))
    live.module(LIBC, build_id(Path(LIBC)))
    live.finish(w)
    w.close()
    # THEN the file is gone: the next recording does not warm the tool for the program
    assert _asked_files(d) == []
    assert not _warms_at_once(d, prog)


def test_a_warm_tool_asks_ahead_only_what_its_pipe_takes_and_answers_as_a_fresh_one(prog: Path) -> None:
    assert LLVM is not None
    pc = malloc_call_pc(prog)
    addresses = [pc - k for k in range(2000)]  # ~100 KiB of requests: more than PIPE_ROOM
    warm = WarmSymbolizer(LLVM)
    try:
        # WHEN more addresses are asked ahead than the pipe holds without waiting
        first = warm.prefetch(str(prog), addresses)
        # THEN only so many are written (the recording loop never waits on the tool)...
        assert 0 < first < len(addresses)
        assert sum(len(f'CODE "{prog}" 0x{a:x}\n') for a in addresses[:first]) <= PIPE_ROOM
        # ...asking the same again writes nothing new until answers come back
        assert warm.prefetch(str(prog), addresses[:first]) == 0
        # AND the answers, asked ahead or not, in any order, are a fresh tool's
        mixed = addresses[first:first + 50] + addresses[:50][::-1] + [0x10]
        assert warm.symbolize_files([(str(prog), mixed), (LIBC, [0x28000])]) == symbolize_files(
            LLVM, [(str(prog), mixed), (LIBC, [0x28000])])
    finally:
        warm.stop()
    # AND stop() ends the tool without waiting for it; it is reaped all the same
    assert warm.gone(10)


def test_warm_symbolizer_killed_from_outside_is_reaped() -> None:
    """A tool that dies of a signal of its own (a hung-up terminal's SIGHUP reaches it too) is
    reaped by its reader when its output ends, not left a zombie until close()."""
    assert LLVM is not None
    warm = WarmSymbolizer(LLVM)
    try:
        os.kill(warm.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 30
        while warm.proc.returncode is None:  # set by the reader's wait, not by a poll of ours
            assert time.monotonic() < deadline, "llvm-symbolizer killed by SIGHUP was not reaped"
            time.sleep(0.05)
        assert warm.proc.returncode == -signal.SIGHUP
    finally:
        warm.close()


def test_a_known_modules_symbol_table_is_read_ahead_only_for_addresses_it_must_name(prog: Path, tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    assert LLVM is not None
    monkeypatch.setenv("HEAPSCOPE_LLVM_SYMBOLIZER", LLVM)  # the same tool (cache context) whatever PATH says
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)  # with a server, the early passes are off: read at once
    d = tmp_path / "cache" / "heapscope"
    bare = tmp_path / "bare"  # the program without its DWARF: named from its symbol table
    subprocess.run(["objcopy", "--strip-debug", str(prog), str(bare)], check=True)
    pc = malloc_call_pc(prog)
    frames = [Frame(MappingId(1), pc), Frame(MappingId(1), pc - 3), Frame(MappingId(1), 0x10)]
    # GIVEN a cache that knows the program from a run that saw one address
    _recorded(tmp_path / "fill.db", bare, [frames[:1]], d, early=False)
    live = LiveSymbolizer(SymbolCache(d), writer=ProfileWriter(tmp_path / "early.db"))
    w = live.writer
    assert w is not None
    w.add_mappings([(1, Mapping(build_id(bare), 0, 0, 0x1000, 0x9000, 0, str(bare)))])
    live.module(str(bare), build_id(bare))
    # WHEN the recording's target runs a while with only that address in its profile
    w.add_frames([(1, frames[0])])
    w.commit()
    live.tick(time.monotonic() + 60)
    # THEN no symbol table is read (every process of a build announces libc, ld.so, sh: nothing to name)
    assert live._read_ahead == []
    # WHEN an early pass meets addresses the cache does not know
    w.add_frames([(2, frames[1]), (3, frames[2])])
    w.commit()
    live.tick(time.monotonic() + 120)
    # THEN the program's symbol table is read ahead, once, for the end to name them from
    assert [Path(f).resolve() for f in live._read_ahead] == [bare.resolve()]
    assert live.finish(w) is not None
    w.close()
