"""The trio bridge: asyncpg's asyncio loop on a thread of its own
(`durable._bridge.LoopThread`, shared with the MariaDB driver)."""

from __future__ import annotations

from durable._bridge import LoopThread as _LoopThread


class LoopThread(_LoopThread):
    """asyncpg's loop thread on a trio host."""

    def __init__(self) -> None:
        super().__init__("the PostgreSQL driver")
