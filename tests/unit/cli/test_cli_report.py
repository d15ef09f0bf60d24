"""`heapscope report` in-process through heapscope.cli.main, plus one real pipe to `head`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import heapscope
from heapscope.cli import main


def test_minor_processes_are_one_line_of_the_table(known_profile: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a profile whose process "idle" holds and allocated nothing (under 1% of child's 4 KiB)
    assert main(["report", str(known_profile), "--keep-wrappers"]) == 0  # its leaf frames are malloc
    out = capsys.readouterr().out
    blocks = out.split("\npid ")
    # THEN the table names it in its last line, and its section is left out
    assert len(blocks) == 3, out
    # (wrapped to 120 columns when piped)
    assert " ".join(line.strip() for line in blocks[0].splitlines()[-2:]) == (
        "... and 1 more process, each under 1% of the largest's peak and allocations (idle), not shown:"
        " --pid PID shows one, --all-processes every one")
    assert "idle  (upid 3)" not in out


def test_all_processes_prints_every_process(known_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(known_profile), "--all-processes", "--keep-wrappers"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    blocks = out.split("\npid ")
    assert len(blocks) == 4
    # THEN a table of processes, ranked by peak, opens the report
    assert blocks[0].splitlines()[1:] == [
        "  pid     peak  allocated  samples  lifetime  executable",
        "  200  4.0 KiB    4.0 KiB        4    0.00 s  /usr/bin/child",
        "  100    434 B      504 B        9         ?  /usr/bin/prog",
        "  300      0 B        0 B        0         ?  idle"]
    # AND the sections follow in its order: child (4 KiB), prog, idle
    blocks = ["pid " + blocks[2], blocks[1], blocks[3]]  # prog, child, idle
    prog = blocks[0]
    assert prog.startswith("pid 100  prog  (upid 1)\n")
    assert "  cmdline:       prog --run fast\n" in prog
    assert "  showing:       end (dump 2 of 2, exit, at 0.00 s); no peak recorded (--dump peak|end|N)\n" in prog
    assert "  space:         434 B\n" in prog
    assert "  on every stack: main (left out)\n" in prog
    # (the error of byte figures at the interval: sqrt(4096 x 434 B), of the first row sqrt(4096 x 410 B))
    assert "  sampling:      one sample per 4,096 bytes on average\n" in prog
    assert ("  error:         ±1.3 KiB on the total, ±1.3 KiB on a row of 410 B (standard errors: "
            "heapscope help estimates)\n") in prog
    assert "  unwinder:      libunwind\n" in prog
    assert "warnings" not in prog
    assert prog.endswith("  prog+0x1a2b  -         prog\n")  # the table; its layout is checked below
    child = blocks[1]
    assert child.startswith("200  child  (upid 2)\n")
    assert "  warnings:      buffer overran; client error: ring full; dropped_records = 3\n" in child
    assert "  sampling:      every allocation (exact)\n" in child
    assert blocks[2].startswith("300  idle  (upid 3)\n")
    assert "  space:         no dumps\n" in blocks[2]


def test_table_columns_line_up(known_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(known_profile), "--pid", "100", "--sort", "total", "--keep-wrappers"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("  total"):].splitlines()
    assert table == [
        "  total  total %   self  self %  function     location  library",
        "  426 B    98.2%   16 B    3.7%  parse        -         prog",
        "  410 B    94.5%  410 B   94.5%  malloc       -         libc.so.6",
        "    8 B     1.8%    8 B    1.8%  prog+0x1a2b  -         prog",
    ]


@pytest.mark.parametrize(("view", "first_rows"), [
    ("alloc_space", ["  480 B    95.2%  480 B   95.2%  malloc    -         libc.so.6",
                     "  466 B    92.5%   16 B    3.2%  parse     -         prog"]),
    # object views at interval > 1 show the raw samples behind each self value
    ("objects", ["      6    85.7%     1   14.3%        1  parse     -         prog",
                 "      5    71.4%     5   71.4%        5  malloc    -         libc.so.6"]),
    ("alloc_objects", ["      7    77.8%     7   77.8%        7  malloc    -         libc.so.6",
                       "      7    77.8%     1   11.1%        1  parse     -         prog"]),
])
def test_views_and_top(known_profile: Path, capsys: pytest.CaptureFixture[str], view: str,
                       first_rows: list[str]) -> None:
    assert main(["report", str(known_profile), "--pid", "100", "--view", view, "--top", "2",
                 "--sort", "total", "--keep-wrappers"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("  total"):].splitlines()
    assert lines[1:3] == first_rows
    assert len(lines) == 4 and "more functions; --top N shows more" in lines[3]


def test_unknown_pid_lists_pids(known_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(known_profile), "--pid", "7"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"heapscope: error: {known_profile}: no process with pid 7 (pids present: 100, 200, 300)\n"


def _bad_files(tmp: Path, good: Path) -> dict[str, Path]:
    files = {"missing": tmp / "missing.db"}
    files["empty"] = tmp / "empty.db"
    files["empty"].write_bytes(b"")
    files["text"] = tmp / "notes.txt"
    files["text"].write_text("not a profile\n" * 20)
    files["sqlite"] = tmp / "other.db"
    db = sqlite3.connect(files["sqlite"])
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    data = good.read_bytes()
    files["truncated"] = tmp / "truncated.db"
    files["truncated"].write_bytes(data[: len(data) * 2 // 3])
    page = int.from_bytes(data[16:18], "big")
    files["corrupt"] = tmp / "corrupt.db"
    files["corrupt"].write_bytes(data[:page] + bytes((i * 31 + 7) & 0xFF for i in range(len(data) - page)))
    return files


@pytest.mark.parametrize(("kind", "phrase"), [
    ("missing", "no such file"),
    ("empty", "empty file, not a heapscope profile"),
    ("text", "not a heapscope profile (not an SQLite database)"),
    ("sqlite", "not a heapscope profile (no heapscope_metadata table)"),
    ("truncated", "truncated"),
    ("corrupt", "corrupt profile"),
])
def test_bad_files_give_one_line_and_exit_1(known_profile: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], kind: str, phrase: str) -> None:
    path = _bad_files(tmp_path, known_profile)[kind]
    assert main(["report", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"heapscope: error: {path}: ") and phrase in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_top_must_be_positive(known_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(known_profile), "--top", "0"]) == 2
    assert "--top must be at least 1" in capsys.readouterr().err


def test_closed_pipe_is_quiet(known_profile: Path) -> None:
    # GIVEN a reader that has gone before heapscope writes anything (`| head -0`)
    src = str(Path(heapscope.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "heapscope", "report", str(known_profile)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    proc.stdout.close()
    # WHEN heapscope writes its report THEN it exits 0 and says nothing on stderr
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert err == b""


def test_an_unnamed_row_comes_with_why_and_how_to_name_it(known_profile: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a process with a row prog+0x1a2b beside named rows of prog (a file dpkg does not know)
    assert main(["report", str(known_profile), "--pid", "100", "--keep-wrappers", "--wide"]) == 0
    out = capsys.readouterr().out
    # THEN its header says why that row has no name, and what names it
    assert (f"  unnamed:       prog+0x… (static functions, no symbol in the file); fix: build it with -g, or give"
            f" its debug file: heapscope symbolize {known_profile} --binary-path DIR\n") in out
    # AND piped (120 columns) the line is wrapped under its label, none longer
    assert main(["report", str(known_profile), "--pid", "100", "--keep-wrappers"]) == 0
    out = capsys.readouterr().out
    head = out[:out.index("  total") if "  total" in out else out.index("  self")]
    assert "  unnamed:       prog+0x… (static functions" in head
    assert all(len(line) <= 120 for line in out.splitlines()), out
    # AND a report whose rows are all named has no such line
    assert main(["report", str(known_profile), "--pid", "200"]) == 0
    assert "unnamed:" not in capsys.readouterr().out


def test_the_table_of_processes_fits_the_width() -> None:
    from heapscope.cli.report import render_processes
    from heapscope.model import ProcessInfo, Upid
    from heapscope.store.reader import Process
    from heapscope.view.report import ProcessLine

    # GIVEN processes with a long executable and many small ones
    def line(upid: int, exe: str, peak: int) -> ProcessLine:
        info = ProcessInfo(Upid(upid), pid=1000 + upid, ppid=1, name=os.path.basename(exe), cmdline=f"{exe} -c x",
                           exe=exe, uid=0, start_ts=0)
        return ProcessLine(Process(info, None), peak, peak, 1, 10)
    long_exe = "/usr/lib/gcc/x86_64-linux-gnu/12/" + "very-long-directory-name/" * 6 + "cc1"
    lines = [line(1, long_exe, 1 << 30)] + [line(2 + k, f"/usr/bin/tool{k % 5}", 10) for k in range(60)]
    minor = {2 + k for k in range(60)}
    # WHEN it is rendered for 120 columns
    text = render_processes(lines, minor, 120)
    # THEN no line is wider, the executable cut in its middle, the line of the small ones wrapped
    assert all(len(ln) <= 120 for ln in text.splitlines()), text
    assert "…" in text.splitlines()[2] and text.splitlines()[2].endswith("/cc1")
    assert text.splitlines()[-1].startswith("      ") and "--all-processes every one" in text
    # AND without a width it is as long as it is
    assert long_exe in render_processes(lines, minor)


def test_the_frames_on_every_stack_fit_the_width(known_profile: Path) -> None:
    from heapscope.cli.report import render_report
    from heapscope.store.reader import open_profile
    from heapscope.view.report import build_reports

    # GIVEN a process whose stacks all start with many frames (a stripped binary: git+0x1f120 > ...)
    with open_profile(known_profile) as profile:
        [r] = build_reports(profile, "space", 100)
    r.common = ["_start", "__libc_start_main", "__libc_start_call_main"] + [f"git+0x{k:x}f0b2" for k in range(12)]
    # WHEN the report is rendered for 120 columns
    text = render_report(r, 5, width=120)
    # THEN that line fits, cut in its middle, its ends kept
    [line] = [ln for ln in text.splitlines() if "on every stack:" in ln]
    assert len(line) <= 120 and "…" in line and line.endswith("git+0xbf0b2 (left out)"), line
    assert "  on every stack: _start > __libc_start_main" in line
    # AND at full width (--wide) every frame is there
    assert " > ".join(r.common) in render_report(r, 5)


def test_a_builds_dozens_of_processes_leave_room_on_the_first_screen() -> None:
    from heapscope.cli.report import TABLE_ROWS, render_processes
    from heapscope.model import ProcessInfo, Upid
    from heapscope.store.reader import Process
    from heapscope.view.report import ProcessLine

    # GIVEN 30 compilers of similar size (none under 1% of the largest), as `make -j2` runs
    def line(upid: int, name: str, peak: int) -> ProcessLine:
        info = ProcessInfo(Upid(upid), pid=upid, ppid=1, name=name, cmdline=f"{name} f{upid}.c", exe=f"/usr/bin/{name}",
                           uid=0, start_ts=0)
        return ProcessLine(Process(info, None), peak, peak, 1, 10)
    lines = [line(k + 1, "cc1" if k % 3 else "as", 1000 - k) for k in range(30)]
    # WHEN the table of processes is rendered
    text = render_processes(lines, set(), 120).splitlines()
    # THEN it shows the largest ones, and counts the others in one line
    assert len(text) == 2 + TABLE_ROWS + 1, text
    assert text[2].split()[0] == "1" and text[-2].split()[0] == str(TABLE_ROWS)
    assert text[-1] == "  ... and 20 more processes, each in its section below (cc1 ×14, as ×6)"
    # AND one process more than the table holds is shown rather than counted
    assert len(render_processes(lines[:TABLE_ROWS + 1], set(), 120).splitlines()) == 2 + TABLE_ROWS + 1


def test_a_python_rows_library_is_not_its_locations_file_again() -> None:
    from heapscope.cli.report import _table
    from heapscope.view.report import FunctionRow

    # GIVEN Python rows (their library is their file) and a native row, long frozen-module locations
    rows = [FunctionRow("_compile_bytecode", "<frozen importlib._bootstrap_external>", 20 << 20, 20 << 20,
                        "<frozen importlib._bootstrap_external>:729"),
            FunctionRow("load.<locals>.<listcomp>", "pd_job.py", 18 << 20, 18 << 20, "/tmp/x/pd_job.py:5"),
            FunctionRow("_IO_file_doallocate", "libc.so.6", 8192, 8192, "filedoalloc.c:101")]
    # WHEN the table is laid out for 120 columns
    lines = _table(rows, "space", 40 << 20, width=120)
    # THEN a Python row's library cell is blank, a native row's is there, and every line fits
    assert lines[0].endswith("library") and lines[1].endswith("<frozen importlib._bootstrap_external>:729")
    assert lines[2].endswith("pd_job.py:5") and lines[3].split()[-2:] == ["filedoalloc.c:101", "libc.so.6"]
    assert all(len(line) + 2 <= 120 for line in lines), lines
    assert "load.<locals>.<listcomp>" in lines[2]  # the name whole: the width went to it


@pytest.mark.parametrize(("part", "whole", "shown"), [(0.0, 10.0, "0.0%"), (5.0, 10.0, "50.0%"),
                                                     (10.0, 10.0, "100.0%"), (10.22, 10.0, "100.0%")])
def test_a_share_of_estimated_allocations_never_passes_100_percent(part: float, whole: float, shown: str) -> None:
    # GIVEN a temporary (or held) estimate over lifetime cells and the allocations' over size cells:
    # a subset of the same samples whose estimate came out above the whole's (102.2% was shown)
    from heapscope.cli.lifetimes import share
    from heapscope.estimate import Estimate

    # THEN the share says at most all of them
    assert share(Estimate(part, 0.5), Estimate(whole, 0.5)) == shown
