"""record's closing lines (cli/summary.py) for what a Summary holds."""

from __future__ import annotations

import pytest

from heapscope.cli.summary import print_summary
from heapscope.session.core import Summary


def test_label_losses_are_said_with_their_fix(capsys: pytest.CaptureFixture[str]) -> None:
    print_summary(Summary("p.db", label_overflow=76, labels_unnamed=2))
    err = capsys.readouterr().err
    assert "76 samples came past the cap of 1024 label sets" in err
    assert "2 label sets lost their names" in err and "fix: a larger --shmem-size" in err
    print_summary(Summary("p.db"))
    assert "label" not in capsys.readouterr().err
