"""One error class and one wording per user mistake, whichever command makes it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from heapscope.cli import main
from heapscope.errors import UnknownDumpError, UnknownProcessError, UnknownViewError
from heapscope.export import FORMATS, export
from heapscope.store.reader import open_profile
from heapscope.view.report import build_reports


def _commands(profile: Path, out: Path) -> dict[str, list[str]]:
    cmds = {
        "report": ["report", str(profile)],
        "leaks": ["leaks", str(profile)],
        "flamegraph": ["flamegraph", str(profile), "-o", str(out)],
        "diff": ["diff", str(profile), str(profile)],
    }
    for fmt in FORMATS:
        cmds[f"export-{fmt}"] = ["export", str(profile), "-f", fmt, "-o", str(out)]
    return cmds


@pytest.mark.parametrize("command", list(_commands(Path(), Path())))
def test_an_unknown_pid_is_the_same_line_everywhere(known_profile: Path, tmp_path: Path, command: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = _commands(known_profile, tmp_path / "out")[command]
    assert main([*argv, "--pid", "999"]) == UnknownProcessError.exit_code
    err = capsys.readouterr().err
    assert err == f"heapscope: error: {known_profile}: no process with pid 999 (pids present: 100, 200, 300)\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, flag", [
    (["export", "{p}", "-f", "collapsed", "-o", "{o}", "--dump", "9", "--pid", "100"], "--dump 9"),
    (["export", "{p}", "-f", "pprof", "-o", "{o}", "--dump", "0", "--pid", "100"], "--dump 0"),
    (["diff", "{p}", "--dump-a", "9", "--pid", "100"], "--dump-a 9"),
    (["diff", "{p}", "--dump-a", "1", "--dump-b", "-3", "--pid", "100"], "--dump-b -3"),
])
def test_an_unknown_dump_is_the_same_error_everywhere(known_profile: Path, tmp_path: Path, argv: list[str],
                                                      flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.format(p=known_profile, o=tmp_path / "out") for a in argv]
    assert main(args) == UnknownDumpError.exit_code
    err = capsys.readouterr().err
    assert err.startswith(f"heapscope: error: {flag}: ") and "has 2 dump(s) (use 1..2, or -1 for the last)" in err
    assert err.count("\n") == 1


def test_an_unknown_view_is_the_same_error_everywhere(known_profile: Path) -> None:
    with open_profile(known_profile) as prof:
        with pytest.raises(UnknownViewError) as from_report:
            build_reports(prof, "bogus")
        with pytest.raises(UnknownViewError) as from_export:
            export("collapsed", prof, io.BytesIO(), view="bogus")
    assert str(from_report.value) == str(from_export.value) == (
        "unknown view 'bogus' (one of: space, alloc_space, objects, alloc_objects)")


def test_a_duration_without_its_unit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `-d 10` was 10 ms without a word (heap_profile's -d); a reader guesses seconds: the unit is asked for
    assert main(["record", "-o", str(tmp_path / "o.db"), "-d", "10", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err == "heapscope: error: --duration '10': say its unit, e.g. 10ms or 10s (ms, s, m, h)\n"
    assert not (tmp_path / "o.db").exists()


@pytest.mark.parametrize("command", ["report", "flamegraph", "leaks", "sql", "export", "symbolize", "push"])
def test_the_profile_argument_has_one_spelling(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    usage = capsys.readouterr().out
    assert " PROFILE" in usage and " FILE" not in usage.split("options:")[0], usage


@pytest.mark.parametrize(("dump", "code", "said"), [
    ("end", 0, "wrote "), ("1", 0, "wrote "), ("-1", 0, "wrote "),
    ("peak", 2, "heapscope: error: --dump peak: ClickHouse rows are the recorded dumps"),
    ("9", 2, "heapscope: error: --dump 9: "), ("x", 2, "heapscope: error: --dump 'x': use peak, end"),
])
def test_the_clickhouse_script_takes_dump_as_the_other_exports_do(known_profile: Path, tmp_path: Path, dump: str,
                                                                  code: int, said: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN --dump as typed on the command line (it reached the exporter as text, and ended in a traceback)
    out = tmp_path / "ch.sql"
    assert main(["export", str(known_profile), "--format", "clickhouse", "--dump", dump, "-o", str(out)]) == code
    # THEN a script, or one line saying what --dump may be
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert out.exists() == (code == 0)
