"""Workers you can see: who serves a namespace, and names served with different code.

The case behind it: a newcomer ran two example workers on one database; both
registered an activity named ``reserve`` on the default queue with different
code, the wrong one ran, and nothing warned. Now the second worker warns at
start, naming both definitions, and ``durable workers`` shows both workers
and flags the name.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner
from conftest import REMOTE_TOKEN, remote_plane

import durable
from durable import activity, workflow
from durable.cli._group import cli
from durable.http import create_app
from durable.testing import isolated_definitions

pytestmark = pytest.mark.anyio

# Example A: reserving stock.
with isolated_definitions():
    @activity.defn(name="reserve")
    async def reserve_stock(sku: str, quantity: int) -> str:
        return f"{quantity} x {sku}"

    @workflow.defn(name="shop_order")
    async def shop_order(sku: str) -> str:
        result: str = await workflow.execute_activity(reserve_stock, sku, 1)
        return result

# Example B, run on the same database: reserving seats, under the same name.
with isolated_definitions():
    @activity.defn(name="reserve")
    async def reserve_seats(show: str) -> list[str]:
        return [f"{show}:A1"]


@pytest.fixture
def anyio_backend() -> str:
    """Registration is storage work: one host loop is enough."""
    return "asyncio"


def clash_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "durable.worker" and "definition_clash" in r.getMessage()]


async def test_two_examples_on_one_database_warn_naming_both_definitions(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    client = storage_client
    async with durable.Worker(client, workflows=[shop_order], activities=[reserve_stock],
                              identity="shop", poll_interval=0.1):
        assert clash_lines(caplog) == []  # alone on the queue
        async with durable.Worker(client, activities=[reserve_seats], identity="theatre",
                                  poll_interval=0.1) as theatre:
            [line] = clash_lines(caplog)
            assert "reserve" in line
            assert "test_workers.reserve_stock(sku: 'str', quantity: 'int')" in line
            assert "test_workers.reserve_seats(show: 'str')" in line
            assert [c.other_worker_id.split("#")[0] for c in theatre.presence.clashes] == [
                "shop"]
            listed = await client.list_workers()
            assert sorted(w["identity"] for w in listed) == ["shop", "theatre"]
            assert all(w["alive"] and w["task_queues"] == ["default"] for w in listed)
            theirs = {w["identity"]: w["definitions"]["activities"]["reserve"] for w in listed}
            assert theirs["shop"]["qualname"] == "reserve_stock"
            assert theirs["theatre"]["qualname"] == "reserve_seats"
            assert theirs["shop"]["fingerprint"] != theirs["theatre"]["fingerprint"]
        # the one that stopped is listed as gone; the other is still alive
        listed = {w["identity"]: w for w in await client.list_workers()}
        assert (listed["shop"]["alive"], listed["theatre"]["alive"]) == (True, False)
        assert listed["theatre"]["status"] == "gone"


async def test_the_same_code_on_two_workers_is_no_clash(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    async with durable.Worker(storage_client, activities=[reserve_stock], poll_interval=0.1), \
            durable.Worker(storage_client, activities=[reserve_stock], poll_interval=0.1):
        assert clash_lines(caplog) == []
        assert len(await storage_client.list_workers()) == 2


def run_cli(url: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--db", url, *args], env={"NO_COLOR": "1"},
                                prog_name="durable")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


async def test_durable_workers_lists_them_and_flags_the_clash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with durable.connect(url) as client, \
            durable.Worker(client, workflows=[shop_order], activities=[reserve_stock],
                           identity="shop", poll_interval=0.1), \
            durable.Worker(client, activities=[reserve_seats], identity="theatre",
                           poll_interval=0.1):
        human = await anyio.to_thread.run_sync(run_cli, url, "workers")
        data = json.loads(await anyio.to_thread.run_sync(run_cli, url, "workers", "--json"))
    assert "Worker shop alive" in human and "Worker theatre alive" in human
    assert "shop_order" in human
    # "alive" is a presumption: a SIGKILLed worker reads so until its
    # registration lapses, and the view says until when (as the web UI's does)
    flat = " ".join(human.split())
    assert len(re.findall(r"presumed alive until \d{4}-\d\d-\d\d [\d:]+ UTC \(in \d+s\) "
                          r"unless seen again \(a killed worker looks alive until then\)",
                          flat)) == 2, human
    assert "warning: activity 'reserve' on queue 'default' has different code" in human
    assert (data["count"], data["alive"]) == (2, 2)
    [clash] = data["clashes"]
    assert (clash["kind"], clash["name"]) == ("activity", "reserve")
    assert sorted(d["definition"].split("(")[0] for d in clash["definitions"]) == [
        "test_workers.reserve_seats", "test_workers.reserve_stock"]
    assert {w["identity"] for w in data["workers"]} == {"shop", "theatre"}
    assert all(w["last_seen_at"] and w["pid"] for w in data["workers"])
    # both stopped: without --all none is listed, but the command says two
    # stopped rather than that none was ever registered; stopped gracefully,
    # not gone (as a killed worker is)
    human = await anyio.to_thread.run_sync(run_cli, url, "workers")
    assert "No live workers in this namespace: 2 stopped in the last hour" in human, human
    assert "No workers are registered" not in human
    data = json.loads(await anyio.to_thread.run_sync(run_cli, url, "workers", "--json"))
    assert (data["count"], data["alive"], data["gone"], data["stopped"]) == (0, 0, 2, 2)
    listed = await anyio.to_thread.run_sync(run_cli, url, "workers", "--all")
    assert "Worker shop stopped" in listed and "Worker theatre stopped" in listed
    assert " gone" not in listed and "presumed" not in listed, listed
    assert len(re.findall(r"stopped +\d{4}-\d\d-\d\d [\d:]+ UTC \([^)]*\): it stopped "
                          r"itself", listed)) == 2, listed
    assert "more" not in listed, listed
    # a worker that went silent (SIGKILL: last seen 1000 s ago, for 30 s) is gone
    from durable.store.records import WorkerRegistration

    async with durable.connect(url) as client:
        now = client.clock.now()
        await client.store.register_worker(WorkerRegistration(
            "w-killed", client.namespace, "default", ("nobody",), (), ()), 30.0, now - 1000)
    human = await anyio.to_thread.run_sync(run_cli, url, "workers")
    assert ("No live workers in this namespace: 2 stopped and 1 gone in the last hour"
            in human), human
    listed = " ".join((await anyio.to_thread.run_sync(run_cli, url, "workers", "--all")).split())
    assert "Worker w-killed gone" in listed, listed
    assert ("presumed gone: it stopped renewing without saying it stopped (killed, or cut "
            "off); presumed gone since") in listed, listed


# ---------------------------------------------------------------- who holds a run at work

ATTEMPT_STARTED = anyio.Event()
RELEASE_ATTEMPT = anyio.Event()

with isolated_definitions():
    @activity.defn(name="held-pack")
    async def held_pack(order: str) -> str:
        ATTEMPT_STARTED.set()
        await RELEASE_ATTEMPT.wait()
        return order

    @workflow.defn(name="held-order")
    async def held_order(order: str) -> str:
        result: str = await workflow.execute_activity(held_pack, order)
        return result


async def test_the_run_list_names_the_worker_an_attempt_runs_on(
        storage_client: durable.Client) -> None:
    # a run whose activity attempt ran on a SIGKILLed worker was listed "busy":
    # the list names the attempt's worker, and whether it is presumed gone
    global ATTEMPT_STARTED, RELEASE_ATTEMPT
    ATTEMPT_STARTED, RELEASE_ATTEMPT = anyio.Event(), anyio.Event()
    from durable.store.records import WorkerRegistration

    client = storage_client
    # a lease of 600 s: it is seen again only in 200 s, after the test
    async with durable.Worker(client, workflows=[held_order], activities=[held_pack],
                              identity="packer", poll_interval=0.05,
                              lease_seconds=600) as worker:
        await client.start(held_order, "o-1", id="held-o-1")
        with anyio.fail_after(30):
            await ATTEMPT_STARTED.wait()
        [summary] = await client.list()
        holder = summary["holder"]
        assert (holder["worker_id"], holder["alive"], holder["activity"]) == (
            worker.worker_id, True, "held-pack")
        assert summary["waiting"] is False
        from durable import present, present_ops
        info = await client.get_handle("held-o-1").describe()
        owner = present_ops.owner_text(
            info["run"]["owner"], await present_ops.owner_presence(info, client.list_workers),
            present.utcnow())
        assert owner.startswith(f"{worker.worker_id} (last seen ") and \
            "presumed alive until" in owner, owner
        # its record as a worker last seen 1000 s ago leaves it (killed then)
        await client.store.register_worker(WorkerRegistration(
            worker.worker_id, client.namespace, "default", ("held-order",), ("held-pack",), ()),
            30.0, client.clock.now() - 1000)
        [summary] = await client.list()
        assert summary["holder"]["alive"] is False and summary["waiting"] is True
        text = present.holder_text(summary["holder"], present.utcnow())
        # `durable describe` named it the run's owner, nothing more
        info = await client.get_handle("held-o-1").describe()
        owner = present_ops.owner_text(
            info["run"]["owner"], await present_ops.owner_presence(info, client.list_workers),
            present.utcnow())
        assert owner.startswith(f"{worker.worker_id} (last seen 16m "), owner
        assert ("ago, presumed gone: another worker takes the run once that worker's lease "
                "on it has lapsed (lease end: ") in owner, owner
        # when: the run's own lease, which describe() names (it said only "once lapsed")
        lease = present.instant(info["run"]["lease_expires_at"])
        assert lease is not None and f"(lease end: {present.absolute(lease)}, in " in owner
        assert text is not None and text.startswith(
            f"activity held-pack runs on worker {worker.worker_id}, last seen 16m")
        assert "presumed gone: the attempt ends when it times out" in text
        RELEASE_ATTEMPT.set()
        with anyio.fail_after(30):
            assert await client.get_handle("held-o-1").result() == "o-1"


VERSION = {"X-Durable-Workflow-Control-Plane-Version": "2"}

# a workflow only its worker knows: started by name, its function is not here
with isolated_definitions():
    @workflow.defn(name="greet-elsewhere")
    async def greet_elsewhere(name: str, punctuation: str = "!") -> str:
        return f"hello {name}{punctuation}"


async def test_a_start_by_name_with_arguments_its_workers_do_not_take_is_refused(
    storage_client: durable.Client,
) -> None:
    """The live workers registered how many arguments the function takes: a
    start by name (or a schedule) whose every run would fail with Python's
    TypeError is refused at the call, nothing recorded; the right count starts."""
    client = storage_client
    async with durable.Worker(client, workflows=[greet_elsewhere]):
        for args in ((), ("a", "b", "c")):
            with pytest.raises(durable.ConfigurationError, match=(
                    r"workflow 'greet-elsewhere' \(as its live workers register it\) takes "
                    rf"1 to 2 arguments \(name, punctuation\), got {len(args)}")):
                await client.start("greet-elsewhere", *args, id="arity-1")
        with pytest.raises(durable.ConfigurationError, match="got 0"):
            await client.create_schedule("arity-s", durable.ScheduleSpec(every=3600),
                                         "greet-elsewhere")
        assert await client.list_schedules() == []
        with pytest.raises(durable.WorkflowNotFound):
            await client.get_handle("arity-1").describe()
        assert await (await client.start("greet-elsewhere", "ann", id="arity-2")).result() \
            == "hello ann!"
        # over the control plane (the reference client's start, curl) likewise
        app = create_app(client, anonymous_role="operator", environ={})
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://127.0.0.1") as http:
            refused = await http.post("/api/workflows", headers=VERSION, json={
                "workflow_id": "arity-3", "workflow_type": "greet-elsewhere", "input": []})
        assert refused.status_code == 400, refused.text
        assert "takes 1 to 2 arguments (name, punctuation), got 0" in refused.json()["message"]
        with pytest.raises(durable.WorkflowNotFound):
            await client.get_handle("arity-3").describe()
        # a remote client (durable start --server) cannot read the workers'
        # definitions: the control plane checks its start by name
        async with remote_plane(client) as url, durable.connect(
                url, token=REMOTE_TOKEN) as remote:
            with pytest.raises(durable.ConfigurationError,
                               match=r"takes 1 to 2 arguments \(name, punctuation\), got 3"):
                await remote.start("greet-elsewhere", "a", "b", "c", id="arity-4")
            with pytest.raises(durable.ConfigurationError, match="got 0"):
                await remote.signal_with_start("greet-elsewhere", id="arity-4", signal="poke")
            with pytest.raises(durable.WorkflowNotFound):
                await client.get_handle("arity-4").describe()
            started = await remote.start("greet-elsewhere", "bo", id="arity-5")
            assert await started.result() == "hello bo!"


async def test_a_lease_too_short_to_renew_is_refused_at_the_worker(
    storage_client: durable.Client,
) -> None:
    """A lease of milliseconds lapsed between its renewals: healthy runs were
    taken back and failed with WorkerLost, thousands of log lines a second
    (the embedding audit's `lease_seconds=0.001`). Refused at the call now;
    half a second, the shortest the tests use, is accepted."""
    for bad in (0.001, 0.49, 0):
        with pytest.raises(durable.ConfigurationError,
                           match=r"Worker lease_seconds must be at least 0.5 seconds"):
            durable.Worker(storage_client, workflows=[greet_elsewhere], lease_seconds=bad)
    assert durable.Worker(storage_client, workflows=[greet_elsewhere],
                          lease_seconds=0.5).lease_seconds == 0.5


async def test_an_identity_leaves_room_for_the_worker_ids_suffix(
    storage_client: durable.Client,
) -> None:
    """A worker id is ``{identity}#{8 hex}``: an identity of 247 to 255
    characters made a worker id past 255, which MariaDB's keys refused with
    the driver's own DataError when the worker started (SQLite and
    PostgreSQL stored it). Refused at the call, naming the limit; 246 works."""
    with pytest.raises(durable.ConfigurationError, match="at most 246 are allowed"):
        durable.Worker(storage_client, workflows=[greet_elsewhere], identity="w" * 247)
    async with durable.Worker(storage_client, workflows=[greet_elsewhere],
                              identity="😀" * 246) as worker:
        assert len(worker.worker_id) == 255
        handle = await storage_client.start("greet-elsewhere", "ann", id="identity-1")
        assert await handle.result() == "hello ann!"
