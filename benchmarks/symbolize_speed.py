"""How long symbolize_profile() takes for a profile of many distinct frames in a large C++ binary.

    python benchmarks/symbolize_speed.py [--frames 50000] [--functions 3000] [--rounds 3]

Generates a C++ file of FUNCTIONS template instantiations (each with std::vector,
std::map and std::string code and inlined helpers), compiles it with -O2 -g into
benchmarks/out/ (reused while the source is unchanged), writes a profile with one
mapping and FRAMES frames at distinct addresses spread evenly over every function's
code, and times symbolize_profile() on it: file lookup, build-id check, one
llvm-symbolizer batch, and the SQLite writes. The goal is < 10 s for 50,000 frames.
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from heapscope.model import Frame, Mapping, MappingId
from heapscope.store.writer import ProfileWriter
from heapscope.symbolize.elfinfo import read_elf_info
from heapscope.symbolize.llvm import find_llvm_symbolizer
from heapscope.symbolize.profile import symbolize_profile
from heapscope.symbolize.symtab import read_elf_symbols

OUT = Path(__file__).resolve().parent / "out"

HEADER = r"""#include <map>
#include <string>
#include <vector>
#include <cstdio>
template <int K> struct Worker {
  std::vector<int> v;
  std::map<std::string, int> m;
  static inline __attribute__((always_inline)) int mix(int x) { return x * (K + 3) ^ (x >> 3); }
  __attribute__((noinline)) int run(int n) {
    for (int i = 0; i < n; ++i) v.push_back(mix(i));
    std::string key = "k" + std::to_string(K + n);
    m[key] += static_cast<int>(v.size());
    int acc = 0;
    for (auto &kv : m) acc += kv.second + static_cast<int>(kv.first.size());
    return acc + mix(acc);
  }
};
"""


def generate(functions: int) -> str:
    body = [HEADER, "int run_all(int n) {\n  int acc = 0;\n"]
    body += [f"  {{ Worker<{k}> w; acc += w.run(n + {k % 7}); }}\n" for k in range(functions)]
    body.append("  return acc;\n}\nint main(int argc, char **) { std::printf(\"%d\\n\", run_all(argc)); }\n")
    return "".join(body)


def build(functions: int) -> Path:
    source = generate(functions)
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    binary = OUT / f"symbolize-bench-{digest}"
    if not binary.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        src = binary.with_suffix(".cc")
        src.write_text(source)
        t = time.monotonic()
        subprocess.run(["c++", "-O2", "-g", "-Wl,--build-id=sha1", "-o", str(binary), str(src)], check=True)
        print(f"compiled {src.name} ({functions} instantiations) in {time.monotonic() - t:.0f} s", file=sys.stderr)
    return binary


def spread_addresses(binary: Path, count: int) -> list[int]:
    """`count` distinct addresses, spread evenly over the code of every function symbol."""
    syms = read_elf_symbols(binary)
    ranges = [(s, e) for s, e in zip(syms.starts, syms.ends, strict=True) if e - s > 1 and e - s < 1 << 20]
    total = sum(e - s for s, e in ranges)
    if total < count:
        raise SystemExit(f"{binary}: only {total} bytes of code for {count} addresses")
    step = total / count
    out: list[int] = []
    pos = 0.0
    for s, e in ranges:
        while pos < e - s and len(out) < count:
            out.append(s + int(pos))
            pos += step
        pos -= e - s
    return sorted(set(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=50_000)
    ap.add_argument("--functions", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tool = find_llvm_symbolizer()
    if tool is None or not shutil.which("c++"):
        print("needs llvm-symbolizer and c++", file=sys.stderr)
        return 1
    binary = build(args.functions)
    info = read_elf_info(binary)
    addresses = spread_addresses(binary, args.frames)
    size_mb = binary.stat().st_size / 1e6
    print(f"binary {binary.name}: {size_mb:.1f} MB, build id {info.build_id[:12]}..., DWARF {info.has_dwarf};"
          f" {len(addresses):,} distinct frames; {tool}")

    times = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as d:
            db_path = Path(d) / "bench.db"
            w = ProfileWriter(db_path)
            w.add_mappings([(1, Mapping(info.build_id, 0, 0, 0x1000, 0x1000 + (1 << 30), 0, str(binary)))])
            w.add_frames((i + 1, Frame(MappingId(1), pc)) for i, pc in enumerate(addresses))
            w.close()
            db = sqlite3.connect(db_path)
            t = time.monotonic()
            report = symbolize_profile(db, debug_roots=[])
            times.append(time.monotonic() - t)
            rows = db.execute("SELECT COUNT(*) FROM stack_profile_symbol").fetchone()[0]
            inlined = db.execute("SELECT COUNT(*) FROM stack_profile_symbol WHERE inlined = 1").fetchone()[0]
            db.close()
        print(f"round {r + 1}: {times[-1]:.2f} s  ({report.with_lines:,} of {report.frames:,} frames with lines,"
              f" {rows:,} symbol rows, {inlined:,} inlined)")
    print(f"median {statistics.median(times):.2f} s for {len(addresses):,} frames"
          f" ({statistics.median(times) / len(addresses) * 1e6:.0f} us per frame)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
