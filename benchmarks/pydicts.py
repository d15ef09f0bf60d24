"""A Python workload of dicts and sets: build an index of records by several keys,
merge and invert it, take set intersections, then drop most of it.

Usage: python pydicts.py N_RECORDS
"""

import sys


def build(n: int) -> dict[str, dict[str, object]]:
    return {f"k{i:08d}": {"id": i, "group": i % 97, "bucket": f"b{i % 1013}", "tags": {i % 7, i % 11, i % 13}}
            for i in range(n)}


def index(records: dict[str, dict[str, object]]) -> dict[object, set[str]]:
    by: dict[object, set[str]] = {}
    for key, r in records.items():
        by.setdefault(("group", r["group"]), set()).add(key)
        by.setdefault(("bucket", r["bucket"]), set()).add(key)
        for t in r["tags"]:  # type: ignore[attr-defined]
            by.setdefault(("tag", t), set()).add(key)
    return by


def main() -> int:
    n = int(sys.argv[1])
    records = build(n)
    by = index(records)
    common = by[("group", 3)] & by[("tag", 5)]
    merged = {**{k: v["id"] for k, v in records.items()}, **{f"x{k}": len(v) for k, v in by.items()}}
    inverted = {v: k for k, v in merged.items()}
    for key in list(records)[: n * 9 // 10]:
        del records[key]
    print(len(records), len(by), len(common), len(inverted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
