"""LISTEN/NOTIFY: other processes' commits, heard on a connection of its own.

One connection per driver listens on the schema's channel, which every
process hears (``ANY``, schedules, retention, an attempt's stop, ...), and
on one channel per address that this process wants (`durable.wakes.address`:
a run it holds or waits on, a task queue it claims from), so that a
notification reaches only the processes it concerns (`channel_for`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from durable.wakes import Wake

from .url import quote_ident

if TYPE_CHECKING:
    from .connection import Connection

#: put in the queue to end a wait early: the wanted channels changed
_POKE = ("",)
#: a key heard, whether its notification said it brings no deadline, and
#: whether it came on this process's own channel (a start addressed here)
Heard = tuple[tuple[str, ...], bool, bool]
#: at most this many LISTEN/UNLISTEN statements in one round trip
_LISTEN_BATCH = 500


@functools.lru_cache(maxsize=8192)
def channel_for(base: str, address: tuple[str, ...]) -> str:
    """The NOTIFY channel of one address (a run, a task queue's kind of work)
    of the schema whose own channel is `base`. A digest: a channel name is at
    most 63 bytes, and a collision only costs a wake-up that the hearer drops."""
    digest = hashlib.blake2b("\x00".join((base, *address)).encode(), digest_size=12)
    return f"durable_a_{digest.hexdigest()}"


class Listener:
    """The LISTEN connection; lives on the asyncpg loop.

    Notifications land in a queue that the host's `watch()` drains in
    batches, so that wake-ups are published on the host loop. What it needs
    of its driver is passed in: `connect` opens a connection outside the pool,
    `channel` is the schema's NOTIFY channel, `origin` marks this driver's own
    notifications (already published in process, with their records), and
    `log` says when listening fails, `own_channel` is where the starts
    addressed to this process come (`addressing`). The other channels it listens on are
    the `wanted` ones of each `next_batch` call; `poke()` (from any thread)
    ends a wait early, when they change.
    """

    def __init__(self, *, connect: Callable[[], Awaitable[Connection]], channel: str,
                 origin: str, log: Any, own_channel: str = "") -> None:
        self._connect_one = connect
        self._channel = channel
        self._origin = origin
        self._own_channel = own_channel
        self._log = log
        self._conn: Connection | None = None
        #: (key, no deadline) pairs heard; None: the connection dropped
        self._queue: asyncio.Queue[Heard | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failures = 0
        #: the address channels listened on now (the schema's channel aside)
        self.channels: frozenset[str] = frozenset()
        #: LISTEN/UNLISTEN statements sent (the cost of addressing, for benchmarks)
        self.listens = 0

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        assert self._queue is not None
        try:
            message = json.loads(str(payload))
            if message.get("o") == self._origin:
                return  # our own commit: already published, with its op records
            keys = [tuple(str(part) for part in key) for key in message["k"]]
            # the keys whose wake-ups bring no deadline (durable.wakes.NO_DEADLINE)
            quiet = {int(i) for i in message.get("n", ())}
        except (ValueError, KeyError, TypeError, AttributeError):
            keys, quiet = [Wake.any().key], set()
        here = channel == self._own_channel
        for i, key in enumerate(keys):
            self._queue.put_nowait((key, i in quiet, here))

    def _on_terminated(self, conn: object) -> None:
        if self._queue is not None:
            self._queue.put_nowait(None)

    def poke(self) -> None:
        """End the current `next_batch` wait now (thread-safe): the wanted
        channels changed."""
        loop, queue = self._loop, self._queue
        if loop is not None and queue is not None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (_POKE, False, False))
            except RuntimeError:  # its loop closed (the driver closes): nothing to poke
                pass

    async def _connect(self, wanted: Collection[str]) -> None:
        self._queue = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self.channels = frozenset()
        conn = await self._connect_one()
        try:
            await conn.add_listener(self._channel, self._on_notify)
            await self._listen(conn, sorted(wanted), [])
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn
        self.channels = frozenset(wanted)

    async def _listen(self, conn: Connection, add: list[str], drop: list[str]) -> None:
        """LISTEN to `add`, UNLISTEN `drop`, many per round trip.

        asyncpg's `add_listener` costs a round trip per channel; its
        notifications are dispatched by channel from `_listeners`, so the
        address channels share the schema channel's callbacks there and the
        statements go out together. An asyncpg without that table gets one
        `add_listener` per channel.
        """
        table = getattr(conn, "_listeners", None)
        shared = table.get(self._channel) if isinstance(table, dict) else None
        if shared is None:
            for channel in add:
                await conn.add_listener(channel, self._on_notify)
            for channel in drop:
                await conn.remove_listener(channel, self._on_notify)
            self.listens += len(add) + len(drop)
            return
        assert isinstance(table, dict)
        statements = [f"LISTEN {quote_ident(c)}" for c in add]
        statements += [f"UNLISTEN {quote_ident(c)}" for c in drop]
        for channel in add:
            table[channel] = shared
        for start in range(0, len(statements), _LISTEN_BATCH):
            await conn.execute(";".join(statements[start:start + _LISTEN_BATCH]))
        for channel in drop:
            table.pop(channel, None)
        self.listens += len(statements)

    async def next_batch(self, wait: float, wanted: frozenset[str]
                         ) -> tuple[list[Heard], bool, frozenset[str]]:
        """Keys notified within `wait` seconds, each with whether its notification
        said it brings no deadline (`durable.wakes.heard`); whether we (re)connected, in which
        case notifications may have been missed and the caller publishes
        `Wake.any()`; and the `wanted` channels listened on since the last call
        (a notification sent before may have been missed: the caller
        publishes a wake-up for each key wanted there)."""
        if self._conn is None or self._conn.is_closed():
            self._conn = None
            try:
                await self._connect(wanted)
            except Exception as exc:
                self._failures += 1
                self._log.warning("listen_failed", error=repr(exc),
                                         attempt=self._failures)
                await asyncio.sleep(min(wait, 0.1 * 2 ** min(self._failures, 6)))
                return [], False, frozenset()
            self._failures = 0
            return [], True, frozenset()  # say so at once, without waiting
        assert self._queue is not None
        if wanted != self.channels:
            added = wanted - self.channels
            try:
                await self._listen(self._conn, sorted(added), sorted(self.channels - wanted))
            except Exception as exc:  # reconnect on the next call (which says "any")
                self._log.warning("listen_failed", error=repr(exc), attempt=1)
                self._conn.terminate()
                self._conn = None
                return [], False, frozenset()
            self.channels = wanted
            return self._drain([]), False, added
        try:
            first = await asyncio.wait_for(self._queue.get(), wait)
        except TimeoutError:
            return [], False, frozenset()
        return self._drain([first]), False, frozenset()

    def _drain(self, items: list[Heard | None]) -> list[Heard]:
        """What the queue holds, after `items`; a dropped connection is closed,
        to be opened again by the next call."""
        assert self._queue is not None
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        if None in items:  # the connection dropped: reconnect on the next call
            if self._conn is not None:
                self._conn.terminate()
            self._conn = None
        return [item for item in items if item is not None and item[0] != _POKE]

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 5)
            except Exception:
                conn.terminate()
