"""The client's files in layers (client/state.h says which): a file includes only headers of its
own layer or below, no .c file includes another, and the guard is set only through
hs_guard_enter / hs_guard_leave (state.h), never by hand."""

from __future__ import annotations

import re
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parents[3] / "src" / "heapscope" / "client"

#: Each file's layer, bottom first; a file and its header share one. wire.h and the public
#: heapscope.h come from outside the client and sit below everything.
LAYERS: list[tuple[str, ...]] = [
    ("common", "family", "sampler", "ring", "own", "addrset", "stacks", "modules",
     "pyframes", "pyframes_rt", "pycode", "probes"),
    ("state",),
    ("real", "inject"),
    ("cfa_eh", "cfa", "unwind"),
    ("pysend",),
    ("record", "heaps", "labels", "maps"),
    ("hooks", "pymem", "maphooks"),
    ("connect", "session"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
OUTSIDE = {"wire.h", "../include/heapscope.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources() -> list[Path]:
    return sorted(p for p in CLIENT_DIR.iterdir() if p.suffix in (".c", ".h"))


def test_every_file_has_a_layer() -> None:
    assert {p.stem for p in sources()} == set(RANK)


def test_includes_point_down() -> None:
    wrong = []
    for path in sources():
        for inc in INCLUDE.findall(path.read_text()):
            if inc in OUTSIDE:
                continue
            assert inc.endswith(".h"), f"{path.name} includes {inc}: no .c file includes another"
            if RANK[Path(inc).stem] > RANK[path.stem]:
                wrong.append(f"{path.name} -> {inc}")
    assert not wrong, wrong


def test_guard_is_set_through_its_helpers() -> None:
    """Scopes put back what they found (state.h): a hand-set flag that clears instead would
    let a nested scope (a signal handler inside the client) end its caller's."""
    hand_set = re.compile(r"->guard\s*=[^=]|\.guard\s*=[^=]")
    wrong = [f"{p.name}:{n}" for p in sources() if p.name != "state.h"
             for n, line in enumerate(p.read_text().splitlines(), 1) if hand_set.search(line)]
    assert not wrong, wrong
