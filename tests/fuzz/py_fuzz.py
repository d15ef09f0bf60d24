"""Coverage-guided fuzzing of heapscope's Python readers with atheris.

    python tests/fuzz/py_fuzz.py TARGET [libFuzzer options] [CORPUS_DIR]
    python tests/fuzz/py_fuzz.py TARGET --random N [--seed S]

Targets, and what may escape each (anything else is a finding):

    codec     wire/codec.py's decoders (decode_record, Hello.unpack,
              Config.unpack) on any bytes: only codec.MalformedRecord.
    profile   a valid small profile whose bytes are mutated, then opened and
              run through report, report --tree, leaks, flamegraph, diff and
              every export format: only heapscope's own error, reported by
              cli.main as an exit status (no traceback, no hang).
    rows      the same commands on a valid profile whose rows were edited
              (wrong types, NULLs, dangling ids, cycles): the mutations a
              byte flip rarely makes.
    importer  importer/heapprofd.py and tracefile.py on a trace in memory (gzipped or not,
              mutated from Perfetto's test traces): streamed, decoded, fed,
              finished and written into an in-memory database: only
              ProfileError.
    readers   every reading command (report, leaks, flamegraph, diff, each
              export; READERS lists the 27 command lines) and the store layer
              (the peak tables, store/select.py's heaps and states), one picked
              by each input, on a small profile held in an in-memory database,
              its rows edited or its bytes mutated: only heapscope's own
              errors. The commands run through their own main on the database
              (open_profile and write_page are the harness's): no file, no
              subprocess, no parsing per input, fast enough for runs of
              millions of inputs.
    elf       symbolize/'s ELF readers (symtab.read_elf_symbols,
              elfinfo.read_elf_info) on a mutated small ELF file: only
              ElfReadError, NotElfError or OSError.

HEAPSCOPE_FUZZ_PROFILE=FILE makes a recorded profile the one the profile, rows and
readers targets mutate, in place of the small one written here (the readers'
--self-check expects the small one's pids). With HEAPSCOPE_FUZZ_PROGRESS=N in the
environment, a `#N PROGRESS` line on stderr every N inputs tells a long run's count
(libFuzzer's own `#N` lines come at powers of two only).

Without atheris (no wheel for this Python), `--random N` runs N inputs made by
a plain random mutator from the same seeds; tests/fuzz/test_fuzz_python.py
uses it then. Seeds are written with `--write-seeds DIR`; `profile --replay-sql
FILE` runs the commands once on the small profile edited by FILE's SQL
(tests/fuzz/crashes/), `readers --replay-sql FILE` every reader of the readers
target on it, and `elf --replay-elf FILE` reads the small ELF patched by FILE.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# An installed heapscope wins (it has the built extensions); a fresh clone runs from src/.
try:
    import heapscope  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

try:
    import atheris  # type: ignore[import-untyped,unused-ignore]
except ImportError:  # the plain mutator below still works
    atheris = None

# Coverage instrumentation only when atheris fuzzes (it slows every import down).
_FUZZING = atheris is not None and __name__ == "__main__" and not {
    "--random", "--replay-sql", "--replay-elf", "--write-seeds", "--self-check"} & set(sys.argv)
# Only heapscope's own modules: the standard library's and protobuf's edges would be noise
# in the coverage and cost every input.
_instrument = atheris.instrument_imports(include=["heapscope"]) if _FUZZING else contextlib.nullcontext()
with _instrument:
    import heapscope.cli
    import heapscope.cli.diff
    import heapscope.cli.export
    import heapscope.cli.flamegraph
    import heapscope.cli.folding
    import heapscope.cli.leaks
    import heapscope.cli.report
    import heapscope.export.chrome_json
    import heapscope.export.collapsed
    import heapscope.export.perfetto
    import heapscope.export.pprof
    import heapscope.export.speedscope
    import heapscope.importer.heapprofd
    import heapscope.store.paths
    import heapscope.store.peak_tops
    import heapscope.store.reader
    import heapscope.store.select
    import heapscope.symbolize.elfinfo
    import heapscope.symbolize.symtab
    import heapscope.view
    from heapscope.errors import HeapscopeError, ProfileError
    from heapscope.importer import heapprofd as heapprofd_importer
    from heapscope.importer import tracefile
    from heapscope.model import Frame, Mapping, MappingId, ProcessFlags, ProcessInfo, Upid
    from heapscope.store.writer import ProfileWriter
    from heapscope.wire import codec

    def _import_all(package: str) -> None:
        """Every module of `package` now, so that each is instrumented: the commands import
        theirs when first run, after the instrumentation ends."""
        import importlib
        import pkgutil

        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            with contextlib.suppress(ImportError):  # the otlp exporter without the otlp extra
                importlib.import_module(info.name)

    for _package in ("heapscope.store", "heapscope.view", "heapscope.export", "heapscope.importer"):
        _import_all(_package)

sys.path.insert(0, str(ROOT / "tests"))  # wire_support: the client's side of the wire, for tests
import wire_support as ws  # noqa: E402

# Scratch files; the caller may name the folder (and then removes it itself).
_OWN_WORK = "HEAPSCOPE_FUZZ_WORK" not in os.environ
WORK = Path(os.environ.get("HEAPSCOPE_FUZZ_WORK") or tempfile.mkdtemp(prefix="hs-pyfuzz-"))
WORK.mkdir(parents=True, exist_ok=True)


# --- codec ------------------------------------------------------------------

def fuzz_codec(data: bytes) -> None:
    with contextlib.suppress(codec.MalformedRecord):
        codec.decode_record(data)
    with contextlib.suppress(codec.MalformedRecord):
        codec.Hello.unpack(data)
    with contextlib.suppress(codec.MalformedRecord):
        codec.Config.unpack(data)


def codec_seeds() -> dict[str, bytes]:
    m = codec.ModuleRecord(0x400000, 0x401000, 0x402000, 0x1000, 0x1000, b"\xab" * 20, "/usr/bin/prog")
    return {
        "stack": ws.encode_stack(42, [0x401000, 0x401010], truncated=True),
        "module": ws.encode_module(m),
        "heap": ws.encode_heap(0, 4096, "libc.malloc"),
        "hello": codec.Hello(codec.WIRE_MAGIC, codec.WIRE_VERSION, 123, 1, b"t" * 16).pack(),
        "config": codec.Config(codec.Status.OK, 4096, 1 << 20, 7, 1, 0, 64).pack(),
    }


# --- profiles -----------------------------------------------------------------

def write_profile(path: Path) -> None:
    """A small valid profile: two processes, a callsite tree, three dumps, stats."""
    w = ProfileWriter(path)
    w.add_mappings([
        (1, Mapping("aa11", 0, 0, 0x5000, 0x9000, 0, "/usr/bin/prog")),
        (2, Mapping("", 0, 0, 0x7F000000, 0x7F100000, 0, "/lib/libc.so.6")),
    ])
    w.add_frames([(1, Frame(MappingId(1), 0x1100, "main")), (2, Frame(MappingId(1), 0x1200, "work")),
                  (3, Frame(MappingId(2), 0x9A000, "malloc")), (4, Frame(MappingId(1), 0x1A2B, ""))])
    w.add_callsites([(1, 0, None, 1), (2, 1, 1, 2), (3, 2, 2, 3), (4, 1, 1, 4), (5, 2, 4, 3)])
    a = ProcessInfo(Upid(1), pid=10, ppid=1, name="prog", cmdline="prog -x", exe="/usr/bin/prog", uid=0,
                    start_ts=5)
    b = ProcessInfo(Upid(2), pid=11, ppid=10, name="kid", cmdline="kid", exe="/usr/bin/kid", uid=0,
                    start_ts=6, end_ts=900, parent_upid=Upid(1))
    for p in (a, b):
        w.add_process(p)
    w.set_process_flags(a, ProcessFlags(unwinder="libunwind", sampling_interval_bytes=4096,
                                        orig_sampling_interval_bytes=4096))
    w.add_dump(1, 0, 100, "periodic", [(3, 2, 8192), (5, 1, 4096)], "libc.malloc")
    w.add_dump(1, 100, 200, "exit", [(3, -1, -4096), (3, 1, 100), (2, 3, 12288)], "libc.malloc")
    w.add_dump(2, 0, 150, "exit", [(5, 4, 16384)], "libc.malloc")
    # The peak tables (written at each process's final dump), a symbolized frame with its
    # source line, and a Python frame: the readers' other tables are never empty.
    w.add_peak(1, 150, "libc.malloc", [(3, 2, 8192, 3, 12288, 8100, 12200), (5, 1, 4096, 1, 4096, 4000, 4000)])
    w.add_peak(2, 150, "libc.malloc", [(5, 4, 16384, 4, 16384, 16000, 16000)])
    w.add_symbols([(1, 1, "work(int)", "/src/work.c", 42, 0), (2, 1, "inlined_helper", "/src/work.h", 7, 1)])
    w.set_frame_symbols([("work", 1, 2)])
    w.add_python_symbols([(4, "handler", "/src/app.py", 12)])
    w.add_stats([("heap_samples", 1, "info", "producer", 7, "samples"),
                 ("dropped_records", 2, "data_loss", "producer", 1, "lost")])
    w.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA page_size=512")
    db.execute("VACUUM")
    db.close()


def base_profile() -> bytes:
    """The profile the profile, rows and readers targets mutate: write_profile's, or a recorded
    one named by HEAPSCOPE_FUZZ_PROFILE (copied whole, its log folded in)."""
    path = WORK / "base.db"
    if not path.exists():
        recorded = os.environ.get("HEAPSCOPE_FUZZ_PROFILE")
        if recorded:
            src = sqlite3.connect(f"file:{recorded}?mode=ro", uri=True)
            dst = sqlite3.connect(path)
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")
            dst.close()
            src.close()
        else:
            write_profile(path)
    return path.read_bytes()


OUT = WORK / "out"


def _commands(prof: str) -> list[list[str]]:
    cmds = [["report", prof], ["report", "--tree", "--min-percent", "0", prof], ["leaks", prof],
            ["flamegraph", "-o", str(OUT / "f.html"), prof],
            ["diff", "--dump-a", "1", "--dump-b", "2", "-p", "10", prof]]
    for fmt in heapscope.export.FORMATS:
        cmds.append(["export", "-f", fmt, "-o", str(OUT / f"x.{fmt}"), prof])
    return cmds


def run_commands(prof: Path) -> None:
    """Every reading command on `prof`: each must end with an exit status; an exception escapes."""
    for cmd in _commands(str(prof)):
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir()
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            status = heapscope.cli.main(cmd)
        if not isinstance(status, int):
            raise AssertionError(f"{cmd}: returned {status!r}")
        if status != 0 and "heapscope: error:" not in sink.getvalue():
            raise AssertionError(f"{cmd}: exit {status} without an error line: {sink.getvalue()[-300:]!r}")


def open_finding(e: BaseException) -> str | None:
    """The OPEN_FINDINGS entry `e` is an instance of, judged by its innermost heapscope frame."""
    where = None
    tb = e.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/heapscope/" in path:
            where = (path, tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    if where is None:
        return None
    for name, (exc, suffix, function) in OPEN_FINDINGS.items():
        if type(e).__name__ == exc and suffix in where[0] and function in ("*", where[1]):
            return name
    return None


def run_commands_known(prof: Path) -> None:
    """run_commands, stepping over the open findings (counted in skipped_known)."""
    global skipped_known
    try:
        run_commands(prof)
    except Exception as e:
        if open_finding(e) is None:
            raise
        skipped_known += 1


def fuzz_profile(data: bytes) -> None:
    prof = WORK / "fuzzed.db"
    prof.write_bytes(data)
    run_commands_known(prof)


_TABLES: dict[str, list[str]] = {}


def _table_columns() -> dict[str, list[str]]:
    if not _TABLES:
        db = sqlite3.connect(WORK / "base.db")
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            cols = [r[1] for r in db.execute(f"PRAGMA table_xinfo({name})").fetchall() if r[1] != "id" or
                    name != "process"]
            _TABLES[name] = cols
        db.close()
    return _TABLES


class Bytes:
    """A minimal FuzzedDataProvider: draws numbers from the input, zeros once it is used up."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def num(self, n: int) -> int:
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return int.from_bytes(chunk.ljust(n, b"\0"), "little", signed=True)

    def pick(self, items: list[str]) -> str:
        return items[self.num(1) % len(items)]

    def raw(self, n: int) -> bytes:
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def left(self) -> bool:
        return self.pos < len(self.data)


