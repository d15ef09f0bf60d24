"""Every command that reads a profile, on every kind of malformed profile: one line, non-zero, never a hang.

Commands: report, flamegraph, diff, leaks, sql (--flamegraph, which walks the
call tree), symbolize, and export in each format. Profiles: a FIFO (opening
it for reading would block), a callsite parent cycle, a chain deeper than any
stack, NULL in a NOT NULL column, text in an integer column, a number no
integer column can hold, a truncated file, a file that is not SQLite, an
empty file. Each command must end within the timeout with a non-zero status
and exactly one line on stderr, no traceback, and write no output file.
A profile with the largest valid u64 values must work in every command.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hs_integration import HEAPSCOPE, Programs, run_process

from heapscope.export import FORMATS
from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
from heapscope.store.writer import ProfileWriter

U64_MAX = (1 << 64) - 1
TIMEOUT_S = 30


def write_profile(path: Path, *, base: int = 0x5000, rel_pc: int = 0x1100) -> Path:
    """A small good profile: one process, two dumps, a chain main -> work -> malloc."""
    w = ProfileWriter(path)
    w.set_metadata("interval", 1)
    w.add_mappings([(1, Mapping("ab12", 0, 0, base, base + 0x4000 if base < U64_MAX - 0x4000 else U64_MAX, 0,
                                "/usr/bin/prog"))])
    w.add_frames([(1, Frame(MappingId(1), rel_pc, "")), (2, Frame(MappingId(1), rel_pc + 0x10, "")),
                  (3, Frame(MappingId(1), rel_pc + 0x20, ""))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3)])
    info = ProcessInfo(Upid(1), pid=4242, ppid=1, name="prog", cmdline="prog", exe="/usr/bin/prog", uid=0,
                       start_ts=10)
    w.add_process(info)
    w.set_process_flags(info, ProcessFlags(sampling_interval_bytes=1, orig_sampling_interval_bytes=1))
    w.add_dump(1, 0, 1000, "periodic", [(3, 2, 64), (2, 1, 16)], "libc.malloc")
    w.add_dump(1, 1000, 2000, "exit", [(3, -1, -32)], "libc.malloc")
    w.close()
    return path


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for s in statements:
        db.execute(s)
    db.commit()
    db.close()


def fifo(p: Path) -> None:
    os.mkfifo(p)


def cycle(p: Path) -> None:
    write_profile(p)
    _sql(p, "UPDATE stack_profile_callsite SET parent_id = 3 WHERE id = 1")


def too_deep(p: Path) -> None:
    write_profile(p)
    _sql(p, "WITH RECURSIVE n(i) AS (SELECT 4 UNION ALL SELECT i + 1 FROM n WHERE i < 70003)"
            " INSERT INTO stack_profile_callsite (id, depth, parent_id, frame_id) SELECT i, i - 1, i - 1, 1 FROM n",
         "INSERT INTO heap_profile_allocation (ts, upid, heap_name, callsite_id, count, size)"
         " VALUES (1000, 1, 'libc.malloc', 70003, 1, 8)")


def null_in_not_null(p: Path) -> None:
    write_profile(p)
    # NOT NULL is enforced on write: drop it from the stored schema text first (a damaged or
    # hand-edited profile can look like this).
    _sql(p, "PRAGMA writable_schema = ON",
         "UPDATE sqlite_master SET sql = replace(sql, 'rel_pc INTEGER NOT NULL', 'rel_pc INTEGER')"
         " WHERE name = 'stack_profile_frame'")
    _sql(p, "UPDATE stack_profile_frame SET rel_pc = NULL WHERE id = 2")


def text_in_integer(p: Path) -> None:
    write_profile(p)
    _sql(p, "UPDATE stack_profile_frame SET mapping = 'one' WHERE id = 2")


def huge_value(p: Path) -> None:
    write_profile(p)
    _sql(p, "UPDATE stack_profile_frame SET rel_pc = 1e300 WHERE id = 2")


def truncated(p: Path) -> None:
    data = write_profile(p).read_bytes()
    p.write_bytes(data[: len(data) // 2])


def not_sqlite(p: Path) -> None:
    p.write_text("just some text, not a database\n" * 40)


def empty(p: Path) -> None:
    p.write_bytes(b"")


MALFORMED: dict[str, Callable[[Path], None]] = {f.__name__: f for f in (
    fifo, cycle, too_deep, null_in_not_null, text_in_integer, huge_value, truncated, not_sqlite, empty)}


def commands(profile: Path, out: Path) -> dict[str, list[str]]:
    cmds = {
        "report": ["report", str(profile)],
        "flamegraph": ["flamegraph", str(profile), "-o", str(out)],
        "diff": ["diff", str(profile), str(profile)],
        "leaks": ["leaks", str(profile)],
        "sql": ["sql", str(profile), "--flamegraph"],
        "symbolize": ["symbolize", str(profile)],
    }
    for fmt in FORMATS:
        cmds[f"export-{fmt}"] = ["export", str(profile), "--format", fmt, "-o", str(out)]
    return cmds


COMMANDS = list(commands(Path("p"), Path("o")))


@pytest.mark.parametrize("kind", list(MALFORMED))
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.timeout(TIMEOUT_S * 2)
def test_one_line_and_non_zero(tmp_path: Path, command: str, kind: str) -> None:
    # GIVEN a malformed profile
    profile = tmp_path / "bad.db"
    MALFORMED[kind](profile)
    out = tmp_path / "out"
    # WHEN a reader command runs on it
    r = run_process([*HEAPSCOPE, *commands(profile, out)[command]], timeout=TIMEOUT_S)
    # THEN it ends with a non-zero status and one line naming the problem, writing nothing
    err = r.stderr.decode(errors="replace")
    assert r.returncode not in (0, None) and r.returncode > 0, r.describe()
    assert "Traceback" not in err, r.describe()
    assert err.count("\n") == 1 and err.startswith("heapscope: error: "), r.describe()
    assert str(profile) in err or "SQL" in err, r.describe()
    assert not out.exists(), r.describe()


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.timeout(TIMEOUT_S * 2)
def test_the_largest_u64_values_work(tmp_path: Path, command: str) -> None:
    # GIVEN a profile whose addresses are at the top of the u64 range (stored as negative int64)
    profile = write_profile(tmp_path / "top.db", base=U64_MAX - 0xFFFF, rel_pc=U64_MAX - 0x100)
    out = tmp_path / "out"
    # WHEN a reader command runs on it THEN it works
    r = run_process([*HEAPSCOPE, *commands(profile, out)[command]], timeout=TIMEOUT_S)
    assert r.returncode in ((0, 1) if command == "symbolize" else (0,)), r.describe()
    assert b"Traceback" not in r.stderr, r.describe()


# --- a real recording, every column of every table damaged ------------------------------------------
#
# Each text column gets a NUL (in every row, and in one row only: then a heap name, say,
# splits into two heaps), and each column gets a value of the wrong type (text in an integer
# column, a number in a text column, NULL, a blob). Every reader, in this process for speed,
# must end with normal output (exit 0) or one `heapscope: error:` line and a non-zero exit.

_WRONG = {"text": "x\x00y", "int": 7, "null": None, "blob": b"\x00\xff"}


@pytest.fixture(scope="module")
def recorded(programs: Programs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hs_integration import Recorder

    # A shell and two programs: several dumps, so that one row damaged makes a second heap.
    tiny = programs.path("tiny")
    rec = Recorder(tmp_path_factory.mktemp("recorded"))(["sh", "-c", f"{tiny} && {tiny}"], interval=1)
    assert rec.returncode == 0, rec.describe()
    return Path(rec.db)


def _columns(profile: Path) -> dict[str, list[tuple[str, str]]]:
    db = sqlite3.connect(profile)
    try:
        tables = [str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [(str(r[1]), str(r[2]).upper()) for r in db.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        db.close()


def _reader_commands(profile: Path, out: Path) -> list[list[str]]:
    p, o = str(profile), str(out)
    cmds = [["report", p], ["report", "--tree", "--min-percent", "0", p], ["leaks", p], ["flamegraph", p, "-o", o],
            ["diff", p, p], ["sql", p, "--flamegraph"], ["sql", p, "SELECT * FROM heap_profile"],
            ["report", "--view", "temporary", p], ["report", "--lifetimes", p], ["report", "--sizes", p]]
    return cmds + [["export", p, "--format", fmt, "-o", o] for fmt in FORMATS]


def _run_in_process(argv: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    import heapscope.cli

    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        status = heapscope.cli.main(argv)
    return status, sink.getvalue()


def test_recorded_profile_has_the_tables_damaged_below(recorded: Path) -> None:
    # The damage below reaches the peak table and the heap names only if the recording has them.
    tables = _columns(recorded)
    assert sorted(tables) == sorted(_DAMAGED_TABLES)  # a new table gets its damage too
    db = sqlite3.connect(recorded)
    try:
        assert db.execute("SELECT COUNT(*) FROM heap_profile").fetchone()[0] >= 2
    finally:
        db.close()


_DAMAGED_TABLES = ["heapscope_metadata", "process", "heapscope_process", "stats", "stack_profile_mapping",
                   "stack_profile_frame", "stack_profile_callsite", "heap_profile_allocation", "heap_profile",
                   "stack_profile_symbol", "heapscope_allocation_stream", "heapscope_peak_allocation",
                   "heapscope_memory_series", "heapscope_memory_sample", "heapscope_callsite_lifetime",
                   "heapscope_callsite_size", "heapscope_label", "heapscope_label_allocation",
                   "heapscope_label_peak_allocation", "heapscope_mapping_package"]


@pytest.mark.parametrize("table", _DAMAGED_TABLES)
@pytest.mark.timeout(600)
def test_every_column_damaged_every_reader_ends_cleanly(recorded: Path, tmp_path: Path, table: str) -> None:
    columns = _columns(recorded)[table]
    failures = []
    for column, sql_type in columns:
        if table == "process" and column == "id":
            continue  # generated from upid
        edits: list[tuple[str, str, object]] = []
        if "TEXT" in sql_type:
            nul = f"CAST(COALESCE(\"{column}\", '') || X'00' || 'z' AS TEXT)"
            edits += [("nul, every row", f'UPDATE {table} SET "{column}" = {nul}', None),
                      ("nul, last row", f'UPDATE {table} SET "{column}" = {nul}'
                                        f" WHERE rowid = (SELECT MAX(rowid) FROM {table})", None)]
        for kind, value in _WRONG.items():
            edits += [(f"{kind}, every row", f'UPDATE {table} SET "{column}" = ?', value),
                      (f"{kind}, last row", f'UPDATE {table} SET "{column}" = ?'
                                            f" WHERE rowid = (SELECT MAX(rowid) FROM {table})", value)]
        for what, statement, value in edits:
            # GIVEN the recorded profile with this column damaged
            profile = tmp_path / "damaged.db"
            profile.write_bytes(recorded.read_bytes())
            db = sqlite3.connect(profile)
            try:
                db.execute(statement, () if "?" not in statement else (value,))
                db.commit()
            except sqlite3.IntegrityError:
                continue  # the schema refuses this value: no profile can hold it
            finally:
                db.close()
            # WHEN every reader runs on it THEN each ends cleanly
            failures += [f"{column} ({what}): {f}" for f in _unclean_readers(profile, tmp_path / "out")]
    assert not failures, "\n".join(failures[:20])


def _unclean_readers(profile: Path, out: Path) -> list[str]:
    """Every reader run on `profile`: those that did not end with output and 0, or with one
    error line and non-zero."""
    failures = []
    for argv in _reader_commands(profile, out):
        if out.exists():
            out.unlink()
        try:
            status, said = _run_in_process(argv)
        except BaseException as e:  # noqa: BLE001 - what escapes is the finding
            failures.append(f"{argv[0]} {argv[-1] if argv[0] == 'export' else ''} raised {type(e).__name__}: {e}")
            continue
        lines = [x for x in said.splitlines() if x.startswith("heapscope: error:")]
        if status != 0 and (len(lines) != 1 or "Traceback" in said):
            failures.append(f"{argv}: exit {status}: {said[-300:]!r}")
    return failures


@pytest.mark.timeout(600)
def test_sample_counts_beyond_a_doubles_precision_end_every_reader_cleanly(recorded: Path, tmp_path: Path) -> None:
    # GIVEN the recorded profile at interval 2 with 2^61 samples of 2^62 sampled bytes a row, no
    # real sizes (the estimate's ratio rounds to exactly 1: its derivative cancelled to 0)
    profile = tmp_path / "huge.db"
    profile.write_bytes(recorded.read_bytes())
    _sql(profile, "UPDATE heapscope_process SET sampling_interval_bytes = 2, orig_sampling_interval_bytes = 2")
    _sql(profile, "UPDATE heapscope_metadata SET value = '2' WHERE key = 'interval'")
    _sql(profile, "UPDATE heap_profile_allocation SET real_size = NULL,"
                  " count = CASE WHEN count < 0 THEN -(1 << 61) ELSE 1 << 61 END,"
                  " size = CASE WHEN size < 0 THEN -(1 << 62) ELSE 1 << 62 END")
    # WHEN every reader runs on it THEN each ends cleanly
    assert not _unclean_readers(profile, tmp_path / "out")


@pytest.mark.parametrize(("edit", "command"), [
    ("UPDATE heap_profile SET heap_name = 'libc.malloc' || X'00' || 'x' WHERE rowid = 1", "report"),
    ("UPDATE heap_profile SET heap_name = 'libc.malloc' || X'00' || 'x' WHERE rowid = 1", "flamegraph"),
    ("UPDATE heapscope_peak_allocation SET upid = 'one'", "diff"),
])
@pytest.mark.timeout(TIMEOUT_S * 2)
def test_nul_in_a_heap_name_and_text_in_the_peak_upid(recorded: Path, tmp_path: Path, edit: str,
                                                      command: str) -> None:
    # GIVEN a recorded profile with a NUL in one heap name, or text in the peak table's upid
    profile = tmp_path / "p.db"
    profile.write_bytes(recorded.read_bytes())
    _sql(profile, edit)
    # WHEN the command runs as a user runs it
    r = run_process([*HEAPSCOPE, *commands(profile, tmp_path / "out")[command]], timeout=TIMEOUT_S)
    # THEN no traceback: normal output, or one line and a non-zero status
    err = r.stderr.decode(errors="replace")
    assert "Traceback" not in err, r.describe()
    assert r.returncode == 0 or (r.returncode > 0 and err.count("\n") == 1), r.describe()
