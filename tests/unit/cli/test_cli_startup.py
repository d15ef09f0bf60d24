"""What `heapscope` imports before it runs a subcommand (issue 13: the fixed cost of every
command): only the named subcommand's module, never the HTTP, ELF or symbolizer machinery
that `record -- /bin/true` does not use; --help and errors still list every command.
Each check runs in a fresh interpreter, whose sys.modules is the evidence."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from heapscope.cli import COMMAND_NAMES, commands

pytestmark = pytest.mark.timeout(60)

# Parses the command line as `heapscope` does (without running the command), then prints
# the heapscope and heavy modules loaded.
_PROBE = """
import json, sys
from heapscope.cli import build_parser
argv = sys.argv[1:]
try:
    build_parser(argv).parse_args(argv)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("heapscope", "http", "email", "ssl", "elftools",
                                                                  "urllib.request", "jinja2")))))
"""


def _loaded(*argv: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_record_loads_only_what_recording_needs() -> None:
    loaded = _loaded("record", "-o", "x.db", "--", "/bin/true")
    assert "heapscope.cli.record" in loaded and "heapscope.recording" in loaded
    others = {f"heapscope.cli.{n}" for n in COMMAND_NAMES if n != "record"}
    assert loaded & others == set()
    heavy = {"heapscope.fleet.push", "heapscope.fleet.serve", "http.client", "ssl", "email",
             "urllib.request", "elftools.elf.elffile", "heapscope.symbolize.profile", "heapscope.store.reader",
             "heapscope.view.report", "jinja2"}
    assert loaded & heavy == set()


def test_version_loads_no_subcommand() -> None:
    loaded = _loaded("--version")
    assert not any(m.startswith("heapscope.cli.") for m in loaded)


def test_a_verbose_flag_before_the_subcommand_still_picks_it() -> None:
    loaded = _loaded("-v", "leaks", "x.db")
    assert "heapscope.cli.leaks" in loaded
    assert "heapscope.cli.record" not in loaded


def test_help_lists_every_command_with_its_help() -> None:
    out = subprocess.run([sys.executable, "-m", "heapscope", "--help"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    flat = " ".join(out.split())
    for cmd in commands():
        assert cmd.NAME in out
        assert " ".join(cmd.HELP.split()[:4]) in flat


def test_an_unknown_command_names_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "heapscope", "recrod"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "invalid choice: 'recrod'" in done.stderr
    for cmd in commands():
        assert f"'{cmd.NAME}'" in done.stderr


def test_record_start_up_path_skips_the_heavy_stdlib_modules() -> None:
    """Modules that cost `record` milliseconds of CPU to import and that it does not need before
    its target starts (benchmarks/RESULTS.md, issue 13): a @dataclass or a `typing` import on the
    path brings them back."""
    probe = """
import json, sys
from heapscope.cli import _load, quickparse
args = quickparse.parse(["record", "-q", "-o", "x.db", "--", "true"], _load)
assert args is not None
print(json.dumps(sorted(sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    loaded = set(json.loads(out.splitlines()[-1]))
    assert "heapscope.recording" in loaded
    heavy = {"dataclasses", "inspect", "ast", "typing", "argparse", "gettext", "tempfile", "random", "shutil",
             "bz2", "lzma", "ctypes", "importlib.resources", "secrets", "hashlib"}
    assert loaded & heavy == set()
