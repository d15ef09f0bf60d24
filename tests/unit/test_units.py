"""heapscope.units: every spelling of a size or a duration that heapscope reads or writes, pinned.

A command line's sizes count in powers of two and refuse the IEC suffixes; a pytest limit reads
both systems; durations say their unit; figures are written in binary units. The forms below are
what each command accepted and printed before the parsers were gathered into one module."""

from __future__ import annotations

from pathlib import Path

import pytest

from heapscope.cli import main
from heapscope.errors import UsageError
from heapscope.hosts.pytest_plugin import estimate
from heapscope.producer.config import MAX_DURATION_S
from heapscope.units import format_bytes, format_in, parse_duration, parse_limit, parse_size

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


# -- a command line's sizes: -i/--interval, --shmem-size ----------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("4096", 4096), ("4k", 4 * KIB), ("4K", 4 * KIB), ("512k", 512 * KIB), ("1m", MIB), ("8M", 8 * MIB),
    ("1G", GIB), ("64kb", 64 * KIB), ("64KB", 64 * KIB), (" 4k ", 4 * KIB), ("1", 1),
])
def test_an_option_size_counts_in_powers_of_two(text: str, value: int) -> None:
    assert parse_size(text, "--interval") == value


@pytest.mark.parametrize(("text", "message"), [
    ("4KiB", "--interval must be a number of bytes (like 4096 or 64k), not '4KiB'"),
    ("4.5k", "--interval must be a number of bytes (like 4096 or 64k), not '4.5k'"),
    ("1e3", "--interval must be a number of bytes (like 4096 or 64k), not '1e3'"),
    ("1T", "--interval must be a number of bytes (like 4096 or 64k), not '1T'"),
    ("", "--interval must be a number of bytes (like 4096 or 64k), not ''"),
    ("0", "--interval must be a positive number of bytes, not '0'"),
    ("-1", "--interval must be a positive number of bytes, not '-1'"),
])
def test_an_option_size_refuses_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_size(text, "--interval")
    assert str(e.value) == message


def test_record_refuses_an_iec_interval_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN -i 4KiB (a limit's spelling, not a command line's)
    # THEN record says so in one line, exit 2, before any target starts
    assert main(["record", "-o", str(tmp_path / "o.db"), "-i", "4KiB", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err == "heapscope: error: --interval must be a number of bytes (like 4096 or 64k), not '4KiB'\n"
    assert not (tmp_path / "o.db").exists()


# -- a pytest mark's limit and --heapscope-interval ---------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("24 MB", 24_000_000), ("24MB", 24_000_000), ("24 MiB", 24 * MIB), ("1.5 GB", 1_500_000_000),
    ("512 kB", 512_000), ("512kB", 512_000), ("512 KiB", 512 * KIB), ("4KiB", 4 * KIB), ("4k", 4000),
    ("100", 100), ("100 B", 100), (".5 MB", 500_000), ("3.", 3), ("  7 k  ", 7000), ("2 TiB", 2 << 40),
    (2048, 2048), (1.5, 1),
])
def test_a_limit_names_its_system(text: str | int | float, value: int) -> None:
    assert parse_limit(text) == value


@pytest.mark.parametrize("text", ["", "MB", "-1 MB", "24 XB", "1e3", "nan", "24 MB extra", True, -3,
                                  float("inf"), float("nan")])
def test_a_limit_refuses_what_it_cannot_read(text: str | int | float) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_limit(text)


# -- durations: record -d ----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("10ms", 0.01), ("10s", 10.0), ("1.5s", 1.5), ("2m", 120.0), ("1h", 3600.0), (" 5s ", 5.0), ("10 s", 10.0),
    ("10MS", 0.01),
])
def test_a_duration_is_read_in_its_unit(text: str, seconds: float) -> None:
    assert parse_duration(text, "--duration", MAX_DURATION_S) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [
    ("10", "--duration '10': say its unit, e.g. 10ms or 10s (ms, s, m, h)"),
    ("400d", "--duration '400d': say its unit, e.g. 400dms or 400ds (ms, s, m, h)"),
    ("s", "--duration must be a time like 500ms, 30s or 2m, not 's'"),
    ("1.5.5s", "--duration must be a time like 500ms, 30s or 2m, not '1.5.5s'"),
    ("0s", "--duration must be a positive time up to a year, not '0s'"),
    ("-1s", "--duration must be a positive time up to a year, not '-1s'"),
    ("infs", "--duration must be a positive time up to a year, not 'infs'"),
    ("9999999h", "--duration must be a positive time up to a year, not '9999999h'"),
])
def test_a_duration_without_a_readable_unit_is_refused(text: str, message: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_duration(text, "--duration", MAX_DURATION_S)
    assert str(e.value) == message


# -- figures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"),
    (1, "1 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1536, "1.5 KiB"),
    (1024 * 1024 - 1, "1.0 MiB"),  # rounds up into the next unit, never "1024.0 KiB"
    (3 * 1024**3 // 2, "1.5 GiB"),
    (-2048, "-2.0 KiB"),
    (5 * 1024**7, "5120.0 EiB"),
])
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_a_figure_in_a_fixed_unit() -> None:
    assert format_in(1536, "KiB") == "1.5 KiB"  # push's bytes sent
    assert format_in(3 * GIB // 2, "MiB", sep=",") == "1,536.0 MiB"  # import's decompression budget
    assert format_in(1536 * KIB, "KiB", digits=0) == "1536 KiB"  # flamegraph's page size
    assert format_in(256 * MIB, "MiB", digits=0) == "256 MiB"


def test_a_pytest_estimate_is_two_figures() -> None:
    assert estimate(4096, 24 * MIB) == "24.0 MiB ± 313.5 KiB"
    assert estimate(1, 1536) == "1.5 KiB ± 0 B"
