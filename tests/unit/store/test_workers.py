"""The worker registry: who is alive, and what names live workers can run."""

from __future__ import annotations

import pytest

from durable.store import Store
from durable.store.records import DefinitionClash, WorkerRegistration

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
    await store.deregister_worker("w1", T0 + 5)
    await store.deregister_worker("w1", T0 + 5)  # idempotent
    assert await store.registered_names(NS, T0 + 5) == (set(), set())
    [gone] = await store.list_workers(NS, T0 + 5)  # still listed, as gone
    assert (gone["worker_id"], gone["alive"], gone["status"]) == ("w1", False, "gone")
    assert gone["stopped_at"] is not None


async def test_long_expired_registrations_are_pruned(store: Store) -> None:
    await store.register_worker(worker("gone"), 30.0, T0)
    await store.register_worker(worker("recent"), 30.0, T0 + 3000)
    await store.register_worker(worker("w"), 30.0, T0 + 3631)  # "gone" expired > 1 h ago
    assert sorted(r["worker_id"] for r in await rows(store, "SELECT worker_id FROM workers")) == [
        "recent", "w"]


def described(worker_id: str, activities: dict[str, str], host: str = "h1",
              queue: str = "default") -> WorkerRegistration:
    """A registration whose activities have these fingerprints."""
    defs = {"workflows": {}, "activities": {
        name: {"module": f"mod_{fp}", "qualname": name, "signature": "(x)", "fingerprint": fp}
        for name, fp in activities.items()}}
    return WorkerRegistration(worker_id, NS, queue, (), tuple(sorted(activities)), (),
                              identity=worker_id, host=host, pid=42, build_id="b1",
                              definitions=defs, started_at=T0 - 5)


async def test_workers_are_listed_with_what_they_are_serve_and_hold(store: Store) -> None:
    await store.register_worker(described("w1", {"reserve": "aa"}), 30.0, T0)
    await store.register_worker(described("w2", {"ship": "bb"}, host="h2"), 30.0, T0 + 20)
    listed = await store.list_workers(NS, T0 + 40)  # w1 expired at T0 + 30
    assert [(w["worker_id"], w["alive"]) for w in listed] == [("w2", True), ("w1", False)]
    w2 = listed[0]
    assert (w2["host"], w2["pid"], w2["build_id"], w2["task_queues"]) == (
        "h2", 42, "b1", ["default"])
    assert w2["activities"] == ["ship"]
    assert w2["definitions"]["activities"]["ship"]["module"] == "mod_bb"
    assert w2["last_seen_at"] == "2023-11-14T22:13:40+00:00"  # T0 + 20
    assert (w2["runs_held"], w2["activities_held"]) == (0, 0)


async def test_a_name_registered_with_different_code_on_one_queue_is_a_clash(
    store: Store,
) -> None:
    assert await store.register_worker(described("w1", {"reserve": "aa", "ship": "s"}),
                                       30.0, T0) == []
    clashes = await store.register_worker(described("w2", {"reserve": "bb", "ship": "s"}),
                                          30.0, T0 + 1)
    assert clashes == [DefinitionClash(
        "activity", "reserve", "default",
        mine={"module": "mod_bb", "qualname": "reserve", "signature": "(x)",
              "fingerprint": "bb"},
        other_worker_id="w1", other_host="h1",
        other={"module": "mod_aa", "qualname": "reserve", "signature": "(x)",
               "fingerprint": "aa"})]
    message = clashes[0].message()
    assert "mod_aa.reserve(x)" in message and "mod_bb.reserve(x)" in message
    # the same name on another queue, or against a gone worker, is no clash
    assert await store.register_worker(described("w3", {"reserve": "cc"}, queue="other"),
                                       30.0, T0 + 2) == []
    await store.deregister_worker("w1", T0 + 3)
    await store.deregister_worker("w2", T0 + 3)
    assert await store.register_worker(described("w4", {"reserve": "dd"}), 30.0, T0 + 4) == []


async def test_describe_says_when_a_pending_attempts_name_has_two_definitions(
    store: Store,
) -> None:
    from ._support import NS as ns
    from ._support import commit, schedule, started_and_claimed

    run = await started_and_claimed(store)
    await commit(store, run, schedule("0:1", "reserve"), now=T0)
    await store.register_worker(described("shop", {"reserve": "aa"}), 30.0, T0)
    await store.register_worker(described("theatre", {"reserve": "bb"}), 30.0, T0)
    info = await store.describe(ns, run.workflow_id, None, T0 + 1)
    assert info is not None
    [op] = info["pending_operations"]
    assert op["definition_clash"] == [
        {"definition": "mod_aa.reserve(x)", "workers": ["shop"]},
        {"definition": "mod_bb.reserve(x)", "workers": ["theatre"]}]
    await store.deregister_worker("theatre", T0 + 2)  # one definition left: no clash
    info = await store.describe(ns, run.workflow_id, None, T0 + 3)
    assert info is not None and "definition_clash" not in info["pending_operations"][0]
