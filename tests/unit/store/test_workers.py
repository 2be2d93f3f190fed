"""The worker registry: who is alive, and what names live workers can run."""

from __future__ import annotations

import pytest

from durable.store import Store
from durable.store.records import WorkerRegistration

from ._support import NS, T0, rows

pytestmark = pytest.mark.anyio


def worker(worker_id: str, types: tuple[str, ...] = (), names: tuple[str, ...] = (),
           namespace: str = NS) -> WorkerRegistration:
    return WorkerRegistration(worker_id, namespace, "default", types, names,
                              ("cooperative_cancellation",))


async def test_live_workers_names_are_known(store: Store) -> None:
    assert await store.registered_names(NS, T0) == (set(), set())
    await store.register_worker(worker("w1", ("order",), ("charge",)), 30.0, T0)
    await store.register_worker(worker("w2", ("order", "refund"), ("ship",)), 30.0, T0)
    await store.register_worker(worker("w3", ("elsewhere",), (), "other-ns"), 30.0, T0)
    assert await store.registered_names(NS, T0 + 10) == (
        {"order", "refund"}, {"charge", "ship"})


async def test_a_worker_that_stopped_refreshing_is_forgotten_after_its_ttl(
    store: Store,
) -> None:
    await store.register_worker(worker("w1", ("order",)), 30.0, T0)
    assert await store.registered_names(NS, T0 + 30) == ({"order"}, set())
    assert await store.registered_names(NS, T0 + 30.1) == (set(), set())
    await store.register_worker(worker("w1", ("order",)), 30.0, T0 + 40)  # it came back
    assert await store.registered_names(NS, T0 + 60) == ({"order"}, set())


async def test_registering_again_replaces_the_registration(store: Store) -> None:
    await store.register_worker(worker("w1", ("old",)), 30.0, T0)
    await store.register_worker(worker("w1", ("new",)), 30.0, T0 + 1)
    assert await store.registered_names(NS, T0 + 2) == ({"new"}, set())
    assert len(await rows(store, "SELECT worker_id FROM workers")) == 1


async def test_a_stopped_worker_deregisters(store: Store) -> None:
    await store.register_worker(worker("w1", ("order",)), 30.0, T0)
    await store.deregister_worker("w1")
    await store.deregister_worker("w1")  # idempotent
    assert await store.registered_names(NS, T0) == (set(), set())


async def test_long_expired_registrations_are_pruned(store: Store) -> None:
    await store.register_worker(worker("gone"), 30.0, T0)
    await store.register_worker(worker("recent"), 30.0, T0 + 3000)
    await store.register_worker(worker("w"), 30.0, T0 + 3631)  # "gone" expired > 1 h ago
    assert sorted(r["worker_id"] for r in await rows(store, "SELECT worker_id FROM workers")) == [
        "recent", "w"]
