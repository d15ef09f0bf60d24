"""The start module (cli/start.py): a `record` command line is parsed by record's parser alone,
to the same options the whole command line's parser gives; anything else, or a record command
line with an option record does not know, goes to the whole parser, whose messages are unchanged."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from heapscope import cli
from heapscope.cli import record
from heapscope.cli.start import record_args

pytestmark = pytest.mark.timeout(60)

RECORD_LINES = [
    ["record", "--", "/bin/true"],
    ["-v", "record", "-o", "x.db", "--", "/bin/true", "-x"],
    ["--verbose", "-v", "record", "-q", "-i", "64k", "--seed", "3", "--no-block-client", "-n", "a", "-n", "b*",
     "--unwinder", "fp", "-c", "100", "--push", "pyroscope+http://h:4040", "--label", "k=v", "--", "sh", "-c", "x"],
    ["record", "-p", "1,2", "-d", "2s", "--max-producer-memory", "10"],
    ["record", "--interv", "8k", "--", "ls"],  # an abbreviation, as argparse takes it
]


@pytest.mark.parametrize("argv", RECORD_LINES)
def test_record_is_parsed_to_what_the_whole_parser_gives(argv: list[str]) -> None:
    # WHEN a record command line is parsed by the start module and by the whole command line's parser
    alone = record_args(argv)
    whole = cli.build_parser(argv).parse_args(argv)
    # THEN the options are the same, and so is the function that runs them
    assert alone is not None
    assert vars(alone) == vars(whole)
    assert alone._main is record.main


@pytest.mark.parametrize("argv", [["report", "x.db"], ["--version"], [], ["-v"], ["recrod", "--", "ls"],
                                  ["record", "--no-such-option", "--", "ls"], ["-v", "record", "--include"]])
def test_other_command_lines_go_to_the_whole_parser(argv: list[str]) -> None:
    assert record_args(argv) is None


def _parse_output(parse: object, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        assert callable(parse)
        parse(argv)
    code = exit_.value.code
    return code if isinstance(code, int) else -1, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv", [["record", "--help"], ["record", "--unwinder", "x", "--", "ls"],
                                  ["record", "--seed", "one", "--", "ls"], ["record", "-o"]])
def test_help_and_errors_read_as_the_whole_parsers(argv: list[str]) -> None:
    # WHEN record's parser alone answers --help or a bad value
    def whole(a: list[str]) -> argparse.Namespace:
        return cli.build_parser(a).parse_args(a)
    # THEN the text and the exit status are the whole parser's (usage `heapscope record ...`)
    assert _parse_output(record_args, argv) == _parse_output(whole, argv)


def test_the_console_script_records_with_the_start_module(tmp_path: Path) -> None:
    # WHEN `python -m heapscope record` runs a command that fails, and an option record lacks is given
    run = [sys.executable, "-m", "heapscope"]
    done = subprocess.run([*run, "-v", "record", "-q", "-o", f"{tmp_path}/a.db", "--", "/bin/sh", "-c", "exit 3"],
                          capture_output=True, text=True, timeout=60)
    wrong = subprocess.run([*run, "record", "--bogus", "--", "/bin/true"], capture_output=True, text=True, timeout=60)
    # THEN the recording ran with the command's exit status, and the unknown option is named as
    # the whole command line's parser always named it
    assert done.returncode == 3, done.stderr
    assert wrong.returncode == 2
    assert wrong.stderr.splitlines()[-1] == "heapscope: error: unrecognized arguments: --bogus"


def test_record_q_asks_the_session_for_no_peaks_and_a_summary_does() -> None:
    # `record -q` prints no summary: its session reads no peaks back (the session's test:
    # tests/integration/test_first_answer.py); without -q it does.
    from heapscope import cli
    from heapscope.cli import record

    parser = cli.command_parser(record)
    quiet = record.recording_options(parser.parse_args(["-q", "--", "true"]), ["true"], [])
    plain = record.recording_options(parser.parse_args(["--", "true"]), ["true"], [])
    assert (quiet.peaks, plain.peaks) == (False, True)


def test_the_start_module_sets_the_collector_of_the_command_before_its_modules_are_imported(
        tmp_path: Path) -> None:
    # WHEN the start module (the `heapscope` command's path) runs `record`, then `report` of its
    # profile, each in an interpreter that notes its collector's settings as argparse and the
    # command's own module are imported, and prints them with those it has afterwards
    show = ("import gc, sys\n"
            "seen = {}\n"
            "def hook(event, args):\n"
            "    if event == 'import' and args[0] in ('argparse', 'heapscope.cli.record', 'heapscope.cli.report'):\n"
            "        seen.setdefault(args[0], gc.isenabled() and gc.get_threshold()[0])\n"
            "sys.addaudithook(hook)\n"
            "from heapscope.cli import start\n"
            "code = start.main(sys.argv[1:])\n"
            "print(repr((code, sorted(seen.items()), gc.isenabled() and gc.get_threshold()[0])))\n")
    db = tmp_path / "p.db"
    runs = [subprocess.run([sys.executable, "-c", show, *argv], capture_output=True, text=True, timeout=60)
            for argv in (["record", "-q", "-o", str(db), "--", "/bin/true"], ["report", str(db)])]
    # THEN record's collector runs after 20,000 new containers from before its modules are
    # imported to its end, and report's is off as long
    assert ast.literal_eval(runs[0].stdout.splitlines()[-1]) == \
        (0, [("argparse", 20000), ("heapscope.cli.record", 20000)], 20000), runs[0].stderr
    assert ast.literal_eval(runs[1].stdout.splitlines()[-1]) == \
        (0, [("argparse", False), ("heapscope.cli.report", False)], False), runs[1].stderr
