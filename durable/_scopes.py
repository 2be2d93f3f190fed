"""Cancel scopes made by the running backend directly, found once.

``anyio.CancelScope(...)`` asks sniffio which library runs the current task,
then anyio's table of backends, at every call, and only then makes the
backend's own scope: about half of the 4-6 µs a shielded scope took on
asyncio (12-06). A step's commit enters one (the SQLite driver's wait), and
under load a second (the committer's, for a caller queued behind the commit
in flight): issue 26. The scope is the same object anyio would have made.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

ScopeFactory = Callable[..., anyio.CancelScope]


def scope_factory() -> ScopeFactory:
    """What ``anyio.CancelScope(...)`` ends up calling in the running loop: the
    backend's ``create_cancel_scope`` (keyword arguments ``shield``,
    ``deadline``). Should anyio's layout differ, ``anyio.CancelScope`` itself."""
    try:
        from anyio._core._eventloop import get_async_backend

        make: ScopeFactory = get_async_backend().create_cancel_scope
        return make
    except Exception:  # pragma: no cover - another anyio layout: the public class
        return anyio.CancelScope


_asyncio_scopes: ScopeFactory | None = None  # anyio's asyncio backend's, found on first use


def asyncio_scope(*, shield: bool = False) -> anyio.CancelScope:
    """``anyio.CancelScope(shield=shield)`` where the caller knows the loop is
    asyncio (the SQLite driver's asyncio path), made by anyio's asyncio backend."""
    global _asyncio_scopes
    make = _asyncio_scopes
    if make is None:
        make = _asyncio_scopes = scope_factory()
    return make(shield=shield)