def edit_value(b: Bytes) -> object:
    kind = b.num(1) % 8
    if kind == 0:
        return None
    if kind == 1:
        return b.num(1)  # small ids, so edits hit existing rows: cycles, dangling ids
    if kind == 2:
        return b.num(8)  # u64 stored as int64: negative and huge values
    if kind == 3:
        return b.num(2) / 7.0
    if kind == 4:
        return b.raw(b.num(1) % 12).decode("utf-8", "replace")
    if kind == 5:
        return b.raw(b.num(1) % 12)
    if kind == 6:
        return -(2**63)
    return 2**63 - 1


# Findings reported to the owners of the code and not fixed yet (tests/fuzz/crashes/
# holds their inputs, replayed by test_fuzz_python.py as strict xfails). While one
# is open the fuzzers step over it, so that they can still find the next one.
# Remove an entry when its fix lands (its xfail then passes, which fails the suite).
# (name -> (exception type name, path suffix, function or "*")). None is open: the
# findings so far (callsite cycles, values of the wrong type in integer columns,
# a schema that is not UTF-8, ELF sections of huge sizes) are fixed, and their
# inputs in crashes/ replay as plain regression tests.
OPEN_FINDINGS: dict[str, tuple[str, str, str]] = {}
skipped_known = 0


def _has_callsite_cycle(db: sqlite3.Connection) -> bool:
    parent: dict[object, object] = {}
    with contextlib.suppress(sqlite3.Error):
        parent = dict(db.execute("SELECT id, parent_id FROM stack_profile_callsite").fetchall())
    for start in parent:
        seen = set()
        node: object = start
        while node is not None and node in parent:
            if node in seen:
                return True
            seen.add(node)
            node = parent[node]
    return False


