"""What `heapscope` imports before it runs a subcommand (the fixed cost of every command): only
the named subcommand's module, never the HTTP, ELF or symbolizer machinery that `record --
/bin/true` does not use; --help and errors still list every command. `record`'s start path,
up to its target's spawn, imports only what starting the target needs (docs/README.md, "The
start path"). Each check runs in a fresh interpreter, whose sys.modules is the evidence."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

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
    assert "heapscope.cli.record" in loaded
    assert "heapscope.session" not in loaded  # imported after the target's start (cli/record.py, _launch)
    others = {f"heapscope.cli.{n}" for n in COMMAND_NAMES if n != "record"}
    assert loaded & others == set()
    heavy = {"heapscope.fleet.push", "heapscope.hosts.serve", "http.client", "ssl", "email",
             "urllib.request", "elftools.elf.elffile", "heapscope.symbolize.profile", "heapscope.store.reader",
             "heapscope.view.report", "jinja2"}
    assert loaded & heavy == set()


def test_version_loads_no_subcommand() -> None:
    loaded = _loaded("--version")
    assert not any(m.startswith("heapscope.cli.") for m in loaded)


@pytest.mark.parametrize("argv", [["--version"], ["-v", "--version"]])
def test_version_prints_what_the_parser_would_without_argparse(argv: list[str]) -> None:
    """`heapscope --version` imported argparse only to print one line (~6 ms of its ~22)."""
    from heapscope.cli import VERSION

    probe = "import runpy, sys; runpy.run_module('heapscope', run_name='__main__')"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", probe, *argv], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"{VERSION}\n", done
    assert "| argparse" not in done.stderr
    parsed = subprocess.run([sys.executable, "-c", "import sys; from heapscope.cli import build_parser;"
                             " build_parser(sys.argv[1:]).parse_args(sys.argv[1:])", *argv],
                            capture_output=True, text=True, timeout=60)
    assert parsed.returncode == 0 and parsed.stdout == done.stdout, parsed


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


# Runs `heapscope record` in this interpreter (as the console script does, cli/start.py, without its
# os._exit)
# and prints the modules loaded when the target was spawned (os.posix_spawn, wrapped to look)
# and at the end; the recording itself is real: client, producer, profile, symbolization.
_RECORD_PROBE = """
import os, sys
at_spawn = []
def looking(spawn):
    def spawn_looking(*args, **kwargs):
        if not at_spawn:
            at_spawn.append(sorted(sys.modules))
        return spawn(*args, **kwargs)
    return spawn_looking
os.posix_spawn = looking(os.posix_spawn)
os.posix_spawnp = looking(os.posix_spawnp)
from heapscope.cli.start import main
code = main(sys.argv[1:])
at_end = sorted(sys.modules)
import json
print(json.dumps({"code": code, "at_spawn": at_spawn[0], "at_end": at_end}))
"""


# The same, printing instead the modules loaded when the loop first saw the target's exit
# (heapscope.launch.Child.poll, wrapped to look).
_EXIT_PROBE = """
import sys
from heapscope.launch import Child
at_exit = []
poll = Child.poll
def looking(self):
    code = poll(self)
    if code is not None and not at_exit:
        at_exit.append(sorted(sys.modules))
    return code
Child.poll = looking
from heapscope.cli.start import main
code = main(sys.argv[1:])
import json
print(json.dumps({"code": code, "at_spawn": at_exit[0], "at_end": []}))
"""


def _record_run(tmp_path: Path, name: str, *target: str, probe: str = _RECORD_PROBE,
                opts: tuple[str, ...] = ("-q",)) -> tuple[set[str], set[str]]:
    """(modules loaded when the target was spawned, at the end) of `record -q -- TARGET` (`opts`
    instead of -q when given) in a fresh interpreter, with a symbol cache of its own under tmp_path."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", probe, "record", *opts, "-o", str(tmp_path / name), "--",
                           *target], capture_output=True, text=True, timeout=120, env=env, check=True)
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["code"] == 0, done.stderr
    return set(out["at_spawn"]), set(out["at_end"])


# What the end of a recording imports and its start does not need: loaded after the spawn.
_AFTER_SPAWN = {"heapscope.symbolize.live", "heapscope.symbolize.cache", "heapscope.symbolize.profile",
                "heapscope.symbolize.preload", "heapscope.symbolize.missing", "heapscope.store.reader",
                "heapscope.store.select", "heapscope.view.units", "heapscope.view.peaks", "heapscope.store.labels",
                "json"}
# Heavy to import, and not needed by a recording whose modules are in the symbol cache: dataclasses
# brings inspect, ast and dis; hashlib OpenSSL.
_NEVER_ON_A_CACHED_RUN = {"dataclasses", "inspect", "ast", "dis", "hashlib", "_hashlib",
                          "tempfile", "elftools.elf.elffile", "heapscope.symbolize.symtab",
                          "heapscope.fleet.push", "heapscope.hosts.serve", "http.client", "ssl", "urllib.request"}


