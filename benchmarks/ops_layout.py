"""SQLite's ``ops`` as a rowid table or ``WITHOUT ROWID``, by result size
(docs/design/decisions.md (ae)).

An ``ops`` row carries its activity's result. ``WITHOUT ROWID`` keeps rows in
their key's b-tree, whose cells spill to overflow pages past ~1,000 bytes (a
rowid table's leaf holds ~4,000), so the layout that saves a b-tree per step
with tiny results costs more with results of a kilobyte or two. This times
both layouts with stdlib ``sqlite3`` alone (WAL + NORMAL): one insert per
transaction (a step's op), then reading a run's 10 ops back; CPU time of the
thread, so that a shared machine's load blurs it less.

Usage::

    python benchmarks/ops_layout.py [--rows 3000] [--sizes 100,1000,2500,4000] [--passes 2]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

COLUMNS = ("run_id TEXT NOT NULL, op_id TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, "
           "status TEXT NOT NULL, result TEXT, PRIMARY KEY (run_id, op_id)")


def measure(path: Path, without_rowid: bool, size: int, rows: int) -> tuple[float, float]:
    """(µs of CPU per insert transaction, µs per read of a run's 10 ops)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"CREATE TABLE ops ({COLUMNS}){' WITHOUT ROWID' if without_rowid else ''}")
    result = "x" * size
    runs = rows // 10
    start = time.thread_time()
    for r in range(runs):
        run_id = f"{r:032x}"
        for i in range(10):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO ops VALUES (?, ?, ?, ?, ?, ?)",
                         (run_id, f"0:{i}", "activity", "step", "completed", result))
            conn.execute("COMMIT")
    write = (time.thread_time() - start) / (runs * 10) * 1e6
    start = time.thread_time()
    for r in range(runs):
        conn.execute("SELECT * FROM ops WHERE run_id = ?", (f"{r:032x}",)).fetchall()
    read = (time.thread_time() - start) / runs * 1e6
    conn.close()
    return write, read


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--sizes", default="100,1000,2500,4000", help="result sizes in bytes")
    p.add_argument("--passes", type=int, default=2)
    args = p.parse_args()
    print("| result bytes | insert rowid µs | insert WITHOUT ROWID µs "
          "| read 10 ops rowid µs | read WITHOUT ROWID µs |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.passes):
            for size in (int(s) for s in args.sizes.split(",")):
                a = measure(Path(tmp) / f"rowid-{n}-{size}.db", False, size, args.rows)
                b = measure(Path(tmp) / f"keyed-{n}-{size}.db", True, size, args.rows)
                print(f"| {size} | {a[0]:.1f} | {b[0]:.1f} | {a[1]:.1f} | {b[1]:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
