"""A duty one worker per process does: the turn is held once, the wake-ups heard while held."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from durable._duties import duty
from durable.wakes import Wake, WakeHub

pytestmark = pytest.mark.anyio


class _Driver:
    """A storage's identity (the duties of a process are held per driver)."""


def _store() -> Any:
    """What a duty reads of a store: its driver (the key, weakly held) and its hub."""
    return SimpleNamespace(driver=_Driver(), hub=WakeHub())


async def test_a_second_worker_stands_by_until_the_first_gives_the_turn_back() -> None:
    store = _store()
    order: list[str] = []
    release = anyio.Event()

    async def worker(name: str, hold: anyio.Event | None) -> None:
        async with duty(store, "schedules", "ns", lambda wake: None):
            order.append(f"{name} in")
            if hold is not None:
                await hold.wait()
            order.append(f"{name} out")

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker, "first", release)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(worker, "second", None)
        await anyio.wait_all_tasks_blocked()
        assert order == ["first in"]  # the second waits for the turn
        release.set()
    assert order == ["first in", "first out", "second in", "second out"]


async def test_other_duties_namespaces_and_storages_do_not_wait() -> None:
    store, other = _store(), _store()
    async with duty(store, "schedules", "ns", lambda wake: None):
        with anyio.fail_after(5):
            async with duty(store, "retention", "ns", lambda wake: None):
                pass
            async with duty(store, "schedules", "other", lambda wake: None):
                pass
            async with duty(other, "schedules", "ns", lambda wake: None):
                pass


async def test_wake_ups_are_heard_only_while_the_turn_is_held() -> None:
    store = _store()
    heard: list[Wake] = []
    async with duty(store, "retention", "ns", heard.append):
        store.hub.publish([Wake.retention("ns")])
    store.hub.publish([Wake.retention("ns")])
    assert heard == [Wake.retention("ns")]
