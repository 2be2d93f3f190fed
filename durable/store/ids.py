"""New ids for what the store records (runs, requests).

Kept apart from `records` (which re-exports `new_id`): how an id is made is
one decision of its own (docs/design/decisions.md, (af)).
"""

from __future__ import annotations

import os
import time


def new_id() -> str:
    """A new id (a run's, a request's): 32 lowercase hex digits, laid out as a
    UUIDv7 (RFC 9562): the Unix time in milliseconds, then 74 random bits.

    Time-ordered, so that the b-tree indexes keyed by a run's id (the runs'
    key, ``ops``' key, ``events (run_id, seq)``) take the rows of the runs
    alive at once in a few adjacent leaf pages: with random ids (uuid4) each
    live run's rows fell in a leaf page of their own, and a group commit of
    11 runs wrote 31-40 pages to SQLite's log instead of 22 (docs/
    benchmarks.md, "SQLite concurrent steps: time-ordered ids"). Ids stay
    opaque and unique (74 random bits a millisecond); nothing reads a time
    out of them.
    """
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, 74 of them used
    value = ((time.time_ns() // 1_000_000) << 80 | _V7 | (rand >> 62 & 0xFFF) << 64
             | (rand & _LOW62))
    return f"{value:032x}"


#: a UUIDv7's version (7, bits 76-79) and variant (0b10, bits 62-63)
_V7 = 0x7 << 76 | 0x2 << 62
_LOW62 = (1 << 62) - 1
