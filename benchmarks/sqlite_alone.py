"""What SQLite alone costs to write a profile: the least any writer of it could spend.

    python benchmarks/sqlite_alone.py [--rounds 5] PROFILE.db...

Copies every table of each profile, by INSERT ... SELECT from an in-memory copy, into a
fresh profile made as `record` makes one (store/writer.py: its schema and indexes, WAL,
synchronous off), a commit per table, then closes it as `record` does. No Python touches
a row: the CPU is SQLite's own (its b-trees, indexes, log and checkpoint), the floor under
what `record`'s producer spends writing the same rows. Prints per profile the rows, that
CPU (median over the rounds) and the tables that take the most of it.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from heapscope.store.writer import ProfileWriter


def _tables(src: sqlite3.Connection) -> dict[str, str]:
    """Each table of the profile and its stored columns, quoted and joined (a generated column
    is not written)."""
    names = [str(r[0]) for r in src.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    return {t: ", ".join(f'"{r[1]}"' for r in src.execute(f"PRAGMA table_xinfo({t})") if r[6] == 0)
            for t in names}


def _once(src: sqlite3.Connection, tables: dict[str, str], out: Path) -> tuple[float, dict[str, float]]:
    w = ProfileWriter(out, force=True)  # the last round's copy replaced, as `record --force` does
    db = w.db
    db.execute("DELETE FROM heapscope_metadata")  # the copy brings the profile's own
    w.commit()
    db.execute("ATTACH ':memory:' AS m")
    for t, cols in tables.items():
        db.execute(f"CREATE TABLE m.{t} ({cols})")
        db.executemany(f"INSERT INTO m.{t} VALUES ({', '.join('?' * (cols.count(',') + 1))})",
                       src.execute(f"SELECT {cols} FROM {t}"))
    db.commit()
    per: dict[str, float] = {}
    start = time.process_time()
    for t, cols in tables.items():
        t0 = time.process_time()
        db.execute(f"INSERT INTO main.{t} ({cols}) SELECT {cols} FROM m.{t}")
        db.commit()
        per[t] = time.process_time() - t0
    db.execute("DETACH m")
    w.close()
    return time.process_time() - start, per


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("profiles", nargs="+", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sqlite-alone-") as tmp:
        for path in args.profiles:
            src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            tables = _tables(src)
            rows = {t: int(src.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in tables}
            runs = [_once(src, tables, Path(tmp) / "copy.db") for _ in range(args.rounds)]
            src.close()
            total = statistics.median(r[0] for r in runs)
            print(f"{path}: {sum(rows.values()):,} rows, SQLite alone {total * 1e3:.1f} ms CPU"
                  f" ({args.rounds} rounds, median)")
            top = sorted(tables, key=lambda t: -statistics.median(r[1][t] for r in runs))[:6]
            for t in top:
                print(f"  {t}: {rows[t]:,} rows, {statistics.median(r[1][t] for r in runs) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
