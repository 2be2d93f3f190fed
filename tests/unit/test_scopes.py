"""`durable._scopes`: the running backend's cancel scopes, found once, are
anyio's own (what ``anyio.CancelScope(...)`` makes), and shield alike."""

from __future__ import annotations

import anyio
import pytest

from durable._scopes import asyncio_scope, scope_factory

pytestmark = pytest.mark.anyio


async def test_the_factory_makes_the_scopes_anyio_makes(anyio_backend: str) -> None:
    make = scope_factory()
    assert type(make(shield=True)) is type(anyio.CancelScope(shield=True))
    if anyio_backend == "asyncio":
        assert type(asyncio_scope(shield=True)) is type(anyio.CancelScope(shield=True))


async def test_a_shielded_scope_of_the_factory_holds_off_a_cancellation_until_it_ends(
) -> None:
    make = scope_factory()
    reached: list[str] = []
    with anyio.CancelScope() as outer:
        outer.cancel()
        with make(shield=True) as inner:
            assert inner.shield
            await anyio.lowlevel.checkpoint()  # not cancelled inside the shield
            reached.append("inside")
        await anyio.lowlevel.checkpoint()
        reached.append("after")  # never: the cancellation lands here
    assert reached == ["inside"]
    assert outer.cancelled_caught
