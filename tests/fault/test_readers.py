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
from hs_integration import HEAPSCOPE, run_process

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
