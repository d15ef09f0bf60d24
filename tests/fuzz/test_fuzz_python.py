"""Coverage-guided fuzzing of the Python readers (atheris), for a bounded time each.

Targets (tests/fuzz/py_fuzz.py): the wire decoders of codec.py, a byte-mutated
profile and a row-edited profile through every reading command on a file, the
ELF readers of symbolize/, the heapprofd importer on traces in memory, and every
reading command and the store layer on a profile in an in-memory database (the
last two made for long runs: `python tests/fuzz/py_fuzz.py importer
-runs=10000000 CORPUS`; benchmarks/fuzz.py --py-runs).
A traceback other than heapscope's own errors, or an
input slower than 10 s, fails the test and leaves the input in the work
folder. Without atheris the same harnesses run on a plain random mutator.

The inputs in tests/fuzz/crashes/ are the findings so far: each replays as a
regression test, or as a strict xfail while it is open (listed in
py_fuzz.OPEN_FINDINGS and in CRASHES_OPEN below; drop it there when its fix lands).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PY_FUZZ = HERE / "py_fuzz.py"
SECONDS = int(os.environ.get("HEAPSCOPE_PYFUZZ_SECONDS", "10"))
HAVE_ATHERIS = importlib.util.find_spec("atheris") is not None

# crashes/* -> the py_fuzz.OPEN_FINDINGS entry it shows, while that is open. None is.
CRASHES_OPEN: dict[str, str] = {}


def _fuzz(target: str, work: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HEAPSCOPE_FUZZ_WORK=str(work / "scratch"))
    if HAVE_ATHERIS:
        corpus = work / "corpus"
        subprocess.run([sys.executable, str(PY_FUZZ), target, "--write-seeds", str(corpus)], check=True,
                       timeout=120, env=env)
        cmd = [sys.executable, str(PY_FUZZ), target, f"-max_total_time={SECONDS}", "-timeout=10",
               "-rss_limit_mb=4096", "-print_final_stats=1", f"-artifact_prefix={work}/", str(corpus)]
    else:
        cmd = [sys.executable, str(PY_FUZZ), target, "--random", str(SECONDS * 20)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=SECONDS + 240, env=env, cwd=work)


@pytest.mark.parametrize("target", ["codec", "profile", "rows", "elf", "importer", "readers"])
def test_fuzz_python_bounded(target: str, tmp_path: Path) -> None:
    res = _fuzz(target, tmp_path)
    artifacts = sorted(p.name for p in tmp_path.iterdir() if p.name.split("-")[0] in ("crash", "timeout", "oom"))
    assert res.returncode == 0 and not artifacts, f"{target}: {artifacts}\n{res.stderr[-6000:]}"


def test_every_reader_of_the_readers_target_reads(tmp_path: Path) -> None:
    """The readers target runs each command on its in-memory profile; a harness that broke
    them all at their start (a read-only connection refused the temp tables they make) would
    still pass every input. On the unedited profile each must end with status 0 and output."""
    env = dict(os.environ, HEAPSCOPE_FUZZ_WORK=str(tmp_path))
    res = subprocess.run([sys.executable, str(PY_FUZZ), "readers", "--self-check"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stderr.count("ok  ") >= 20, res.stderr[-4000:]


@pytest.mark.parametrize("name", sorted(p.name for p in (HERE / "crashes").iterdir()
                                         if p.suffix in (".sql", ".elfpatch")))
def test_crash_input_is_handled(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if name in CRASHES_OPEN:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"open finding {CRASHES_OPEN[name]}"))
    env = dict(os.environ, HEAPSCOPE_FUZZ_WORK=str(tmp_path))
    # An edited profile goes through the commands on a file, and through every reader of the
    # readers target (their options: --focus, --fold, the exports' --dump all, ...) in memory.
    modes = ([["profile", "--replay-sql"], ["readers", "--replay-sql"]] if name.endswith(".sql")
             else [["elf", "--replay-elf"]])
    for mode in modes:
        try:
            res = subprocess.run([sys.executable, str(PY_FUZZ), *mode, str(HERE / "crashes" / name)],
                                 capture_output=True, text=True, timeout=20, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name}, {mode[0]}: still running after 20 s")
        assert res.returncode == 0, f"{mode[0]}: {res.stderr[-3000:]}"


def test_codec_handshake_messages_of_the_wrong_size() -> None:
    """Found by the codec target: a short Hello raised struct.error, which the producer does not catch."""
    from heapscope.wire import codec

    hello = codec.Hello(codec.WIRE_MAGIC, codec.WIRE_VERSION, 1, 0, b"t" * 16).pack()
    assert codec.Hello.unpack(hello).pid == 1
    config = codec.Config(codec.Status.OK, 4096, 1 << 20, 7, 0, 0, 64)
    assert codec.Config.unpack(config.pack()) == config
    for bad in (b"", hello[:-1], hello + b"\0"):
        with pytest.raises(codec.MalformedRecord):
            codec.Hello.unpack(bad)
    with pytest.raises(codec.MalformedRecord):
        codec.Config.unpack(config.pack()[:-8])
    with pytest.raises(codec.MalformedRecord, match="wire version"):
        codec.Config.unpack(b"\0" * codec.CONFIG.size)


@pytest.mark.parametrize("patch", ["elf_huge_strtab.elfpatch", "elf_big_symtab.elfpatch"])
def test_elf_section_sizes_past_the_file_are_unreadable(patch: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the elf target: a section size of 2**64 - 1 escaped as OverflowError (and one of
    24 TiB, tried beside it, as MemoryError); both readers now say the file is not a readable ELF file."""
    monkeypatch.setenv("HEAPSCOPE_FUZZ_WORK", str(tmp_path))
    monkeypatch.syspath_prepend(str(HERE))
    import py_fuzz

    from heapscope.symbolize import elfinfo, symtab

    monkeypatch.setattr(py_fuzz, "WORK", tmp_path)
    path = tmp_path / "patched.elf"
    base = py_fuzz.base_elf()
    assert symtab.read_elf_symbols(tmp_path / "base.elf").starts  # the unpatched file reads
    path.write_bytes(py_fuzz.patch_elf(base, (HERE / "crashes" / patch).read_text()))
    with pytest.raises(symtab.ElfReadError, match="not a readable ELF file"):
        symtab.read_elf_symbols(path)
    with pytest.raises(elfinfo.NotElfError, match="not a readable ELF file"):
        elfinfo.read_elf_info(path)


#: Raw inputs of the readers target that ended a run, replayed as they were found (the target
#: reads them as edits of its built-in profile): name -> the input, base64.
READERS_FOUND = {
    # The wrapper fold's first statements (its copy of stack_profile_symbol, leaving inlined
    # wrappers out) ran outside the reader's error handling: a malformed page there ended
    # `report` in a DatabaseError traceback instead of one line.
    "fold_copy_malformed_page": "4AXqIeAq4AE=",
    # The label readers' queries and conversions (store/alloc_labels.py) ran outside it too:
    # a label table's damage ended `export --format pprof` in an OperationalError traceback.
    "label_split_damaged_table": "ALgN8eQ=",
}


@pytest.mark.parametrize("name", sorted(READERS_FOUND))
def test_readers_input_found_is_handled(name: str, tmp_path: Path) -> None:
    import base64

    found = tmp_path / name
    found.write_bytes(base64.b64decode(READERS_FOUND[name]))
    env = dict(os.environ, HEAPSCOPE_FUZZ_WORK=str(tmp_path / "work"))
    res = subprocess.run([sys.executable, str(PY_FUZZ), "readers", str(found)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
