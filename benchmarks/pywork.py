"""A real Python workload (the interpreter's own allocations): build records,
JSON-encode and decode them, sort and group them.

Usage: python pywork.py N_RECORDS
"""

import json
import sys
from collections import defaultdict


def main() -> int:
    n = int(sys.argv[1])
    records = [
        {"id": i, "name": f"user{i:07d}", "tags": [f"t{i % 7}", f"g{i % 13}"], "score": (i * 7919) % 10007}
        for i in range(n)
    ]
    text = json.dumps(records)
    back = json.loads(text)
    back.sort(key=lambda r: (r["score"], r["name"]))
    groups = defaultdict(list)
    for r in back:
        groups[r["tags"][1]].append(r["id"])
    print(len(text), len(groups), back[0]["id"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
