"""Builds the libFuzzer harness of the C ingest and writes its seed corpus.

Shared by tests/fuzz/test_fuzz.py (a bounded run in CI) and benchmarks/fuzz.py
(the long run). The C sources the harness links and their include folders are
listed at the top: the bookkeeping's as its meson.build lists them (native_ext.py reads it).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "heapscope"
HERE = Path(__file__).resolve().parent

# --- the C under test: sources compiled into the harness, and their include dirs ---
sys.path.insert(0, str(HERE.parent))
from native_ext import BOOKKEEPING_CORE  # noqa: E402  (bookkeeping/meson.build's list, read from it)

INGEST_SOURCES = [SRC / "producer" / "ingest_core.c", *BOOKKEEPING_CORE]
INCLUDE_DIRS = [
    SRC / "wire",
    SRC / "producer",
    SRC / "bookkeeping",
]
HARNESS = HERE / "ingest_fuzz.c"

CFLAGS = ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=fuzzer,address,undefined",
          "-fno-sanitize-recover=undefined"]

# An installed heapscope wins (it has the built extensions); a fresh clone runs from src/.
try:
    import heapscope  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from heapscope.wire import codec  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))  # wire_support: the client's side of the wire, for tests
import wire_support as ws  # noqa: E402


def clang() -> str | None:
    """The clang to build with, or None when there is none."""
    for name in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"):
        path = shutil.which(name)
        if path:
            return path
    return None


def build(out_dir: Path) -> Path:
    """Compile the harness into out_dir; raises RuntimeError (with clang's output) when it cannot."""
    cc = clang()
    if cc is None:
        raise RuntimeError("no clang on PATH (apt-get install clang libclang-rt-14-dev)")
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = out_dir / "ingest_fuzz"
    cmd = [cc, *CFLAGS, *(f"-I{d}" for d in INCLUDE_DIRS), str(HARNESS), *map(str, INGEST_SOURCES), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"building the fuzz harness failed:\n{' '.join(cmd)}\n{res.stderr}")
    return exe


# --- seed corpus: valid inputs in the harness's layout (see ingest_fuzz.c) ---

MODE_STREAM = 1 << 4
MODE_DUMP_AT_MAX = 1 << 5
MODE_THREADS = 1 << 7


def _input(mode: int, start: int, batches: list[tuple[bytes, int]]) -> bytes:
    out = bytearray(struct.pack("<BQ", mode, start))
    for payload, max_records in batches:
        out += struct.pack("<HB", len(payload), max_records) + payload
    return bytes(out)


def seed_inputs() -> dict[str, bytes]:
    """Named valid inputs: every record kind, out-of-order seqs, wrap-around with PAD, the largest sizes."""
    module = codec.ModuleRecord(0x400000, 0x401000, 0x402000, 0x1000, 0x1000, b"\x12\x34" * 10, "/bin/prog")
    stack = ws.encode_stack(7, [0x401100, 0x401200, 0x401300])
    heap = ws.encode_heap(0, 4096, "libc.malloc")
    m1 = ws.encode_malloc(1, 0x1000, 4096, 100, 7, 10)
    m2 = ws.encode_malloc(2, 0x2000, 4096, 50, 7, 20)
    f1 = ws.encode_free(3, 0x1000)
    f2 = ws.encode_free(4, 0x2000)
    big = codec.ModuleRecord(0, 0, 0, 0, 0, b"", "/lib/" + "x" * 20)
    m3 = ws.encode_malloc(4, 0x3000, 9000, 9000, 8, 30)
    seeds = {
        "in_order": _input(7, 0, [(ws.encode_module(module) + stack + heap + m1 + m2 + f1 + f2, 0)]),
        "out_of_order": _input(7 | MODE_DUMP_AT_MAX, 0, [(stack + m2 + f1 + m1 + f2, 0)]),
        "streamed": _input(7 | MODE_STREAM, 0, [(m1 + f1, 1), (m2 + f2, 0)]),
        "peak": _input(7 | MODE_DUMP_AT_MAX, 0, [(m1 + m2, 0), (f1, 0), (m3, 0)]),
        "gap": _input(7, 0, [(m2 + ws.encode_malloc(5, 0x5000, 1, 1, 9, 40), 0)]),
        "duplicate_seq": _input(7, 0, [(m1 + m1 + f1 + f1, 0)]),
        "implicit_free": _input(7, 0, [(m1 + ws.encode_malloc(2, 0x1000, 8, 8, 7, 11), 0)]),
        "module_long_path": _input(7, 0, [(ws.encode_module(big), 0)]),
        "custom_heap": _input(7, 0, [(ws.encode_heap(2, 64, "pool") + stack
                                      + ws.encode_heap_malloc(2, 1, 0x7000, 64, 48, 7, 50)
                                      + ws.encode_heap_free(2, 1, 0x7000) + m1 + f1, 0)]),
        # Three threads, one block freed by another thread, an implied free: per-thread totals kept.
        "threads": _input(7 | MODE_THREADS, 0, [(stack + ws.encode_malloc(2, 0x2000, 4096, 50, 7, 20, tid=102)
                                                 + ws.encode_malloc(1, 0x1000, 4096, 100, 7, 10, tid=101), 0),
                                                (f1 + ws.encode_malloc(4, 0x2000, 64, 64, 8, 30, tid=103), 0)]),
        # Sample sizes at the wire's limit (ingest_core.h HS_MAX_SAMPLE_SIZE): the sums stay in range.
        "largest_samples": _input(7 | MODE_DUMP_AT_MAX, 0, [(
            ws.encode_malloc(1, 0x1000, 1 << 48, 1 << 48, 7, 10)
            + ws.encode_malloc(2, 0x2000, 1 << 48, 1, 8, 20) + f1, 0)]),
    }
    # A 64-byte ring entered near its end: the writer pads, the reader wraps.
    pad = ws.pad_record(16)
    seeds["wrap"] = _input(0, 48, [(pad, 0), (ws.encode_free(1, 0x10), 0), (ws.encode_free(2, 0x10), 0)])
    # 128 bytes: m1 (64) + f1 (24) leave 40 bytes to the end, which a PAD fills before m2.
    seeds["wrap_batches"] = _input(1, 1 << 40, [(m1, 0), (f1, 0), (ws.pad_record(128 - len(m1) - len(f1)) + m2, 1),
                                                (f2, 0)])
    return seeds


def write_seeds(corpus: Path) -> int:
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = seed_inputs()
    for name, data in seeds.items():
        (corpus / name).write_bytes(data)
    return len(seeds)


def final_stats(stderr: str) -> dict[str, int]:
    """libFuzzer's -print_final_stats=1 lines (`stat::name: value`) as a dict."""
    out: dict[str, int] = {}
    for line in stderr.splitlines():
        if line.startswith("stat::"):
            name, _, value = line[len("stat::"):].partition(":")
            out[name.strip()] = int(value.strip())
    return out
