"""The PostgreSQL driver (``postgresql://user[:password]@host[:port]/db[?schema=NAME]``).

PostgreSQL is where work goes when it outgrows one machine: many worker
processes on many hosts share one database, claims skip each other's locked
rows (``FOR UPDATE SKIP LOCKED``), and a commit in one process wakes the
others through LISTEN/NOTIFY, with a bounded poll behind it for a lost
notification.

An executor for `durable.store`'s programs (`driver.py`) with PostgreSQL's
dialect (`dialect.py`: row locks, ``SKIP LOCKED`` claims, a one-statement
hot path for local steps); each program runs on one pooled asyncpg
connection. A step's cost is its round trips, so the driver spends as few as
the protocol allows: ``BEGIN``, one per statement (asyncpg keeps them
prepared), and one for ``NOTIFY`` + ``COMMIT`` sent together; programs that
only read skip ``BEGIN``/``COMMIT`` (under READ COMMITTED each statement has
its own snapshot either way); a released connection is not reset (our
transactions leave no session state), which asyncpg would otherwise do with
a round trip of its own.

asyncpg is an asyncio library. On an asyncio host it runs in the host's loop;
on a trio host the driver runs its own asyncio loop on a daemon thread and the
engine awaits each call there without blocking trio (see `durable._bridge.LoopThread`;
the pool, the bridge and the retried transaction are `durable._pooled`'s, shared
with the MariaDB driver).
Wake-ups are always published on the host loop, where the engine's callbacks
expect them.

``?schema=NAME`` (ours; not passed to asyncpg) keeps the tables in a schema
of their own, created on connect: tests and side-by-side deployments use it.
"""

from __future__ import annotations

from .driver import PostgresDriver

__all__ = ["PostgresDriver"]