# What the recording needs once its target runs, and its target's start does not: the target
# waits for the answer to its handshake, which heapscope/launch.py gives without them.
_AFTER_THE_TARGETS_START = {"heapscope.session", "heapscope.cli.summary", "heapscope.producer.producer",
                            "heapscope.store.writer",
                            "heapscope.wire.codec", "heapscope.producer._ingest", "heapscope.bookkeeping._native",
                            "sqlite3", "subprocess",
                            "pathlib", "socket", "threading", "contextlib", "selectors"}


# Not needed by a command that makes no sample, start to end: argparse's formatters look up the
# terminal's width without shutil (bz2, lzma), the recording's sockets are _socket's, the summary's
# records are heapscope.records', the profile's paths str, the machine's name os.uname()'s.
_NEVER_FOR_A_SHORT_COMMAND = {"shutil", "bz2", "lzma", "socket", "selectors", "typing", "pathlib", "platform"}


def test_record_spawns_its_target_before_the_end_paths_imports(tmp_path: Path) -> None:
    at_spawn, at_end = _record_run(tmp_path, "a.db", "/bin/true")
    assert "heapscope.launch" in at_spawn
    assert at_spawn & _AFTER_SPAWN == set()
    # the end loaded them (the summary's and symbolization's modules)
    assert "heapscope.symbolize.live" in at_end
    # and nothing a command without samples does not use
    assert at_end & _NEVER_FOR_A_SHORT_COMMAND == set()


def test_the_summary_of_a_recording_without_samples_reads_no_profile(tmp_path: Path) -> None:
    # WHEN a command is recorded at an interval (1 GiB) that samples none of its allocations, with
    # its summary printed (no -q)
    _, at_end = _record_run(tmp_path, "a.db", "/bin/true", opts=("-i", "1G", "--seed", "1"))
    # THEN the summary's rules came without the profile reader's modules (nothing to read back)
    assert "heapscope.view.summary" in at_end
    assert at_end & ({"heapscope.store.reader", "heapscope.view.peaks"} | _NEVER_FOR_A_SHORT_COMMAND) == set()


# The heapscope modules of the start path: the command line (cli, the start module, cli.record and
# the option checks of producer.config), the listener that answers the handshake, and the spawn (launch, jobs).
_START_PATH = {"heapscope", "heapscope.cli", "heapscope.cli.start", "heapscope.cli.record", "heapscope.errors",
               "heapscope.sigmask", "heapscope.jobs", "heapscope.launch", "heapscope.which", "heapscope.records",
               "heapscope.model",
               "heapscope.producer", "heapscope.producer.config", "heapscope.producer.listener",
               "heapscope.producer.procfs", "heapscope.producer.session", "heapscope.producer.tmpdir",
               "heapscope.store", "heapscope.store.names", "heapscope.wire", "heapscope.wire.handshake",
               "heapscope.wire.heapnames", "heapscope.units"}


def test_record_spawns_its_target_with_the_start_paths_modules_only(tmp_path: Path) -> None:
    # WHEN a command is recorded
    at_spawn, _ = _record_run(tmp_path, "a.db", "/bin/true")
    # THEN its target was spawned with the start path's own modules and the parser's
    assert {m for m in at_spawn if m.startswith("heapscope")} <= _START_PATH
    assert "argparse" in at_spawn
    # and none of the heavy ones, of the recording's or of typed classes
    assert at_spawn & (_NEVER_ON_A_CACHED_RUN | _AFTER_THE_TARGETS_START | {"typing"}) == set()


def test_record_spawns_its_target_before_the_recordings_imports(tmp_path: Path) -> None:
    # GIVEN a target that allocates (a profile with a process, a dump and frames)
    at_spawn, at_end = _record_run(tmp_path, "a.db", "/bin/ls", "-l", "/usr/bin")
    # THEN its spawn came before the producer, the writer, sqlite3 and the heavy stdlib modules
    assert at_spawn & _AFTER_THE_TARGETS_START == set()
    assert {"heapscope.session", "heapscope.producer.producer", "sqlite3"} <= at_end
    # and nothing of the profile is missing
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("SELECT COUNT(*) FROM process").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM heap_profile_allocation WHERE size > 0").fetchone()[0] > 0
        assert db.execute("SELECT COUNT(*) FROM stack_profile_frame WHERE name != ''").fetchone()[0] > 0


