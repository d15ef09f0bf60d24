"""Unit tests for session features: -n matching, config, the Recording's option checks and
guardrails, and the removal of dead runs' session directories."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from heapscope.errors import UsageError
from heapscope.producer.config import MAX_INTERVAL, RecordConfig, name_matches, normalize_cmdline
from heapscope.producer.producer import OWNER_FILE, take_ownership
from heapscope.producer.session import Guardrails, remove_stale_dirs

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("argv0", "expected"), [
    ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "cc1plus"),
    ("com.example.app@1.2", "com.example.app"),
    ("server", "server"),
])
def test_normalize_cmdline_like_heapprofd(argv0: str, expected: str) -> None:
    assert normalize_cmdline(argv0) == expected


def test_name_matching() -> None:
    exe = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus"
    args = ["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-quiet", "x.cc"]
    assert name_matches(("cc1plus",), exe, args)
    assert name_matches(("/some/other/dir/cc1plus",), exe, args)  # patterns are normalized too
    assert name_matches(("cc1*",), exe, args)
    assert name_matches(("/usr/lib/*/cc1plus",), exe, args)  # leading / globs the full argv0
    assert name_matches(("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet x.cc",), exe, args)
    assert not name_matches(("cc1",), exe, args)
    assert not name_matches(("make", "sh"), exe, args)
    # argv0 renamed by the program: the executable's basename still matches
    assert name_matches(("cc1plus",), exe, ["renamed"])


@pytest.mark.parametrize("kw", [
    {"interval": 0}, {"interval": MAX_INTERVAL + 1}, {"interval": 2**63}, {"seed": -1}, {"seed": 2**64},
    {"names": ("",)}, {"names": ("ok", " ")}, {"skip_symbol_prefixes": ("",)}, {"max_frames": 0},
])
def test_record_config_refuses_out_of_range_values(kw: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        RecordConfig(**kw)


def test_record_config_bounds_are_accepted() -> None:
    assert RecordConfig(interval=MAX_INTERVAL, seed=2**64 - 1).interval == MAX_INTERVAL
    assert RecordConfig(interval=1, seed=0, names=("a",)).names == ("a",)


@pytest.mark.parametrize(("memory_mb", "cpu_s"), [
    (math.nan, None), (0.0, None), (math.inf, None), (None, math.nan), (None, -1.0), (None, math.inf),
])
def test_guardrails_refuse_non_finite_and_non_positive(memory_mb: float | None, cpu_s: float | None) -> None:
    with pytest.raises(UsageError):
        Guardrails(memory_mb, cpu_s)


def test_guardrails_pass_within_limits() -> None:
    g = Guardrails(1e6, 1e6)
    assert g.enabled and g.check() == ""
    assert not Guardrails(None, None).enabled


def test_only_dead_runs_own_session_dirs_are_removed(tmp_path: Path) -> None:
    # a dead run's directory: its owner lock is held by nobody
    dead = tmp_path / "heapscope-dead"
    dead.mkdir(mode=0o700)
    os.close(take_ownership(dead))
    (dead / "producer.sock").write_bytes(b"")
    # a live run's: the lock is held (by this process, through another open file)
    live = tmp_path / "heapscope-live"
    live.mkdir(mode=0o700)
    fd = take_ownership(live)
    # one without an owner lock (not a session's), one of another name, and a symlink to a dead one
    plain = tmp_path / "heapscope-plain"
    plain.mkdir()
    other = tmp_path / "other-dead"
    other.mkdir()
    os.close(take_ownership(other))
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.close(take_ownership(target))
    (tmp_path / "heapscope-link").symlink_to(target)
    try:
        assert remove_stale_dirs(str(tmp_path)) == 1
    finally:
        os.close(fd)
    assert not dead.exists()
    assert (live / OWNER_FILE).exists() and plain.is_dir() and other.is_dir() and target.is_dir()
    assert (tmp_path / "heapscope-link").is_symlink()
    # once its run is gone, the live one goes too
    assert remove_stale_dirs(str(tmp_path)) == 1 and not live.exists()
