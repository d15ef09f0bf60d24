"""Every command's --help ends with an example line; `heapscope help TOPIC` explains a report's terms."""

from __future__ import annotations

import subprocess
import sys

import pytest

from heapscope.cli import commands
from heapscope.cli.help import TOPICS


def heapscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "heapscope", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(m.NAME for m in commands()))
def test_every_command_help_shows_an_example(name: str) -> None:
    run = heapscope(name, "--help")
    assert run.returncode == 0, run.stderr
    example = run.stdout.split("\nexample:\n", 1)[1]
    assert example.splitlines()[0].startswith(f"  heapscope {name} "), run.stdout


def test_help_lists_its_topics() -> None:
    run = heapscope("help")
    assert run.returncode == 0 and all(t in run.stdout for t in TOPICS) and "peak" in TOPICS


@pytest.mark.parametrize("topic", ["peak", "estimates", "heaps", "views"])
def test_help_topic(topic: str) -> None:
    run = heapscope("help", topic)
    assert run.returncode == 0, run.stderr
    assert run.stdout == TOPICS[topic] + "\n" and run.stderr == ""


def test_help_of_a_command_is_its_help() -> None:
    assert heapscope("help", "report").stdout == heapscope("report", "--help").stdout


def test_an_unknown_topic_is_one_line() -> None:
    run = heapscope("help", "nonsense")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        "heapscope: error: no help topic 'nonsense'; topics: peak, estimates, heaps, views, or a command's name"]