def test_a_recording_answered_from_the_symbol_cache_loads_no_heavy_module(tmp_path: Path) -> None:
    # GIVEN a first run of a program that allocates (it fills the symbol cache)
    program = ("/bin/ls", "-l", "/usr/bin")
    _record_run(tmp_path, "first.db", *program, opts=())
    # WHEN the same program is recorded again, with its summary
    at_spawn, at_end = _record_run(tmp_path, "second.db", *program, opts=())
    # THEN its frames were symbolized (from the cache) and read back for the summary's peaks
    assert {"heapscope.symbolize.profile", "heapscope.store.reader"} <= at_end
    with sqlite3.connect(tmp_path / "second.db") as db:
        named = db.execute("SELECT COUNT(*) FROM stack_profile_frame WHERE name != ''").fetchone()[0]
    assert named > 0
    # without any of the modules that cost milliseconds to import
    assert at_end & (_NEVER_ON_A_CACHED_RUN | {"pathlib"}) == set()


def test_the_summarys_peaks_are_read_without_typing(tmp_path: Path) -> None:
    # WHEN a program that allocates is recorded with its summary
    _, at_end = _record_run(tmp_path, "a.db", "/bin/ls", "-l", "/usr/bin", opts=())
    # THEN its peaks and their stacks were read back from the profile, and neither the reader's typed
    # rows nor anything else imported typing (~2 ms, and ~1 ms more to compile each row's annotations)
    assert {"heapscope.store.reader", "heapscope.view.peaks", "heapscope.store.labels"} <= at_end
    assert "typing" not in at_end



def test_frames_named_from_a_symbol_table_load_no_elf_library(tmp_path: Path) -> None:
    # GIVEN ls, which has no DWARF here (its frames are named from its symbol table), and an empty cache
    _, at_end = _record_run(tmp_path, "first.db", "/bin/ls", "-l", "/usr/bin", opts=("-q", "-i", "1"))
    # THEN its modules were located and its symbol table read, named frames written
    assert {"heapscope.symbolize.symtab", "heapscope.elf"} <= at_end
    with sqlite3.connect(tmp_path / "first.db") as db:
        named = db.execute("SELECT COUNT(*) FROM stack_profile_frame f JOIN stack_profile_mapping m"
                           " ON f.mapping = m.id WHERE m.name LIKE '%/ls' AND f.name != ''").fetchone()[0]
    assert named > 0
    # without pyelftools (40-80 ms of CPU to import, at the end of a short program), nor pathlib
    # (~4 ms with urllib.parse and ipaddress: the profile read back, the symbol table read)
    assert not any(m.startswith("elftools") for m in at_end)
    assert "pathlib" not in at_end


def test_a_recording_whose_frames_the_cache_answers_whole_starts_no_symbolizer(tmp_path: Path) -> None:
    # GIVEN a first run of a program sampled at every allocation (the same frames each run)
    program = ("/bin/ls", "-l", "/usr/bin")
    _record_run(tmp_path, "first.db", *program, opts=("-q", "-i", "1"))
    # WHEN it is recorded again
    _, at_end = _record_run(tmp_path, "second.db", *program, opts=("-q", "-i", "1"))
    # THEN every frame came from the cache: no tool was run, and what runs one was not imported
    # (subprocess and selectors, ~4 ms at the end of a short recording)
    assert "heapscope.symbolize.profile" in at_end
    assert at_end & {"subprocess", "selectors"} == set()

def test_the_end_paths_imports_are_done_while_the_target_runs(tmp_path: Path) -> None:
    # GIVEN a target that allocates (ls, a child of the shell), then runs on idle for a while
    target = ("/bin/sh", "-c", "ls -l /usr/bin >/dev/null; sleep 0.5")
    # WHEN it is recorded with its summary
    at_exit, _ = _record_run(tmp_path, "a.db", *target, probe=_EXIT_PROBE, opts=())
    # THEN what the end needs was imported by the loop before the target's exit
    assert {"heapscope.symbolize.profile", "heapscope.symbolize.missing", "heapscope.store.reader",
            "heapscope.store.select", "heapscope.view.peaks", "heapscope.store.labels"} <= at_exit
    # AND with -q (no summary) the profile's reader is never imported: no peak is read back
    _, at_end = _record_run(tmp_path, "q.db", *target)
    assert {"heapscope.symbolize.profile", "heapscope.symbolize.missing"} <= at_end
    assert {"heapscope.store.reader", "heapscope.store.select", "heapscope.view.peaks"} & at_end == set()


def test_a_target_without_samples_does_not_import_the_end_paths_modules(tmp_path: Path) -> None:
    # GIVEN a target that runs a while, at an interval (1 GiB) that samples none of its allocations
    _, at_end = _record_run(tmp_path, "a.db", "/bin/sh", "-c", "sleep 0.3", opts=("-q", "-i", "1G", "--seed", "1"))
    # THEN no peak was read back, and the loop did not import what that takes (symbolize.live warms
    # the announced modules in a run this long: its imports are its own)
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("SELECT COUNT(*) FROM heap_profile_allocation").fetchone()[0] == 0
    assert {"heapscope.store.reader", "heapscope.store.select", "heapscope.symbolize.missing"} & at_end == set()
