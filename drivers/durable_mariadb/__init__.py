"""The MariaDB driver (``mariadb://user[:password]@host[:port]/database``; ``mysql://`` too).

For teams whose database is MariaDB (10.6 or later; 10.11 is tested): many
worker processes on many hosts share one database, claims skip each other's
locked rows (``FOR UPDATE SKIP LOCKED``), transactions run under READ
COMMITTED and are retried whole after a deadlock, a lock wait past
``lock_wait_timeout`` or a lost connection before COMMIT.

An executor for `durable.store`'s programs (`driver.py`, on pooled asyncmy
connections) with MariaDB's dialect (`dialect.py`: VARCHAR keys, no
``UPDATE ... RETURNING``, no partial indexes). MariaDB has no NOTIFY: a
committing transaction that wakes other processes writes one row to a wake
log that watching workers read every `poll_interval` (see `driver.py`).

asyncmy is an asyncio library; on a trio host the driver runs it on a loop
thread of its own (`durable._bridge.LoopThread`), as the PostgreSQL driver
runs asyncpg.
"""

from __future__ import annotations

from .driver import MariaDBDriver

__all__ = ["MariaDBDriver"]
