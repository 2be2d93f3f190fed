"""LISTEN/NOTIFY: other processes' commits, heard on a connection of its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from durable.wakes import Wake

if TYPE_CHECKING:
    from .connection import Connection


class Listener:
    """The LISTEN connection; lives on the asyncpg loop.

    Notifications land in a queue that the host's `watch()` drains in
    batches, so that wake-ups are published on the host loop. What it needs
    of its driver is passed in: `connect` opens a connection outside the pool,
    `channel` is the schema's NOTIFY channel, `origin` marks this driver's own
    notifications (already published in process, with their records), and
    `log` says when listening fails.
    """

    def __init__(self, *, connect: Callable[[], Awaitable[Connection]], channel: str,
                 origin: str, log: Any) -> None:
        self._connect_one = connect
        self._channel = channel
        self._origin = origin
        self._log = log
        self._conn: Connection | None = None
        self._queue: asyncio.Queue[tuple[str, ...] | None] | None = None
        self._failures = 0

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        assert self._queue is not None
        try:
            message = json.loads(str(payload))
            if message.get("o") == self._origin:
                return  # our own commit: already published, with its op records
            keys = [tuple(str(part) for part in key) for key in message["k"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            keys = [Wake.any().key]
        for key in keys:
            self._queue.put_nowait(key)

    def _on_terminated(self, conn: object) -> None:
        if self._queue is not None:
            self._queue.put_nowait(None)

    async def _connect(self) -> None:
        self._queue = asyncio.Queue()
        conn = await self._connect_one()
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn

    async def next_batch(self, wait: float) -> tuple[list[tuple[str, ...]], bool]:
        """Keys notified within `wait` seconds, and whether we (re)connected, in which
        case notifications may have been missed and the caller publishes `Wake.any()`."""
        if self._conn is None or self._conn.is_closed():
            self._conn = None
            try:
                await self._connect()
            except Exception as exc:
                self._failures += 1
                self._log.warning("listen_failed", error=repr(exc),
                                         attempt=self._failures)
                await asyncio.sleep(min(wait, 0.1 * 2 ** min(self._failures, 6)))
                return [], False
            self._failures = 0
            return [], True  # say so at once, without waiting for a notification
        assert self._queue is not None
        try:
            first = await asyncio.wait_for(self._queue.get(), wait)
        except TimeoutError:
            return [], False
        items = [first]
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        if None in items:  # the connection dropped: reconnect on the next call
            if self._conn is not None:
                self._conn.terminate()
            self._conn = None
        return [key for key in items if key is not None], False

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 5)
            except Exception:
                conn.terminate()