def fuzz_rows(data: bytes) -> None:
    prof = WORK / "edited.db"
    prof.write_bytes(base_profile())
    tables = _table_columns()
    b = Bytes(data)
    db = sqlite3.connect(prof)
    for _ in range(8):
        if not b.left():
            break
        table = b.pick(sorted(tables))
        rowid = b.num(1) % 12
        with contextlib.suppress(sqlite3.Error):  # a constraint said no: the edit does not happen
            if b.num(1) % 6 == 0:
                db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
            else:
                col = b.pick(tables[table])
                db.execute(f'UPDATE {table} SET "{col}" = ? WHERE rowid = ?', (edit_value(b), rowid))
    db.commit()
    cycle = "callsite_cycle" in OPEN_FINDINGS and _has_callsite_cycle(db)
    db.close()
    if cycle:
        global skipped_known
        skipped_known += 1
        return
    run_commands_known(prof)


# --- the importer, in memory ---------------------------------------------------

TRACES = Path(os.environ.get("HEAPSCOPE_TRACES", ROOT.parent / "shared" / "heapprofd-traces"))
if not TRACES.is_dir():
    TRACES = Path("/work/shared/heapprofd-traces")


_SCHEMA_IMAGE: list[bytes] = []


def _memory_writer() -> ProfileWriter:
    """A ProfileWriter on a fresh in-memory database holding the schema (restored from an
    image made once): the writer's code runs as on a file, without the file and its
    schema script (two thirds of an input's time when the importer wrote a file)."""
    if sys.version_info < (3, 11):  # Connection.serialize came in 3.11
        raise RuntimeError("the importer's fuzz target needs Python 3.11 or later")
    if not _SCHEMA_IMAGE:
        made = ProfileWriter(":memory:", created=True)
        _SCHEMA_IMAGE.append(made.db.serialize())
        made.db.close()
    writer = ProfileWriter(":memory:", connect=False, created=True)
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.deserialize(_SCHEMA_IMAGE[0])
    writer._db = db
    return writer


