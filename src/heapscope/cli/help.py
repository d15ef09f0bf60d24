"""`heapscope help [TOPIC]`: the concepts a report uses, and an example line per command.

The topics say in a few lines what the figures of a report mean; the examples that end
each command's --help are heapscope.cli.EXAMPLES.
"""

from __future__ import annotations

import argparse

from heapscope.cli import EXAMPLES
from heapscope.errors import UsageError

NAME = "help"
HELP = "explain a concept of the reports (peak, estimates, heaps, views) or a command"

TOPICS = {
    "peak": """\
The peak of a process is the moment its sampled unreleased bytes (allocated and not yet
freed) were highest. `report`, `flamegraph` and the `record` summary show what each stack
held at that moment, not at the end: a program that frees everything before it exits still
shows where its memory went. Each process has its own peak: the moment the sum of its
malloc, pymalloc, mmap and brk heaps was highest. `--dump N` or `--dump end`
show another moment; `leaks` shows the end (what was never freed). The header's
`seen N of RSS M` sets the peak against the process's peak resident set.""",
    "estimates": """\
heapscope samples: an allocation of at least the interval (-i, default 4096 bytes) is
always recorded at its size; a smaller one with probability 1 - e^(-size/interval), as a
multiple of the interval. Sampled bytes are so an unbiased estimate of the real bytes, with a
standard error of about sqrt(interval x bytes): a 1 MiB stack is within a few percent, a
stack of a few KiB may show 0 or twice its size; at -i 512k (the always-on setting,
docs/production.md) a 100 MiB stack is within ~7 MiB, a 1 MiB one within ~0.7 MiB. `report`
says the error of its total and of its largest row (`error:`). Counts of objects are estimated from the
samples and the sizes asked for, shown with their standard error. `-i 1` records every
allocation: exact figures, at a higher cost.""",
    "heaps": """\
A heap is a source of allocations: libc.malloc (malloc, new), python.pymalloc (Python's
small objects), mmap and brk (memory the program maps itself: anonymous private mmap, brk
and sbrk; --mmap-files adds file-backed and shared mappings; docs/mmap-heaps.md) and the
custom heaps a program registers for its own pools (heapscope_heap_register,
heapscope.heaps.register). The default is the sum of the first four, those present: they
never hold the same memory. A pool's memory is both a malloc block
and the objects it hands out, so adding heaps up counts it twice. Every command shows the
default heap and lists the others with their peaks: `--heap NAME` picks one, `--heap all`
merges them all (docs/custom-heaps.md).""",
    "views": """\
A view is the figure a stack is ranked by, as in heapprofd and pprof: space (bytes
unreleased at the moment shown, the default), objects (allocations unreleased), alloc_space
(every byte allocated, freed or not: churn) and alloc_objects (every allocation).
`report --view alloc_space` ranks by churn. Self is what a function allocated itself, total
what it and its callees did. A Python process is shown in the Python view (native frames
folded into the Python line that called them); `--native` shows every frame.""",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="?", metavar="TOPIC",
                   help=f"one of {', '.join(TOPICS)}, or a command's name (its --help)")


def main(args: argparse.Namespace) -> int:
    topic = args.topic
    if topic is None:
        print("heapscope help TOPIC: " + ", ".join(TOPICS) + "; heapscope COMMAND --help for a command")
        return 0
    if topic in TOPICS:
        print(TOPICS[topic])
        return 0
    if topic in EXAMPLES and topic != NAME:
        from heapscope.cli import build_parser

        build_parser([topic]).parse_args([topic, "--help"])  # prints and exits
    raise UsageError(f"no help topic {topic!r}; topics: {', '.join(TOPICS)}, or a command's name")
