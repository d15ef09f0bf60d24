"""Unit tests for session features: -n matching, config. (The peak: tests/unit/bookkeeping/test_tracker.py.)"""

from __future__ import annotations

import pytest

from heapscope.producer.config import name_matches, normalize_cmdline

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