def fuzz_importer(data: bytes) -> None:
    budget = tracefile.InflateBudget("fuzz", len(data))
    stream = tracefile.TraceInput(io.BytesIO(data), "fuzz", budget, data[:2] == tracefile.GZIP_MAGIC)
    imp = heapprofd_importer.HeapprofdImporter(budget)
    try:
        imp.feed(tracefile.decode_packets(stream, "fuzz"))
        imp.finish("fuzz")
    except ProfileError:
        return
    writer = _memory_writer()
    try:
        imp.write(writer, "fuzz")
    except (ProfileError, OverflowError):
        pass  # import_trace says a value above 2**63 - 1 in one line
    finally:
        writer.db.close()


def importer_seeds() -> dict[str, bytes]:
    import gzip
    import importlib

    # Generated protobuf code and its runtime: no type stubs.
    text_format = importlib.import_module("google.protobuf.text_format")
    pt = importlib.import_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

    seeds: dict[str, bytes] = {}
    for f in sorted(TRACES.glob("*.textproto")):
        trace = pt.Trace()
        text_format.Parse(f.read_text(), trace)
        data = trace.SerializeToString()
        if len(data) <= 64 << 10:  # small inputs keep the rate up
            seeds[f.stem] = data
    if seeds:
        first = min(seeds, key=lambda k: len(seeds[k]))
        seeds[first + "_gz"] = gzip.compress(seeds[first])
        seeds[first + "_compressed_packets"] = b"\x0a" + _varint(len(z := _compressed_field(seeds[first]))) + z
    return seeds


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _compressed_field(trace: bytes) -> bytes:
    import zlib

    blob = zlib.compress(trace)
    return b"\xc2\x02" + _varint(len(blob)) + blob  # TracePacket.compressed_packets is field 50


# --- the readers, in memory -----------------------------------------------------

_BASE_DB: list[bytes] = []
_ROWS_DB: list[sqlite3.Connection] = []  # the base profile, kept open: its prepared statements stay
_CURRENT: list[sqlite3.Connection] = []  # the database the input made, which open_profile hands out


