"""Coverage-guided fuzzing of the C ingest loop (libFuzzer + ASan + UBSan), for a bounded time.

The harness (ingest_fuzz.c) plays an untrusted client writing any bytes into
a shared ring and drains it through the producer's C ingest. Any crash,
sanitizer report, leak, broken invariant or input slower than 5 s fails the
test; libFuzzer leaves the input that did it in the work folder and the
failure message names it. benchmarks/fuzz.py runs the same harness for
millions of inputs.
"""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_build as build  # noqa: E402
import wire_support as ws

from heapscope.wire import codec  # noqa: E402

FUZZ_SECONDS = int(os.environ.get("HEAPSCOPE_FUZZ_SECONDS", "20"))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if build.clang() is None:
        pytest.skip("clang is not installed (apt-get install clang libclang-rt-14-dev)")
    try:
        return build.build(tmp_path_factory.mktemp("fuzz_build"))
    except RuntimeError as e:
        if "fuzzer" in str(e) and "cannot find" in str(e).lower() or "libclang_rt.fuzzer" in str(e):
            pytest.skip("clang's libFuzzer runtime is missing (apt-get install libclang-rt-14-dev)")
        raise


def run_fuzzer(harness: Path, work: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    corpus = work / "corpus"
    build.write_seeds(corpus)
    cmd = [str(harness), "-timeout=5", "-rss_limit_mb=2048", "-print_final_stats=1",
           f"-artifact_prefix={work}/", *args, str(corpus)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=work)


def test_seed_corpus_runs_clean(harness: Path, tmp_path: Path) -> None:
    res = run_fuzzer(harness, tmp_path, "-runs=0", timeout=60)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "INITED" in res.stderr


def findings(res: subprocess.CompletedProcess[str], work: Path) -> list[str]:
    """What a libFuzzer run found: the artifacts it wrote, or its exit status when there are none."""
    artifacts = sorted(p.name for p in work.iterdir() if p.name.split("-")[0] in ("crash", "leak", "timeout", "oom"))
    if res.returncode != 0 and not artifacts:
        artifacts = [f"exit status {res.returncode}"]
    return artifacts


def test_fuzz_ingest_bounded(harness: Path, tmp_path: Path) -> None:
    res = run_fuzzer(harness, tmp_path, f"-max_total_time={FUZZ_SECONDS}", timeout=FUZZ_SECONDS + 120)
    found = findings(res, tmp_path)
    assert not found, f"fuzzer found {found}:\n{res.stderr[-6000:]}"
    assert build.final_stats(res.stderr).get("number_of_executed_units", 0) > 1000, res.stderr[-2000:]


def test_a_crash_is_reported(harness: Path, tmp_path: Path) -> None:
    """The check above can fail: with the harness's self-test switch on, an input starting with
    "CRASH" aborts, and the run is reported with its artifact."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "selftest").write_bytes(b"CRASH")
    env = dict(os.environ, HEAPSCOPE_FUZZ_SELFTEST="1")
    res = subprocess.run([str(harness), "-runs=10", f"-artifact_prefix={tmp_path}/", str(tmp_path / "corpus")],
                         capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    found = findings(res, tmp_path)
    assert found and found[0].startswith("crash-"), res.stderr[-2000:]


# --- the seeds are valid wire: the real producer reads them without a complaint ---

def _feed_real_ingest(data: bytes) -> dict[str, int]:
    """Play a harness input (ingest_fuzz.c's layout, not raw) into the real producer's Ingest."""
    from heapscope.producer import _ingest

    mode = data[0]
    (start,) = struct.unpack_from("<Q", data, 1)
    ring_size = 64 << (mode & 7)
    start &= ~7
    fd = os.memfd_create("hs-fuzz-seed")
    try:
        os.ftruncate(fd, codec.META_SIZE + ring_size)
        shm = mmap.mmap(fd, codec.META_SIZE + ring_size)
        for name, value in (("magic", codec.WIRE_MAGIC), ("version", codec.WIRE_VERSION),
                            ("ring_size", ring_size), ("read_pos", start), ("write_pos", start)):
            codec.write_meta(shm, name, value)
        ing = _ingest.Ingest(fd, ring_size, stream=bool(mode & build.MODE_STREAM),
                             dump_at_max=bool(mode & build.MODE_DUMP_AT_MAX),
                             threads=bool(mode & build.MODE_THREADS))
        pos, wp, batch = 9, start, 0
        while pos + 3 <= len(data):
            length, max_records = struct.unpack_from("<HB", data, pos)
            payload = data[pos + 3:pos + 3 + length]
            pos += 3 + length
            for i, b in enumerate(payload):
                shm[codec.META_SIZE + ((wp + i) & (ring_size - 1))] = b
            wp += codec.align8(len(payload))
            codec.write_meta(shm, "write_pos", wp)
            for rec in ing.drain(batch * 600_000_000, max_records):
                codec.decode_record(rec)
            batch += 1
        ing.tracker.flush()
        stats = ing.stats()
        ing.close()
        shm.close()
        return stats
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", sorted(build.seed_inputs()))
def test_seed_is_valid_wire(name: str) -> None:
    stats = _feed_real_ingest(build.seed_inputs()[name])
    assert stats["corrupt"] == 0 and stats["malformed_records"] == 0, stats
    assert stats["records"] > 0


def test_sample_sizes_past_the_wire_limit_are_malformed() -> None:
    """A MALLOC or HEAP_MALLOC whose sizes are near 2^64 is counted malformed and not applied:
    applied, such sizes wrapped the tracker's sums and its peak rows stopped summing to the peak
    (a finding of the harness above)."""
    huge = (1 << 64) - 8
    m_ok = ws.encode_malloc(1, 0x1000, 64, 64, 7, 10)
    m_huge = ws.encode_malloc(2, 0x2000, huge, 16, 7, 20)
    m_real_huge = ws.encode_malloc(3, 0x3000, 64, huge, 7, 30)
    hm_huge = ws.encode_heap_malloc(2, 1, 0x4000, huge, 16, 7, 40)
    data = build._input(7 | build.MODE_DUMP_AT_MAX, 0, [(m_ok + m_huge + m_real_huge + hm_huge, 0)])
    stats = _feed_real_ingest(data)
    assert stats["malformed_records"] == 3, stats
    assert stats["mallocs"] == 1, stats
    assert stats["peak_unfreed"] == 64, stats
