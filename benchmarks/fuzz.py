"""Long fuzzing runs of every harness of tests/fuzz/, with a Markdown table of the results.

    python benchmarks/fuzz.py [--c-runs 10000000] [--py-seconds 120] [--py-runs N] [--only ingest,codec,...]

Harnesses:

  ingest    the C ingest loop (libFuzzer + ASan + UBSan), tests/fuzz/ingest_fuzz.c;
            runs --c-runs inputs (default 10 M)
  codec, profile, rows, elf, importer, readers
            the Python harnesses under atheris (tests/fuzz/py_fuzz.py), each for
            --py-seconds, or until --py-runs inputs ran when given (the importer and
            readers are made for runs of millions: `--only importer --py-runs 10000000`);
            they run 10^0 (profile, rows: every command on a file) to 10^4 inputs a
            second, not 10^5

Per harness: inputs run, crashes, hangs (an input over the timeout), other
failures (leaks, out of memory) and execs/s. The Python harnesses step over the
findings still open (py_fuzz.OPEN_FINDINGS). Findings are left in the printed
work folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz_build as build  # noqa: E402

PY_TARGETS = ("codec", "profile", "rows", "elf", "importer", "readers")


def _artifacts(work: Path) -> dict[str, int]:
    kinds = {"crash": 0, "timeout": 0, "other": 0}
    for p in work.iterdir():
        prefix = p.name.split("-")[0]
        if prefix == "crash":
            kinds["crash"] += 1
        elif prefix == "timeout":
            kinds["timeout"] += 1
        elif prefix in ("leak", "oom", "slow"):
            kinds["other"] += 1
    return kinds


def run_ingest(work: Path, runs: int) -> dict[str, object]:
    exe = build.build(work / "build")
    corpus = work / "corpus"
    build.write_seeds(corpus)
    t0 = time.monotonic()
    res = subprocess.run([str(exe), f"-runs={runs}", "-timeout=5", "-rss_limit_mb=2048", "-print_final_stats=1",
                          f"-artifact_prefix={work}/", str(corpus)], capture_output=True, text=True, cwd=work)
    secs = time.monotonic() - t0
    stats = build.final_stats(res.stderr)
    found = _artifacts(work)
    if res.returncode != 0 and not any(found.values()):
        found["other"] += 1
    n = stats.get("number_of_executed_units", 0)
    (work / "ingest.log").write_text(res.stderr)
    return {"harness": "ingest (C, libFuzzer)", "inputs": n, **found, "execs/s": round(n / secs) if secs else 0,
            "seconds": round(secs)}


def run_python(target: str, work: Path, seconds: int, runs: int | None = None) -> dict[str, object]:
    # A #N line every 100,000 inputs in the log: libFuzzer's own come at powers of two only.
    env = dict(os.environ, HEAPSCOPE_FUZZ_WORK=str(work / "scratch"), HEAPSCOPE_FUZZ_PROGRESS="100000")
    corpus = work / "corpus"
    py_fuzz = str(FUZZ / "py_fuzz.py")
    subprocess.run([sys.executable, py_fuzz, target, "--write-seeds", str(corpus)], check=True, env=env)
    limit = f"-runs={runs}" if runs is not None else f"-max_total_time={seconds}"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, py_fuzz, target, limit, "-timeout=10",
                          "-rss_limit_mb=4096", "-print_final_stats=1", f"-artifact_prefix={work}/", str(corpus)],
                         capture_output=True, text=True, env=env, cwd=work)
    secs = time.monotonic() - t0
    stats = build.final_stats(res.stderr)
    found = _artifacts(work)
    if res.returncode != 0 and not any(found.values()):
        found["other"] += 1
    n = stats.get("number_of_executed_units", 0)
    (work / f"{target}.log").write_text(res.stderr)
    return {"harness": f"{target} (Python, atheris)", "inputs": n, **found,
            "execs/s": round(n / secs) if secs else 0, "seconds": round(secs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--c-runs", type=int, default=10_000_000)
    ap.add_argument("--py-seconds", type=int, default=120)
    ap.add_argument("--py-runs", type=int, default=None, help="inputs per Python harness, instead of --py-seconds")
    ap.add_argument("--only", default="ingest," + ",".join(PY_TARGETS))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hs-fuzz-bench-"))
    rows = []
    for name in args.only.split(","):
        sub = work / name
        sub.mkdir()
        print(f"fuzzing {name} ...", file=sys.stderr, flush=True)
        if name == "ingest":
            rows.append(run_ingest(sub, args.c_runs))
        else:
            rows.append(run_python(name, sub, args.py_seconds, args.py_runs))
    cols = ["harness", "inputs", "crash", "timeout", "other", "execs/s", "seconds"]
    print("| " + " | ".join(c if c != "timeout" else "hangs" for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:,}" if isinstance(r[c], int) and c == "inputs" else str(r[c])
                                for c in cols) + " |")
    print(f"\nwork folder (logs, any finding's input): {work}", file=sys.stderr)
    return 1 if any(r["crash"] or r["timeout"] or r["other"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