def _memory_profile(image: bytes) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    if sys.version_info < (3, 11):  # Connection.deserialize came in 3.11
        raise RuntimeError("the readers' fuzz target needs Python 3.11 or later")
    db.deserialize(image)
    return db


class _FuzzProfile(heapscope.store.reader.Profile):
    """A profile on the input's in-memory database, which the harness closes (or rolls back)."""

    def close(self) -> None:
        pass


def _open_fuzzed(path: str | os.PathLike[str]) -> heapscope.store.reader.Profile:
    """open_profile on the input's database: validated as open_profile validates a file."""
    profile = _FuzzProfile(os.fspath(path), _CURRENT[0])
    profile._validate()
    return profile


def _page_to_nothing(out: Path, html: str, force: bool) -> None:
    html.encode("utf-8")  # what write_page does before its file: a lone surrogate fails here


class _NullBytes(io.RawIOBase):
    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        n = len(data)  # type: ignore[arg-type]
        self.bytes += n
        return n


class _NullText(io.TextIOBase):
    """stdout and stderr of the commands: the text is made, counted and dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = _NullBytes()
        self.chars = 0

    def write(self, s: str) -> int:
        self.chars += len(s)
        return len(s)


# The readers an input can run, each a command line as a user types it (parsed once). The
# input picks one: the whole set per input would cost ~30 ms. Folding the allocators' wrappers
# into their callers (view/wrappers.py: temp tables, so every statement after is prepared
# again) costs ~1 ms of an input's ~1.5: most lines keep the wrappers (-k), the first of
# each command folds them.
_K = "--keep-wrappers"
READERS: list[list[str]] = [
    ["report", "P"], ["report", _K, "--tree", "--min-percent", "0", "--heap", "all", "P"],
    ["report", _K, "--stacks", "--dump", "end", "--view", "objects", "P"],
    ["report", _K, "--sort", "total", "-p", "10", "--dump", "1", "P"], ["report", _K, "--native", "--wide", "P"],
    ["report", "--fold", "work", "--focus", "main", "--ignore", "kid", "P"],
    ["leaks", "P"], ["leaks", _K, "--dump", "peak", "--all-processes", "P"], ["leaks", _K, "-p", "11", "P"],
    ["flamegraph", "-o", "x.html", "P"], ["flamegraph", _K, "--dump", "end", "--merge", "exe", "-o", "x.html", "P"],
    ["flamegraph", _K, "--python-only", "--heap", "all", "-o", "x.html", "P"],
    ["diff", "P", "P"], ["diff", _K, "--dump-a", "1", "--dump-b", "2", "-p", "10", "-o", "d.html", "P"],
    ["diff", _K, "--dump-a", "end", "--view", "objects", "--native", "P", "P"],
    ["export", "-f", "collapsed", "-o", "-", "P"],
    *(["export", _K, "-f", f, "-o", "-", "P"] for f in heapscope.export.FORMATS),
    ["export", _K, "-f", "perfetto", "--dump", "all", "-o", "-", "P"],
    ["export", _K, "-f", "chrome-json", "--dump", "all", "--chrome-thresholds", "-o", "-", "P"],
    ["export", _K, "-f", "pprof", "--heap", "all", "--dump", "end", "-o", "-", "P"],
    ["export", _K, "-f", "otlp", "--heap", "all", "--dump", "all", "-o", "-", "P"],
    ["export", _K, "-f", "speedscope", "--view", "alloc_space", "-o", "-", "P"],
]
_PARSED: list[object] = []


def _install_in_memory_io() -> None:
    """Every reading command opens the input's database and writes its files nowhere: no file,
    no subprocess, no parsing per input. Only open_profile and write_page are replaced: the
    validation, the queries and the rendering are the commands' own."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("heapscope.") and hasattr(mod, "open_profile"):
            mod.open_profile = _open_fuzzed  # type: ignore[attr-defined]
    heapscope.cli.flamegraph.write_page = _page_to_nothing
    _compile_templates_once()
    # report asks dpkg-query which package owns a library without symbols (a process per
    # input, 60 ms); with no PATH it says nothing, as on a system without dpkg.
    os.environ["PATH"] = ""
    for argv in READERS:
        _PARSED.append(heapscope.cli.build_parser(argv).parse_args(argv))


