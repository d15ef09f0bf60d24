"""`heapscope record` that keeps no profile: the floor of what any profile's rows could save.

    python benchmarks/no_profile.py [-i BYTES] -- CMD...

Runs CMD under a recording as `record` makes one (the default interval, Python frames
and pymalloc sampled, a producer draining every ring), but with the session's keep off
(the pytest plugin's mode without an output): no file, no dump, no stack resolved, no
symbolization, no summary. Its whole-command time over the plain program is what heapscope
costs before a single row is written; against `record` it shows what the profile costs.
Prints the session's stats (samples, records lost) on stderr, to check that both ran alike.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from heapscope.producer.config import RecordConfig
from heapscope.session import Recording, RecordingOptions
from heapscope.units import parse_size


def main(argv: list[str]) -> int:
    interval = "4096"
    if argv[:1] == ["-i"] and len(argv) > 1:
        interval, argv = argv[1], argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: no_profile.py [-i BYTES] -- CMD...", file=sys.stderr)
        return 2
    command = argv[1:]
    with tempfile.TemporaryDirectory() as work:
        options = RecordingOptions(symbolize=False, keep=False, command=" ".join(command), peaks=False)
        config = RecordConfig(interval=parse_size(interval, "-i"))
        with Recording(config, Path(work) / "unused.db", options) as rec:
            rec.start(command)
            code = rec.run_until_exit()
            if rec.producer is not None:
                print(f"no_profile: {rec.producer.stats()}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
