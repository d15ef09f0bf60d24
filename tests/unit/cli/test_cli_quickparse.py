"""cli/quickparse.py against argparse: on every command line it accepts, the same Namespace as
`heapscope`'s argparse parser; what it declines goes to argparse (help, errors, odd spellings)."""

from __future__ import annotations

import random

import pytest

from heapscope import cli
from heapscope.cli import quickparse

pytestmark = pytest.mark.timeout(120)

# Words of record's command lines: options with a good or a bad value, odd spellings.
_WORDS = [
    ["-q"], ["--quiet"], ["--force"], ["-o", "out.db"], ["--output", "x y.db"], ["-o", ""], ["-o", "-x"],
    ["-i", "1"], ["--interval", "64k"], ["--seed", "7"], ["--seed", "x"], ["--seed", "-3"],
    ["--unwinder", "fp"], ["--unwinder", "bogus"], ["--max-frames", "12"], ["--shmem-size", "1M"],
    ["--block-client"], ["--no-block-client"], ["--skip-symbol-prefix", "/usr"], ["--stream-allocations"],
    ["-c", "100"], ["--continuous-dump", "1.5"], ["--dump-phase", "5"], ["--dump-at-max"],
    ["-n", "a"], ["--name", "b"], ["-n", ""], ["-p", "1"], ["--pid", "2,3"], ["-d", "2s"],
    ["--max-producer-memory", "5.5"], ["--max-producer-cpu", "inf"], ["--no-symbolize"],
    ["--serve", "127.0.0.1:0"], ["--serve-remote"], ["--push", "pyroscope+http://h:1"], ["--label", "k=v"],
    ["-v"], ["-h"], ["--help"], ["--forc"], ["--output=o.db"], ["-qv"], ["-oout.db"], ["--bogus"], ["-5"],
    ["--version"], ["-"],
]
_TAILS = [[], ["--"], ["--", "/bin/true"], ["/bin/true"], ["ls", "-l", "-q"], ["--", "ls", "--", "-q"], [""],
          ["-q", "ls"]]
_HEADS = [["record"], ["-v", "record"], ["--verbose", "record"], ["record", "-v"], ["live"], ["-q", "record"],
          ["--version", "record"]]


def _argparse(argv: list[str]) -> dict[str, object] | None:
    try:
        return vars(cli.build_parser(argv).parse_args(argv))
    except SystemExit:
        return None


def _lines() -> list[list[str]]:
    rng = random.Random(13)
    lines = [head + tail for head in _HEADS for tail in _TAILS]
    lines += [["record", *w, "--", "/bin/true"] for w in _WORDS]
    lines += [["record", *w, "/bin/true"] for w in _WORDS]
    lines += [["record", *w] for w in _WORDS]
    for _ in range(600):
        words = [w for _ in range(rng.randint(1, 6)) for w in rng.choice(_WORDS)]
        lines.append([*rng.choice(_HEADS[:3]), *words, *rng.choice(_TAILS)])
    return lines


def test_same_namespace_as_argparse_or_declined(capsys: pytest.CaptureFixture[str]) -> None:
    accepted = 0
    for argv in _lines():
        quick = quickparse.parse(argv, cli._load)
        if quick is None:
            continue
        accepted += 1
        assert _argparse(argv) == vars(quick), argv
    capsys.readouterr()  # argparse's messages for the declined ones
    assert accepted > 200


@pytest.mark.parametrize("argv", [
    ["record", "-q", "-o", "/tmp/x.db", "--force", "--", "/bin/true"],
    ["record", "--", "/bin/true"],
    ["-v", "record", "-n", "a", "-n", "b", "--push", "u", "ls", "-l"],
    ["record", "-p", "1"],
    ["record"],
])
def test_the_usual_lines_need_no_argparse(argv: list[str]) -> None:
    quick = quickparse.parse(argv, cli._load)
    assert quick is not None
    assert vars(quick) == _argparse(argv)


@pytest.mark.parametrize("argv", [
    ["record", "--help"], ["record", "--forc", "--", "x"], ["record", "-o"], ["record", "--unwinder", "x"],
    ["record", "--block-client", "--no-block-client"], ["record", "--seed", "-1"], ["report", "x.db"],
    ["live", "--", "x"], ["--version"], ["record", "-o=x"],
])
def test_everything_else_is_left_to_argparse(argv: list[str]) -> None:
    assert quickparse.parse(argv, cli._load) is None


def test_an_option_kind_it_does_not_know_declines() -> None:
    spec = quickparse.Spec()
    spec.add_argument("-x", action="count")
    assert not spec.ok
    spec = quickparse.Spec()
    spec.add_argument("-x", nargs="?")
    assert not spec.ok
    spec = quickparse.Spec()
    spec.add_argument("-x", type=str.upper)
    assert not spec.ok
    spec = quickparse.Spec()
    spec.set_defaults(x=1)
    assert not spec.ok
    spec = quickparse.Spec()
    spec.add_argument_group("g").add_argument("-x", action="store_true")
    assert spec.ok and spec.options["-x"].dest == "x"
