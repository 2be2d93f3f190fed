"""Starts addressed to one process: who takes a task queue's runs, and whose turn it is.

Why (issue 26): a start's notification went to the queue's channel, which
every process with a worker on the queue listens on, so every process
claimed on every start and all but one found nothing. Counted below
saturation on PostgreSQL, 0.62 of the 0.78 transactions a step that four
processes spent more than one were such claims (docs/benchmarks.md,
"Starts addressed to one process").

How: a starter reads, at most once every `REFRESH` seconds per queue (on
the start's own path, one read for every start of that second), the
queue's live workers that take runs (`durable.store.workers`, their
``address``: the driver's origin), and addresses each start to the next of
their processes in turn (`Wake.to`): its notification goes to that process's
own channel (``("to", origin)``), not the queue's. That process claims at
once; if it has no room, or no worker of the queue any more, it passes the
baton to the queue's channel (`durable._runtime.claiming`,
`PostgresDriver.watch`), and every process claims as before.

Who counts as a member, so that no start is addressed where nobody claims
it: a worker registered on the queue, not stopped, not expired, with
workflow types, whose process still has a connection to the server
(``pg_stat_activity`` shows its driver's ``application_name``,
``durable:<origin>``): a SIGKILLed process's connections close with it, so
it is out at the next refresh, whatever its registration says. Only workers
that register every workflow type of the queue's live workers are members
(a start addressed to one without its type would wait for a poll). When a
live worker of the queue has no address (another driver, a custom
``application_name``, an older durable), starts go to every process, as
before, so that it is not starved of new runs.

A process's own commits address new work too (`peek`): a child workflow's
start, a continue-as-new's next run, a schedule's fire, a signal or a query
for a run nobody holds (`durable.store.runs.addressee`); to the committing
process itself when a worker there takes the queue's runs and is a member
(see `peek`), else to a member in turn. Those wake-ups are built inside a
transaction's program, a synchronous generator on the step's path, so they
cannot read: `peek` answers from the members already known, and the
watching driver's upkeep (`refresh_due`, every `KEEP_EVERY` seconds) reads
again, off that path, the members older than `REFRESH` of the queues
peeked at within `KEEP_FOR`. Unknown members (a process's first new work
on a queue), or members older than `STALE` (the upkeep is not running, its
reads fail): None, every process hears it, as before.

What it costs when it goes wrong: a notification addressed to a process
that stopped listening between the refresh and the start is lost like any
notification, and the run starts at the other processes' fallback poll
(`poll_interval`, 1 s by default): at most one refresh long after a worker
process stopped or died.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

#: how long the members of a queue read by a starter stay good (seconds)
REFRESH = 1.0
#: how old the members known may be for `peek` to address by them (seconds):
#: past it, the upkeep that refreshes them is not keeping up (or not running)
STALE = 3 * REFRESH
#: how often the watching driver refreshes the members of the queues that
#: `peek` was asked about, once older than `REFRESH` (seconds)
KEEP_EVERY = REFRESH / 4
#: for how long after a queue's last `peek` its members are kept fresh (seconds)
KEEP_FOR = 60.0
#: at most this many queues' members are remembered (all are forgotten beyond)
QUEUES_AT_MOST = 1000
#: the prefix of the ``application_name`` a driver sets for its connections
APPLICATION_PREFIX = "durable:"

#: a queue's workers that take runs: address, workflow types, whether their
#: process is connected (one statement; ``workers`` is small and its rows of
#: one queue few)
MEMBERS_SQL = (
    "SELECT w.address, w.workflow_types, w.address IS NOT NULL AND EXISTS ("
    "SELECT 1 FROM pg_stat_activity a WHERE a.application_name = $4 || w.address) AS live "
    "FROM workers w WHERE w.namespace = $1 AND w.task_queue = $2 AND w.expires_at >= $3 "
    "AND w.stopped_at IS NULL AND w.workflow_types <> '[]'"
)

Read = Callable[[str, str, float], Awaitable[Sequence[Any]]]


def members(rows: Sequence[Any]) -> tuple[str, ...]:
    """The addresses a start may go to, from `MEMBERS_SQL`'s rows (see the
    module docstring); () when starts must go to every process."""
    live: list[tuple[str, set[str]]] = []
    for row in rows:
        if row["address"] is None:
            return ()  # a worker nobody can address: everybody hears every start
        if row["live"]:
            live.append((str(row["address"]), set(json.loads(row["workflow_types"]))))
    every: set[str] = set().union(*(types for _, types in live))
    return tuple(sorted({where for where, types in live if types >= every}))


class Addressing:
    """A starter's view of who takes each queue's runs, and whose turn is next.

    `pick(namespace, task_queue, now)` returns the address of the process the
    next start goes to, or None (to every process); it reads the members
    again when they are older than `REFRESH`. A failed read is logged and
    leaves the queue unaddressed until the next refresh: a start never fails
    because of this.

    `peek(namespace, task_queue, now)` is the same choice without a read, for
    the wake-ups a transaction's program commits (module docstring);
    `refresh_due()` keeps the members of the queues it was asked about fresh
    (`KEEP_FOR` after the last ask). On trio `peek` runs on
    the driver's loop thread and the rest on the host: each touches a dict
    entry at a time (atomic), and the worst a race does is give two wake-ups
    the same turn.
    """

    def __init__(self, read: Read, log: Any) -> None:
        self._read = read
        self._log = log
        self._known: dict[tuple[str, str], tuple[float, tuple[str, ...]]] = {}
        self._turns: dict[tuple[str, str], int] = {}
        self._reading: set[tuple[str, str]] = set()
        # the queues `peek` was asked about: when last (monotonic), and its
        # caller's clock minus the monotonic one then (a refresh's `now`)
        self._peeked: dict[tuple[str, str], tuple[float, float]] = {}
        #: member reads made (for tests and benchmarks)
        self.reads = 0

    async def pick(self, namespace: str, task_queue: str, now: float) -> str | None:
        key = (namespace, task_queue)
        known = self._known.get(key)
        at = time.monotonic()
        if (known is None or at - known[0] >= REFRESH) and key not in self._reading:
            known = await self._refresh(key, now, at)
        if known is None or not known[1]:
            return None
        return self._next(key, known[1])

    def peek(self, namespace: str, task_queue: str, now: float,
             here: str | None = None) -> str | None:
        """The address of the process whose turn it is, from the members known
        (no read: a transaction's program calls it, `durable.driver.Tx.addressee`);
        None when they are unknown or older than `STALE`. Members older than
        `REFRESH` are read again by `refresh_due`, and kept fresh for `KEEP_FOR`
        after the last call, so that a process committing new work now and
        then still finds them known (`now`: the caller's clock, for the
        registrations' expiry).

        `here`: this process's address, when a worker of this process takes
        the queue's runs now; if it is a member, the work stays here (no
        notification at all: its local wake-up makes that worker claim, and
        pass the baton when it cannot take it all). Why: turns spread a
        client's starts, but a worker's own new work (a parent's children)
        sent in turn to the others was claimed, in a burst, by whichever
        process claimed first, the others' claims finding nothing."""
        key = (namespace, task_queue)
        known = self._known.get(key)
        at = time.monotonic()
        self._peeked[key] = (at, now - at)
        age = float("inf") if known is None else at - known[0]
        if known is None or age >= STALE or not known[1]:
            return None
        if here is not None and here in known[1]:
            return here
        return self._next(key, known[1])

    def _next(self, key: tuple[str, str], found: tuple[str, ...]) -> str:
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        return found[turn % len(found)]

    async def refresh_due(self) -> None:
        """Read again the members older than `REFRESH` of the queues `peek` was
        asked about within `KEEP_FOR` (off the step's path: the watching
        driver's upkeep); forget the others."""
        for key, (peeked, offset) in list(self._peeked.items()):
            at = time.monotonic()
            if at - peeked >= KEEP_FOR:
                self._peeked.pop(key, None)
                continue
            known = self._known.get(key)
            if (known is None or at - known[0] >= REFRESH) and key not in self._reading:
                await self._refresh(key, at + offset, at)

    async def _refresh(self, key: tuple[str, str], now: float, at: float
                       ) -> tuple[float, tuple[str, ...]]:
        self._reading.add(key)
        try:
            self.reads += 1
            found = members(await self._read(key[0], key[1], now))
        except Exception as exc:  # the start goes on, told to everybody
            self._log.debug("start_members_unread", namespace=key[0], task_queue=key[1],
                            error=repr(exc))
            found = ()
        finally:
            self._reading.discard(key)
        if len(self._known) >= QUEUES_AT_MOST:
            self._known.clear()
            self._turns.clear()
        known = self._known[key] = (at, found)
        return known

    def forget(self) -> None:
        """Read every queue's members again at its next start (and no longer
        address a worker's wake-ups by them until then)."""
        self._known.clear()
