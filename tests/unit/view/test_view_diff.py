"""view.diff across two builds: call paths match by function and source file (or library),
not by the executable's name or path."""

from __future__ import annotations

from pathlib import Path

from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.reader import open_profile
from heapscope.store.writer import ProfileWriter
from heapscope.view.diff import EXECUTABLE, Side, changes, diff_graph, dump_ts, pick_process, read_side

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def _build(path: Path, exe: str, build_dir: str, pc_shift: int, sizes: tuple[int, int]) -> Path:
    """main -> make_widget (app.c) -> malloc, and main -> helper (no source file) -> malloc."""
    w = ProfileWriter(path)
    w.add_mappings([(1, Mapping(f"{pc_shift:04x}", 0, 0, 0x5000, 0x9000, 0, exe)),
                    (2, Mapping("bb22", 0, 0, 0x7F000000, 0x7F100000, 0, LIBC))])
    w.add_frames([(1, Frame(MappingId(1), 0x1100 + pc_shift, "main")),
                  (2, Frame(MappingId(1), 0x1200 + pc_shift, "make_widget")),
                  (3, Frame(MappingId(1), 0x1300 + pc_shift, "helper")),
                  (4, Frame(MappingId(2), 0x9A000, "malloc"))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 4), (4, 1, 1, 3), (5, 2, 4, 4)])
    info = ProcessInfo(Upid(1), pid=100, ppid=1, name=Path(exe).name, cmdline=exe, exe=exe, uid=0, start_ts=10)
    w.add_process(info)
    w.set_process_flags(info, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=1))
    w.add_dump(1, 0, 1000, "exit", [(3, 1, sizes[0]), (5, 1, sizes[1])], "libc.malloc")
    w.symbols().write_symbols(
        [(0, 0, "make_widget", f"{build_dir}/src/app.c", 12, 0)],
        [("make_widget", 0, 2)])
    w.close()
    return path


def _side(path: Path) -> Side:
    with open_profile(path) as p:
        proc = pick_process(p, None)
        ts, label = dump_ts(p, proc, None)
        return read_side(p, proc, ts, label)


def test_two_builds_with_different_names_match(tmp_path: Path) -> None:
    # GIVEN two builds of one program: other names, other build directories, other addresses
    a = _side(_build(tmp_path / "a.db", "/opt/app-1.2/bin/app-1.2", "/build/1.2", 0, (100, 40)))
    b = _side(_build(tmp_path / "b.db", "/opt/app-1.3/bin/app-1.3", "/build/1.3", 0x40, (150, 40)))
    # WHEN they are diffed
    rows = changes(a, b, "space")
    # THEN the one path that grew is matched across the builds, and nothing else differs
    assert len(rows) == 1
    (row,) = rows
    assert (row.before, row.after) == (100, 150)
    assert row.path == (("main", EXECUTABLE), ("make_widget", "app.c"), ("malloc", "libc.so.6"))
    # AND both sides have the same paths (helper, without a source file, matched by EXECUTABLE)
    assert a.self_values.keys() == b.self_values.keys()
    assert (("main", EXECUTABLE), ("helper", EXECUTABLE), ("malloc", "libc.so.6")) in a.self_values
    # AND the union tree has each function once
    graph = diff_graph(a, b)
    assert sorted(graph.tree.name) == ["helper", "main", "make_widget", "malloc", "malloc"]


def test_jit_frames_of_two_runs_match_by_their_names() -> None:
    # GIVEN the same JavaScript function in two runs, each in its own process's pseudo-mapping
    from heapscope.model import unknown_code_name
    from heapscope.view.diff import path_keys
    from heapscope.view.tree import MergedTree

    def tree(pid: int) -> MergedTree:
        return MergedTree(parent=[-1, 0], depth=[0, 1], name=["main", "JS:*makeBuffers app.js:2"],
                          map_name=["/usr/bin/node", unknown_code_name(pid)], source_file=[None, None],
                          line_number=[None, None])

    # THEN their call paths are the same
    assert path_keys(tree(100), "/usr/bin/node") == path_keys(tree(200), "/usr/bin/node")
    assert path_keys(tree(100))[1][1] == ("JS:*makeBuffers app.js:2", "[unknown]")


def test_paths_both_sides_have_are_one_object_and_read_as_plain_tuples() -> None:
    """A diff's lookups hashed each ~40-frame path ~15 times (most of a build's diff): paths
    remember their hash, and the two sides share each path they both have."""
    from heapscope.model import VIEWS
    from heapscope.store.reader import Process
    from heapscope.view.diff import PathKey, SharedPaths, path_keys
    from heapscope.view.tree import MergedTree

    def tree(names: list[str]) -> MergedTree:
        n = len(names)
        return MergedTree(parent=[-1] + list(range(n - 1)), depth=list(range(n)), name=names,
                          map_name=["/bin/demo"] * n, source_file=[None] * n, line_number=[None] * n)

    # GIVEN main > parse > xmalloc on one side, main > parse > lex on the other
    shared: SharedPaths = {}
    a = path_keys(tree(["main", "parse", "xmalloc"]), "/bin/demo", shared)
    b = path_keys(tree(["main", "parse", "lex"]), "/bin/demo", shared)
    # THEN the paths they share are the same objects, the others not, and each is its plain tuple
    assert a[0] is b[0] and a[1] is b[1] and a[2] is not b[2]
    plain = (("main", EXECUTABLE), ("parse", EXECUTABLE), ("lex", EXECUTABLE))
    looked_up: dict[PathKey, int] = {plain: 1}
    assert b[2] == plain and hash(b[2]) == hash(plain) and looked_up[b[2]] == 1
    # AND the union tree of the two hangs each path under its parent
    side: dict[PathKey, dict[str, int]] = {k: dict.fromkeys(VIEWS, 1) for k in a}
    other: dict[PathKey, dict[str, int]] = {k: dict.fromkeys(VIEWS, 2) for k in b}
    proc = Process(ProcessInfo(Upid(1), 7, 1, "demo", "demo", "/bin/demo", 0, 0), None)
    graph = diff_graph(Side("a", proc, 1, side, {}), Side("b", proc, 2, other, {}))
    assert graph.tree.name == ["main", "parse", "lex", "xmalloc"] and graph.tree.parent == [-1, 0, 1, 1]
    assert graph.snapshots[0].self_values["space"] == [1, 1, 0, 1]