def _compile_templates_once() -> None:
    """Jinja compiles the flamegraph page's template on every render (4 ms, three times the
    rest of a flamegraph): here once per template source and settings. The input reaches the
    page only through the data rendered into it, which is rendered every time."""
    import jinja2

    compiled: dict[tuple[object, ...], jinja2.Template] = {}
    from_string = jinja2.Environment.from_string

    def cached(env: jinja2.Environment, source: str, *args: object, **kwargs: object) -> jinja2.Template:
        key = (source, env.autoescape, env.undefined, args, tuple(sorted(kwargs.items())))
        if key not in compiled:
            compiled[key] = from_string(env, source, *args, **kwargs)  # type: ignore[arg-type]
        return compiled[key]

    jinja2.Environment.from_string = cached  # type: ignore[method-assign,assignment]


def _setup_readers() -> None:
    if not _BASE_DB:
        _BASE_DB.append(base_profile())
        _ROWS_DB.append(_memory_profile(_BASE_DB[0]))
        _install_in_memory_io()


# The readers already run on the profile as it is: an input that changes nothing (an edit of
# a row that does not exist, a constraint that said no, a byte set to its own value: half of
# the mutations) would run one of them again, identically; it is skipped instead.
_RAN_UNEDITED: set[tuple[int, int]] = set()


def fuzz_readers(data: bytes) -> None:
    _setup_readers()
    b = Bytes(data)
    mode = b.num(1) & 0xFF
    k = (b.num(1) & 0xFF) % (len(READERS) + 1)
    how = (mode >> 2) % 12  # the store layer's heap and state (_read_everything)
    unedited = (k, how if k == len(READERS) else 0)
    if mode % 4 == 0:  # bytes mode: up to 8 (offset, byte) patches of the file image
        out = bytearray(_BASE_DB[0])
        for _ in range(8):
            if not b.left():
                break
            at = b.num(2) % len(out)
            out[at] = b.num(1) & 0xFF
        if out == _BASE_DB[0]:
            if unedited in _RAN_UNEDITED:
                return
            _RAN_UNEDITED.add(unedited)
        try:
            db = _memory_profile(bytes(out))
        except sqlite3.Error:
            return
    else:  # rows mode: edits inside a transaction, rolled back after the reads
        db = _ROWS_DB[0]
        db.execute("BEGIN")
        changes = db.total_changes
        _edit_rows(db, b)
        if db.total_changes == changes:
            if unedited in _RAN_UNEDITED:
                db.execute("ROLLBACK")
                return
            _RAN_UNEDITED.add(unedited)
    _CURRENT[:] = [db]
    try:
        if k == len(READERS):
            with contextlib.suppress(HeapscopeError):
                _read_everything(_open_fuzzed("fuzz.db"), how)
        else:
            _run_reader(k)
    finally:
        if db is _ROWS_DB[0]:
            db.execute("ROLLBACK")  # the edits, and the temp views and tables readers make
        else:
            db.close()


def _run_reader(k: int) -> str:
    """READERS[k] as cli.main runs it: it returns a status, or raises heapscope's own error
    (cli.main's one line); anything else escapes, a finding. Returns how it ended: `ok`
    (status 0 and some output), `exit N`, or `error: ...`."""
    import copy

    args = copy.copy(_PARSED[k])  # export rewrites args.dump
    sink = _NullText()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            status = args._main(args)  # type: ignore[attr-defined]
        except HeapscopeError as e:
            return f"error: {e}"
    if not isinstance(status, int):
        raise AssertionError(f"{READERS[k]}: returned {status!r}")
    return "ok" if status == 0 and (sink.chars or sink.buffer.bytes) else f"exit {status}"


def replay_readers(sql: str) -> list[str]:
    """Every reader, and the store layer, on the small profile edited by `sql` (a crashes/
    file): how each ended (_run_reader)."""
    _setup_readers()
    ended = []
    for k in range(len(READERS) + 1):
        db = _memory_profile(_BASE_DB[0])
        db.executescript(sql)
        _CURRENT[:] = [db]
        try:
            if k == len(READERS):
                try:
                    _read_everything(_open_fuzzed("fuzz.db"), 0)
                    ended.append("ok")
                except HeapscopeError as e:
                    ended.append(f"error: {e}")
            else:
                ended.append(_run_reader(k))
        finally:
            db.close()
    return ended


def _edit_rows(db: sqlite3.Connection, b: Bytes) -> None:
    tables = _table_columns()
    for _ in range(8):
        if not b.left():
            break
        table = b.pick(sorted(tables))
        rowid = b.num(1) % 12
        with contextlib.suppress(sqlite3.Error):  # a constraint said no: the edit does not happen
            if b.num(1) % 6 == 0:
                db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
            else:
                col = b.pick(tables[table])
                db.execute(f'UPDATE {table} SET "{col}" = ? WHERE rowid = ?', (edit_value(b), rowid))


