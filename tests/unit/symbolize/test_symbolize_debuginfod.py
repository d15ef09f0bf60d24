"""symbolize.debuginfod against a loopback HTTP server started here: the cache is private
and never followed through a link, a wrong file is refused, failures are one line each,
and the Locator falls back to it for a stripped binary."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from debuginfod_support import DebuginfodServer as Server
from symbolize_progs import INLINED_SOURCE, OTHER_SOURCE, SplitBuild, compile_cxx, needs_toolchain, split_debug

from heapscope.symbolize.debuginfod import Debuginfod, urls_from_env
from heapscope.symbolize.locate import Locator

pytestmark = [needs_toolchain, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> SplitBuild:
    d = tmp_path_factory.mktemp("dbgd")
    (d / "full").mkdir()
    return split_debug(compile_cxx(INLINED_SOURCE, d / "full" / "prog"), d / "split")


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("other")
    return compile_cxx(OTHER_SOURCE, d / "prog")


@pytest.fixture
def server(build: SplitBuild) -> Iterator[Server]:
    s = Server({f"/buildid/{build.build_id}/debuginfo": build.debug.read_bytes()})
    yield s
    s.close()


def test_fetch_caches_privately_and_reuses(build: SplitBuild, server: Server, tmp_path: Path) -> None:
    cache = tmp_path / "c" / "debuginfod"
    d = Debuginfod([server.url], cache)
    got = d.fetch(build.build_id)
    assert got == str(cache / f"{build.build_id}.debuginfo")
    assert Path(got).read_bytes() == build.debug.read_bytes()
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    # a second client finds it in the cache without asking
    again = Debuginfod([server.url], cache)
    assert again.fetch(build.build_id) == got
    assert len(server.requests) == 1 and d.errors == [] and again.errors == []


def test_missing_file_is_recorded_with_the_reason(server: Server, tmp_path: Path) -> None:
    d = Debuginfod([server.url], tmp_path / "c")
    assert d.fetch("ab" * 20) is None
    assert d.missing["ab" * 20] == f"{server.url}: not found"


def test_a_file_of_another_build_is_refused(build: SplitBuild, other: Path, tmp_path: Path) -> None:
    s = Server({f"/buildid/{build.build_id}/debuginfo": other.read_bytes()})
    try:
        d = Debuginfod([s.url], tmp_path / "c")
        assert d.fetch(build.build_id) is None
        assert "refused" in d.missing[build.build_id]
        assert list((tmp_path / "c").iterdir()) == []  # the partial download is gone
    finally:
        s.close()


def test_symlinked_or_shared_cache_is_refused(build: SplitBuild, server: Server, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    d = Debuginfod([server.url], tmp_path / "link")
    assert d.fetch(build.build_id) is None
    assert len(d.errors) == 1 and "symbolic link" in d.errors[0]
    assert list(real.iterdir()) == [] and server.requests == []
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    d = Debuginfod([server.url], shared)
    assert d.fetch(build.build_id) is None
    assert len(d.errors) == 1 and "private" in d.errors[0]


def test_cached_link_is_not_followed(build: SplitBuild, server: Server, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    cache.mkdir(mode=0o700)
    (cache / f"{build.build_id}.debuginfo").symlink_to(build.debug)
    d = Debuginfod([server.url], cache)
    got = d.fetch(build.build_id)
    # the link is reported, and replaced by a downloaded, checked file
    assert any("symbolic link" in e for e in d.errors)
    assert got is not None and not os.path.islink(got) and len(server.requests) == 1


def test_unreachable_server_is_one_line_and_not_asked_again(tmp_path: Path) -> None:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = Debuginfod([f"http://127.0.0.1:{port}"], tmp_path / "c", timeout=5)
    assert d.fetch("ab" * 20) is None and d.fetch("cd" * 20) is None
    assert len(d.errors) == 1 and "unreachable" in d.errors[0]


def test_locator_falls_back_to_debuginfod(build: SplitBuild, server: Server, tmp_path: Path) -> None:
    plain = Locator((), debug_roots=[]).locate(str(build.stripped), build.build_id)
    assert plain.status == "no_debug_info"
    located = Locator((), debug_roots=[], debuginfod=Debuginfod([server.url], tmp_path / "c")).locate(
        str(build.stripped), build.build_id)
    assert located.status == "found" and located.debug_file.endswith(f"{build.build_id}.debuginfo")


def test_urls_from_env() -> None:
    assert urls_from_env({"DEBUGINFOD_URLS": "https://a.example/ http://b.example ftp://c"}) == [
        "https://a.example", "http://b.example"]
    assert urls_from_env({}) == []


def test_locator_takes_the_executable_when_no_file_of_the_build_is_here(build: SplitBuild, tmp_path: Path) -> None:
    # GIVEN a server with the (unstripped) executable of the build but no debuginfo, and no local file
    s = Server({f"/buildid/{build.build_id}/executable": build.full.read_bytes()})
    try:
        d = Debuginfod([s.url], tmp_path / "c")
        located = Locator((), debug_roots=[], debuginfod=d).locate("/gone/prog", build.build_id)
        # THEN the executable is used (here it has DWARF too), after the debuginfo was asked for
        assert located.status == "found" and located.debug_file.endswith(f"{build.build_id}.executable")
        assert s.requests == [f"/buildid/{build.build_id}/debuginfo", f"/buildid/{build.build_id}/executable"]
    finally:
        s.close()
