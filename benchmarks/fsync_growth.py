"""What a commit's fdatasync costs when it grows the file, against one that
rewrites blocks the file already has (decision (aq), docs/benchmarks.md).

Usage::

    python benchmarks/fsync_growth.py [directory] [writes]

For each way, `writes` (default 2,000) writes of 12 KB (about a step's
frames in the -wal file), each followed by ``os.fdatasync``, into a fresh
file in `directory` (default $TMPDIR or /tmp: put it on the disk the
database lives on; a tmpfs hides fsyncs):

* ``append``: each write past the file's end (the log growing the file);
* ``overwrite``: into a file written and synced beforehand (the log started
  over, rewriting the file in place);
* ``fallocate``: into space reserved with ``posix_fallocate`` (unwritten
  extents: converting them is metadata again);
* ``ahead``: past the end, with 1 MiB of zeros written and synced ahead
  whenever the writes reach the end (what the SQLite driver does at FULL).

Prints the wall and CPU time per write + fdatasync, twice in turn.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

SIZE = 12 * 1024
AHEAD = 2**20


def measure(directory: str, way: str, writes: int) -> tuple[float, float]:
    """Wall and CPU µs per write + fdatasync."""
    path = os.path.join(directory, f"fsync-growth-{way}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        data = os.urandom(SIZE)
        if way == "overwrite":
            os.pwrite(fd, bytes(SIZE * writes), 0)
            os.fsync(fd)
        elif way == "fallocate":
            os.posix_fallocate(fd, 0, SIZE * writes)
            os.fsync(fd)
        end = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(writes):
            if way == "ahead" and (i + 1) * SIZE > end:
                os.pwrite(fd, bytes(AHEAD), end)
                os.fdatasync(fd)
                end += AHEAD
            os.pwrite(fd, data, i * SIZE)
            os.fdatasync(fd)
        return ((time.perf_counter() - wall) / writes * 1e6,
                (time.process_time() - cpu) / writes * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    writes = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    for _ in range(2):
        for way in ("append", "overwrite", "fallocate", "ahead"):
            wall, cpu = measure(directory, way, writes)
            print(f"{way:10s} {wall:7.1f} µs wall  {cpu:6.1f} µs CPU  per 12 KB write + fdatasync")


if __name__ == "__main__":
    main()