def _read_everything(profile: heapscope.store.reader.Profile, how: int) -> None:
    """The reader layer's queries and the peak tables; `how` (from the input) picks the heap and
    the state, so that one input costs a few queries, not every combination."""
    from heapscope.model import HEAP_NAME
    from heapscope.store import select as sel

    profile.check()
    sel.select_heap(profile, (None, "all", HEAP_NAME)[how % 3])
    sel.heap_peaks(profile)
    heapscope.store.peak_tops.peak_totals(profile)
    heapscope.store.peak_tops.peak_tops(profile, [p.info.upid for p in profile.processes()[:3]], 2)
    for p in profile.processes()[:2]:
        upid = p.info.upid
        sel.process_state(profile, p, ("peak", "end", 1, -1)[how // 3 % 4])
        heapscope.store.peak_tops.peak_callsites(profile, upid)
        heapscope.store.peak_tops.peak_top(profile, upid, 3)
        for d in profile.dumps(upid)[:2]:
            profile.allocation_deltas(upid, d.heap_name, d.ts, d.ts_end)
        used = profile.used_callsites([upid])
        heapscope.store.paths.stack_paths(profile, used[:4], 8)
        for cs in used[:2]:
            profile.stack_frames(cs, 8)
    profile.python_frames()
    profile.frame_sources()
    profile.python_upids()


# --- ELF ----------------------------------------------------------------------

_ELF_SOURCE = "int helper(int x) { return x * 3; }\nint main(int c, char **v) { (void)v; return helper(c); }\n"


def base_elf() -> bytes:
    path = WORK / "base.elf"
    if not path.exists():
        src = WORK / "tiny.c"
        src.write_text(_ELF_SOURCE)
        cc = shutil.which(os.environ.get("CC", "cc"))
        built = cc is not None and subprocess.run(
            [cc, "-O1", "-Wl,--build-id", "-o", str(path), str(src)], capture_output=True, timeout=60).returncode == 0
        if not built:
            shutil.copyfile("/bin/true", path)
    return path.read_bytes()


def fuzz_elf(data: bytes) -> None:
    global skipped_known
    try:
        _fuzz_elf(data)
    except Exception as e:
        if open_finding(e) is None:
            raise
        skipped_known += 1


def _fuzz_elf(data: bytes) -> None:
    path = WORK / "fuzzed.elf"
    path.write_bytes(data)
    syms = None
    with contextlib.suppress(heapscope.symbolize.symtab.ElfReadError, OSError):
        syms = heapscope.symbolize.symtab.read_elf_symbols(path)
    if syms is not None:
        for addr in syms.starts[:16]:
            syms.lookup(addr)
        syms.lookup(0x1000)
    with contextlib.suppress(heapscope.symbolize.elfinfo.NotElfError, OSError):
        heapscope.symbolize.elfinfo.read_elf_info(path)


def patch_elf(elf: bytes, patch: str) -> bytes:
    """Apply a crashes/*.elfpatch: lines `SECTION FIELD VALUE` set one field of a
    64-bit little-endian section header; SECTION is a name, or `link:NAME` for
    the section NAME's sh_link points to."""
    from elftools.elf.elffile import ELFFile

    out = bytearray(elf)
    fields = {"sh_offset": 24, "sh_size": 32, "sh_link": 40, "sh_entsize": 56}
    f = io.BytesIO(elf)
    parsed = ELFFile(f)
    names = [s.name for s in parsed.iter_sections()]
    for line in patch.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        section, field, value = line.split()
        if section.startswith("link:"):
            index = parsed.get_section(names.index(section[5:]))["sh_link"]
        else:
            index = names.index(section)
        at = parsed["e_shoff"] + index * parsed["e_shentsize"] + fields[field]
        width = 4 if field == "sh_link" else 8
        out[at:at + width] = int(value, 0).to_bytes(width, "little")
    return bytes(out)


def elf_seeds() -> dict[str, bytes]:
    elf = base_elf()
    stripped = WORK / "stripped.elf"
    stripped.write_bytes(elf)
    strip = shutil.which("strip")
    if strip:
        subprocess.run([strip, "-s", str(stripped)], capture_output=True, timeout=60)
    return {"tiny": elf, "tiny_stripped": stripped.read_bytes()}


def rows_seeds() -> dict[str, bytes]:
    # Each edit: table, rowid, delete?, column, value kind, value (see fuzz_rows).
    return {"small_int": bytes([2, 1, 1, 2, 1, 3]), "null": bytes([5, 2, 1, 1, 0]),
            "text": bytes([6, 1, 1, 0, 4, 3]) + b"abc", "delete": bytes([3, 2, 0])}


TARGETS: dict[str, tuple[Callable[[bytes], None], Callable[[], dict[str, bytes]]]] = {
    "codec": (fuzz_codec, codec_seeds),
    "profile": (fuzz_profile, lambda: {"small": base_profile()}),
    "rows": (fuzz_rows, rows_seeds),
    "elf": (fuzz_elf, elf_seeds),
    "importer": (fuzz_importer, importer_seeds),
    "readers": (fuzz_readers, lambda: {**rows_seeds(), "bytes": bytes([4, 0x10, 0x00, 0x00])}),
}


# --- the plain mutator (no atheris) ------------------------------------------

def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(5)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[min(pos, len(out) - 1)] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3:
            del out[pos:pos + rng.randint(1, 64)]
        elif out:
            k = rng.randrange(max(1, len(out) - 8))
            out[k:k + 8] = struct.pack("<q", rng.choice((0, -1, 2**63 - 1, -(2**63), rng.getrandbits(32))))
    return bytes(out)


def random_run(target: str, n: int, seed: int) -> int:
    """Run n mutated inputs; print each failing input's traceback and return how many failed."""
    fn, seeds = TARGETS[target]
    pool = list(seeds().values())
    rng = random.Random(seed)
    failures = 0
    for i in range(n):
        data = mutate(rng, rng.choice(pool))
        try:
            fn(data)
        except Exception:
            failures += 1
            crash = WORK / f"crash-{target}-{i}"
            crash.write_bytes(data)
            import traceback

            print(f"FINDING {target} input {i} saved to {crash}", file=sys.stderr)
            traceback.print_exc()
    print(f"random {target}: {n} inputs, {failures} failures, {skipped_known} known findings stepped over",
          file=sys.stderr)
    return failures


def with_progress(fn: Callable[[bytes], None], every: int) -> Callable[[bytes], None]:
    """`fn`, saying on stderr every `every` inputs how many ran: libFuzzer's own `#N` lines
    come at powers of two only, hours apart in a run of millions."""
    import time

    count = 0
    start = time.monotonic()

    def counted(data: bytes) -> None:
        nonlocal count
        count += 1
        if count % every == 0:
            secs = time.monotonic() - start
            print(f"#{count}\tPROGRESS {secs:.0f} s, {count / secs:.0f} exec/s, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC", file=sys.stderr, flush=True)
        fn(data)

    return counted


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in TARGETS:
        print(__doc__, file=sys.stderr)
        return 2
    target = argv[1]
    rest = argv[2:]
    if rest[:1] == ["--write-seeds"]:
        out = Path(rest[1])
        out.mkdir(parents=True, exist_ok=True)
        for name, data in TARGETS[target][1]().items():
            (out / name).write_bytes(data)
        return 0
    if rest[:1] == ["--replay-sql"] and target == "readers":
        replay_readers(Path(rest[1]).read_text())
        return 0
    if rest[:1] == ["--self-check"] and target == "readers":
        # Each reader on the unedited profile must succeed: one that fails at its start (a
        # harness that broke its reading) would still pass every fuzzed input, having read nothing.
        ended = replay_readers("")
        for argv, how in zip([*READERS, ["store layer"]], ended, strict=True):
            print(f"{how:8.8}  {' '.join(argv)}", file=sys.stderr)
        return 0 if all(how == "ok" for how in ended) else 1
    if rest[:1] == ["--replay-sql"]:
        prof = WORK / "replay.db"
        prof.write_bytes(base_profile())
        db = sqlite3.connect(prof)
        db.executescript(Path(rest[1]).read_text())
        db.close()
        run_commands(prof)  # open findings are not stepped over here
        return 0
    if rest[:1] == ["--replay-elf"]:
        path = WORK / "replay.elf"
        path.write_bytes(patch_elf(base_elf(), Path(rest[1]).read_text()))
        _fuzz_elf(path.read_bytes())  # open findings are not stepped over here
        return 0
    if rest[:1] == ["--random"]:
        seed = int(rest[3]) if rest[2:3] == ["--seed"] else 1
        return 1 if random_run(target, int(rest[1]), seed) else 0
    if atheris is None:
        print("atheris is not installed: use --random N", file=sys.stderr)
        return 2
    fn = TARGETS[target][0]
    TARGETS[target][1]()  # build the base files before fuzzing starts
    every = int(os.environ.get("HEAPSCOPE_FUZZ_PROGRESS", "0"))
    atheris.Setup([argv[0], *rest], with_progress(fn, every) if every > 0 else fn)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    finally:
        if _OWN_WORK:
            shutil.rmtree(WORK, ignore_errors=True)
