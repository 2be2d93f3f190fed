"""Builds and the upgrade gate: a deploy never fails or silently strands a run.

A worker with a ``build_id`` takes a run another build advanced only after
the run's history replays against its own code; a run it cannot replay is
handed back, shown blocked (with the first diverging op) and left to a
worker of a build that replays it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.testing import isolated_definitions

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # claims and replays are loop-independent; the loops are covered elsewhere


@pytest.fixture(params=[pytest.param("sqlite"),
                        pytest.param("postgres", marks=[pytest.mark.postgres]),
                        pytest.param("mariadb", marks=[pytest.mark.mariadb])])
def driver_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@activity.defn(name="bd_a")
async def step_a(x: str) -> str:
    return f"a:{x}"


@activity.defn(name="bd_b")
async def step_b(x: str) -> str:
    return f"b:{x}"


@activity.defn(name="bd_c")
async def step_c(x: str) -> str:
    return f"c:{x}"


ACTIVITIES = [step_a, step_b, step_c]


@workflow.defn(name="bd_order")
class OrderV1:
    """v1: a, then b, then wait for 'go'."""

    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self, x: str) -> list[str]:
        done = [await workflow.execute_activity(step_a, x),
                await workflow.execute_activity(step_b, x)]
        await workflow.wait_condition(lambda: self.go)
        return done

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


@workflow.defn(name="bd_patched")
class PatchedV1:
    """v1: a, wait for 'go', b."""

    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self, x: str) -> list[str]:
        done = [await workflow.execute_activity(step_a, x)]
        await workflow.wait_condition(lambda: self.go)
        done.append(await workflow.execute_activity(step_b, x))
        return done

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


with isolated_definitions():  # v2 changes the order of two ops runs in flight recorded

    @workflow.defn(name="bd_order")
    class OrderV2(OrderV1):
        @workflow.run
        async def run(self, x: str) -> list[str]:
            done = [await workflow.execute_activity(step_b, x),
                    await workflow.execute_activity(step_a, x)]
            await workflow.wait_condition(lambda: self.go)
            return done

    @workflow.defn(name="bd_patched")
    class PatchedV2(PatchedV1):
        """v2 adds step c, behind a patch: runs in flight replay."""

        @workflow.run
        async def run(self, x: str) -> list[str]:
            done = [await workflow.execute_activity(step_a, x)]
            await workflow.wait_condition(lambda: self.go)
            if workflow.patched("add-c"):
                done.append(await workflow.execute_activity(step_c, x))
            done.append(await workflow.execute_activity(step_b, x))
            return done


with isolated_definitions():  # v3 changes it again, differently: it replays no run of v1

    @workflow.defn(name="bd_order")
    async def order_v3(x: str) -> list[str]:
        return [await workflow.execute_activity(step_c, x)]


V1 = [OrderV1, PatchedV1]
V2 = [OrderV2, PatchedV2]
#: what `durable check-upgrade --worker test_builds:V2_WORKER` loads
V1_WORKER = {"workflows": V1, "activities": ACTIVITIES, "build_id": "v1"}
V2_WORKER = {"workflows": V2, "activities": ACTIVITIES, "build_id": "v2"}


async def check_upgrade(url: str, spec: str, *more: str, namespace: str = "default",
                        env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """`durable -n NS check-upgrade --db URL --worker test_builds:SPEC --json` (in
    a thread: the command runs its own event loop); its exit code and output."""
    from click.testing import CliRunner

    from durable.cli._group import cli

    def invoke() -> Any:
        return CliRunner().invoke(cli, ["-n", namespace, "check-upgrade", "--db", url,
                                        "--worker", f"test_builds:{spec}", "--json", *more],
                                  env=env)

    result = await anyio.to_thread.run_sync(invoke)
    assert result.output.startswith("{"), (result.output, result.exception)
    return result.exit_code, json.loads(result.output)


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll a condition read from storage (no fixed sleep decides the outcome)."""
    with anyio.move_on_after(20):
        while not await check():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"not within 20 s: {what}")


async def waiting(handle: durable.WorkflowHandle[Any]) -> bool:
    info = await handle.describe()
    return any(p["kind"] == "condition" for p in info["pending_operations"])


@pytest.fixture
async def storage(db_url: str) -> AsyncIterator[durable.Client]:
    async with durable.connect(db_url) as c:
        yield c
        drop = getattr(c.driver, "drop_schema", None)
        if drop is not None:
            await drop()


def worker(c: durable.Client, workflows: list[Any], build: str | None) -> durable.Worker:
    return durable.Worker(c, workflows=workflows, activities=ACTIVITIES, build_id=build,
                          poll_interval=0.1, lease_seconds=5.0)


async def test_runs_record_the_build_that_started_and_last_took_them(
        storage: durable.Client) -> None:
    async with worker(storage, V1, "v1"):
        handle = await storage.start(OrderV1, "x", id="bd-record")
        await until(lambda: waiting(handle), "the run waits")
        run = (await handle.describe())["run"]
        assert (run["started_build"], run["last_build"]) == ("v1", "v1")
        assert (await handle.describe())["blocked"] is None
        await handle.signal("proceed")
        assert await handle.result() == ["a:x", "b:x"]
    async with worker(storage, V1, None):  # no build: no gate, nothing recorded
        other = await storage.start(OrderV1, "y", id="bd-no-build")
        await until(lambda: waiting(other), "the run waits")
        run = (await other.describe())["run"]
        assert (run["started_build"], run["last_build"]) == (None, None)


async def test_a_build_id_must_be_a_name(storage: durable.Client) -> None:
    with pytest.raises(durable.ConfigurationError, match="Worker build_id must not be empty"):
        worker(storage, V1, "")
    with pytest.raises(durable.ConfigurationError, match="Worker build_id must be a string"):
        worker(storage, V1, 2)  # type: ignore[arg-type]


async def test_a_deploy_that_changes_an_op_order_blocks_runs_in_flight_and_fails_none(
        storage: durable.Client, db_url: str) -> None:
    # v1 starts three runs of the changed workflow and one of the patched one
    async with worker(storage, V1, "v1"):
        changed = [await storage.start(OrderV1, f"o{i}", id=f"bd-o{i}") for i in range(3)]
        patched = await storage.start(PatchedV1, "p", id="bd-p")
        for handle in [*changed, patched]:
            await until(lambda h=handle: waiting(h), "v1 ran the run to its wait")
    # the old worker restarts (a rolling deploy): v2 comes up first and claims them
    async with worker(storage, V2, "v2") as new:

        async def blocked_for_v2() -> bool:
            infos = [await h.describe() for h in changed]
            return all(i["blocked"] is not None for i in infos)

        await until(blocked_for_v2, "v2 refused the runs it cannot replay")
        for handle in changed:
            info = await handle.describe()
            assert info["blocked"]["build_id"] == "v2"
            assert ("asked for activity 'bd_b' at 0:1, but history recorded activity 'bd_a' "
                    "there") in info["blocked"]["divergence"]
            assert info["status"] == "running" and info["run"]["last_build"] == "v1"
            assert not info["run"]["needs_review"]
        # the patched change replays: v2 took that run and continues it
        await until(lambda: _last_build(patched, "v2"), "v2 took the patched run")
        assert (await patched.describe())["blocked"] is None
        await patched.signal("proceed")
        assert await patched.result() == ["a:p", "c:p", "b:p"]
        assert new.gate.blocked == 3 and new.gate.checks == 4

        # an old worker comes back: the blocked runs stay with it
        async with worker(storage, V1, "v1") as old:
            await until(lambda: _owned_by(changed, old.worker_id), "v1 took the blocked runs")
            await changed[0].signal("proceed")
            assert await changed[0].result() == ["a:o0", "b:o0"]
            info = await changed[1].describe()
            assert info["blocked"]["build_id"] == "v2" and info["run"]["last_build"] == "v1"
            assert old.presence.clashes == []  # two builds: a deploy, not a clash
        # the old worker stopped: v2 still does not take (or fail) what it cannot replay
        await new.runs.claim_now()
        for handle in changed[1:]:
            info = await handle.describe()
            assert info["status"] == "running" and info["run"]["owner"] is None
            assert info["blocked"]["build_id"] == "v2"
        # the run lists say so (they said "waiting", as for a timer): embedded and CLI
        listed = {r["workflow_id"]: r for r in await storage.list()}
        assert [listed[f"bd-o{i}"]["blocked_build"] for i in (1, 2)] == ["v2", "v2"]
        assert listed["bd-o1"]["waiting"] is True
        assert listed["bd-p"]["blocked_build"] is None and listed["bd-o0"]["blocked_build"] is None
        from click.testing import CliRunner

        from durable.cli._group import cli

        said = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(
            cli, ["--db", db_url, "list"], env={"COLUMNS": "400"}))
        line = next(x for x in said.output.splitlines() if x.startswith("bd-o1"))
        assert "[running] blocked by deploy v2" in line and "waiting" not in line, said.output
        # an operator's dashboard counts them
        from durable.http.metrics import Metrics

        text, _ = await Metrics(storage.store).render()
        lines = [x for x in text.decode().splitlines() if x.startswith("durable_runs")]
        assert "durable_runs_blocked{build_id=\"v2\",namespace=\"default\"} 2.0" in lines, lines
        # and the web UI shows them on the run's page
        import httpx
        from test_ui_http import OPERATOR, Browserless, _app

        transport = httpx.ASGITransport(app=_app(storage), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            await Browserless(http, storage).login(OPERATOR)
            page = (await http.get(f"/ui/run?wf=bd-o1&run={changed[1].run_id}")).text
            assert "build v2 cannot take it: workflow bd_order" in page
            assert "started by v1 · last taken by v1" in page
            # only v2 is live: the run waits for a worker, not for its condition
            assert ("a worker of a build that replays it: the 1 live worker(s) of queue default "
                    "that register bd_order are of build v2") in page
            runs = (await http.get("/ui/runs")).text
            row = runs[runs.index('data-workflow-id="bd-o1"'):]
            assert 'data-blocked="v2"' in row[:row.index("</tr>")]
        # the deploy gate lists them, with where each diverges (and reads only)
        code, report = await check_upgrade(db_url, "V2_WORKER")
        assert code == 1 and report["ok"] is False and report["build_id"] == "v2"
        assert report["checked"] == 2
        assert sorted(r["workflow_id"] for r in report["cannot_take"]) == ["bd-o1", "bd-o2"]
        assert all("asked for activity 'bd_b' at 0:1" in r["divergence"]
                   for r in report["cannot_take"])
        assert {r["last_build"] for r in report["cannot_take"]} == {"v1"}
        code, report = await check_upgrade(db_url, "V1_WORKER")
        assert (code, report["ok"], report["checked"], report["cannot_take"]) == (0, True, 2, [])
        assert report["namespace"] == "default" and "note" not in report
        # a namespace where nothing ever ran: it passes, but says nothing was checked
        code, report = await check_upgrade(db_url, "V2_WORKER", namespace="prodd")
        assert (code, report["ok"], report["checked"], report["namespace"]) == (0, True, 0, "prodd")
        assert report["note"].startswith("namespace 'prodd' of this database has no run at all, "
                                         "so nothing was checked")
        # retry-after-review is not the fix for a blocked run, and says what is
        said = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(
            cli, ["--db", db_url, "retry-after-review", "bd-o1"], env={"COLUMNS": "400"}))
        text = " ".join(said.output.split())
        assert said.exit_code == 0, said.output
        assert "bd-o1 was not marked for review: nothing to do; it is blocked by a deploy: " \
               "build v2 cannot take it:" in text, text
        assert "start a worker of a build that replays it, or reset it" in text, text
        # the build id of a deploy comes from the pipeline, not the code
        code, report = await check_upgrade(db_url, "V2_WORKER", "--build-id", "2026-12-06.3")
        assert (code, report["build_id"], len(report["cannot_take"])) == (1, "2026-12-06.3", 2)
        code, report = await check_upgrade(db_url, "V1_WORKER",
                                           env={"DURABLE_BUILD_ID": "abc123"})
        assert (code, report["build_id"]) == (0, "abc123")
        # a run started after the deploy is v2's own
        fresh = await storage.start(OrderV2, "n", id="bd-new")
        await until(lambda: waiting(fresh), "v2 ran the new run")
        await fresh.signal("proceed")
        assert await fresh.result() == ["b:n", "a:n"]
    statuses = [(await h.describe())["status"] for h in [*changed, patched]]
    assert statuses == ["completed", "running", "running", "completed"]  # none failed


async def _last_build(handle: durable.WorkflowHandle[Any], build: str) -> bool:
    return bool((await handle.describe())["run"]["last_build"] == build)


async def _owned_by(handles: list[durable.WorkflowHandle[Any]], worker_id: str) -> bool:
    owners = [(await h.describe())["run"]["owner"] for h in handles]
    return owners == [worker_id] * len(handles)


async def test_two_builds_that_both_refuse_a_run_leave_it_to_a_third(
        storage: durable.Client) -> None:
    """v2 and v3 both cannot replay runs v1 started, and v1 is gone. Each
    refuses each run once; then neither takes it again (before, the refusal
    of one build replaced the other's, and the two took the runs from each
    other in turn without end: hundreds of replays and `run_blocked`
    warnings a second). describe() names both builds, waits for a worker of
    a build that replays it, and the metrics count the run for both."""
    async with worker(storage, V1, "v1"):
        runs = [await storage.start(OrderV1, f"t{i}", id=f"bd-t{i}") for i in range(2)]
        for handle in runs:
            await until(lambda h=handle: waiting(h), "v1 ran the run to its wait")

    async def refused_by(builds: list[str]) -> bool:
        infos = [await h.describe() for h in runs]
        return all(i["blocked"] is not None and i["blocked"]["build_ids"] == builds
                   for i in infos)

    async with worker(storage, V2, "v2") as second:
        await until(lambda: refused_by(["v2"]), "v2 refused the runs")
        async with worker(storage, [order_v3], "v3") as third:
            await until(lambda: refused_by(["v2", "v3"]), "v3 refused them too")
            for _ in range(3):  # neither takes them again, however often it claims
                await second.runs.claim_now()
                await third.runs.claim_now()
            assert (second.gate.blocked, third.gate.blocked) == (2, 2)
            assert (second.gate.checks, third.gate.checks) == (2, 2)
            info = await runs[0].describe()
            assert info["blocked"]["build_id"] == "v3" and info["run"]["owner"] is None
            assert info["status"] == "running" and info["run"]["last_build"] == "v1"
            assert info["waiting_for"] == {
                "kind": "build", "queue": "default", "workflow_type": "bd_order",
                "refused_builds": ["v2", "v3"], "live_workers": 2, "last_build": "v1"}
            from durable.present import blocked_text, wait_of

            kind, reason = wait_of(info["waiting_for"])
            assert kind == "workflow-task" and reason is not None
            assert ("are of builds v2, v3, which cannot (see blocked); start a worker of build "
                    "v1 (which last took it) or of a patched build") in reason
            text = blocked_text(info["blocked"])
            assert text.startswith(
                "builds v2, v3 (build v3, the last to try) cannot take it: workflow bd_order")
            assert text.endswith("there: the code changed in a way that does not replay. A "
                                 "worker of build v1 (which last took it) or of a patched build "
                                 "continues it")
            # a query is answered by a refusing worker: it says so, and marks nothing
            with pytest.raises(durable.QueryFailed) as caught:
                await runs[0].query("state")
            assert "does not replay with this worker's code (build v" in str(caught.value)
            assert "marked for review" not in str(caught.value)
            assert "nothing was recorded" in str(caught.value)
            # an update no worker can take says why (it asked whether a worker ran)
            with pytest.raises(durable.UpdateFailed,
                               match=r"the run is blocked: builds v2, v3 cannot replay it "
                                     r"\(describe\(\)\['blocked'\]\) and no worker of build v1 "
                                     r"\(which last took it\) or of a patched build took it"):
                await runs[0].update("anything", timeout=0.5)
            from durable.http.metrics import Metrics

            text, _ = await Metrics(storage.store).render()
            lines = [x for x in text.decode().splitlines()
                     if x.startswith("durable_runs_blocked")]
            assert sorted(lines) == [
                'durable_runs_blocked{build_id="v2",namespace="default"} 2.0',
                'durable_runs_blocked{build_id="v3",namespace="default"} 2.0'], lines
        # the old build comes back: it takes them and finishes them
        async with worker(storage, V1, "v1"):
            for handle in runs:
                await handle.signal("proceed")
            assert [await h.result() for h in runs] == [["a:t0", "b:t0"], ["a:t1", "b:t1"]]


async def test_a_rollback_blocks_what_the_newer_build_advanced_and_names_it(
        storage: durable.Client) -> None:
    """v2 started a run (its order: b, then a); v2 is rolled back to v1, whose
    code does not replay it. The run is blocked for v1 and names v2, the build
    that last took it, as the one to bring back (it read 'the old one')."""
    async with worker(storage, V2, "v2"):
        handle = await storage.start(OrderV2, "r", id="bd-rollback")
        await until(lambda: waiting(handle), "v2 ran the run to its wait")
    async with worker(storage, V1, "v1"):
        await until(lambda: _blocked(handle), "v1 refused the run")
        info = await handle.describe()
        assert info["blocked"]["build_ids"] == ["v1"] and info["blocked"]["last_build"] == "v2"
        from durable.present import blocked_text

        assert blocked_text(info["blocked"]).endswith(
            "A worker of build v2 (which last took it) or of a patched build continues it")
        assert info["waiting_for"]["kind"] == "build"
    async with worker(storage, V2, "v2"):  # rolled forward again: v2 finishes it
        await handle.signal("proceed")
        assert await handle.result() == ["b:r", "a:r"]


async def test_a_blocked_run_whose_queue_is_also_full_waits_for_a_build(
        storage: durable.Client) -> None:
    """A run no live build can replay waits for a build, whatever else is
    full: its queue's slot freeing (or a higher limit) would not let a
    refusing build take it. `waiting_for` names the build, as `blocked` does,
    not the slot (it did: "waiting for a slot ... held by ...")."""
    async with worker(storage, V2, "v2"):
        handle = await storage.start(OrderV2, "r", id="bd-full-blocked")
        await until(lambda: waiting(handle), "v2 ran the run to its wait")
    async with worker(storage, V1, "v1"):
        await until(lambda: _blocked(handle), "v1 refused the run")
        other = await storage.start(OrderV1, "o", id="bd-full-other")
        await until(lambda: waiting(other), "v1 ran the other run to its wait")
        await storage.set_queue_limits("default", durable.QueueLimits(max_running=1))
        info = await handle.describe()
        assert info["blocked"]["build_ids"] == ["v1"]
        assert info["waiting_for"]["kind"] == "build", info["waiting_for"]
        assert info["waiting_for"]["refused_builds"] == ["v1"]


async def _blocked(handle: durable.WorkflowHandle[Any]) -> bool:
    return (await handle.describe())["blocked"] is not None


async def test_a_queues_builds_say_which_runs_only_the_old_build_can_continue(
        storage: durable.Client, db_url: str) -> None:
    """`client.queue_builds` (``durable queue builds``, ``GET
    /api/task-queues/{q}/build-ids``): before an old build's last worker
    stops, an operator sees which open runs only it can continue; after, the
    build is still listed, with no workers, while runs wait for it."""
    async with worker(storage, V1, "v1") as old:
        runs = [await storage.start(OrderV1, f"s{i}", id=f"bd-s{i}") for i in range(2)]
        for handle in runs:
            await until(lambda h=handle: waiting(h), "v1 ran the run to its wait")
        builds = await storage.queue_builds("default")
        assert (builds["namespace"], builds["task_queue"]) == ("default", "default")
        assert builds["stale_after_seconds"] == 10  # twice the 5 s lease
        [v1] = builds["build_ids"]
        assert (v1["build_id"], v1["rollout_status"], v1["active_worker_count"],
                v1["worker_ids"]) == ("v1", "active", 1, [old.worker_id])
        assert (v1["open_runs"], v1["refused_elsewhere"], v1["blocked_runs"]) == (2, 0, 0)
        # one definition of each workflow type the build registers, no clash
        assert (v1["workflow_definition_fingerprint_count"],
                v1["workflow_definition_fingerprint_conflicts"]) == (2, [])
    async with worker(storage, V2, "v2") as new:

        async def refused() -> bool:
            return all([(await h.describe())["blocked"] is not None for h in runs])

        await until(refused, "v2 refused the runs")
        builds = await storage.queue_builds("default")
        v2, v1 = builds["build_ids"]  # serving builds first
        assert (v2["build_id"], v2["rollout_status"], v2["active_worker_count"],
                v2["open_runs"], v2["blocked_runs"]) == ("v2", "active", 1, 0, 2)
        assert (v1["build_id"], v1["rollout_status"], v1["total_worker_count"],
                v1["stopped_worker_count"], v1["worker_ids"]) == ("v1", "no_workers", 0, 1, [])
        assert (v1["open_runs"], v1["refused_elsewhere"], v1["blocked_runs"]) == (2, 2, 0)
        # nothing claims to be drained or promoted: nothing is, here
        assert {(e["drain_intent"], e["new_start_selected"], e["drained_at"])
                for e in builds["build_ids"]} == {("active", False, None)}
        assert (await storage.queue_builds("elsewhere"))["build_ids"] == []

        from click.testing import CliRunner

        from durable.cli._group import cli

        def invoke(*args: str) -> Any:
            return CliRunner().invoke(cli, ["--db", db_url, "queue", "builds", *args])

        shown = await anyio.to_thread.run_sync(invoke, "default")
        assert shown.exit_code == 0, shown.output
        assert "Builds of queue default" in shown.output
        assert ("warning: 2 open run(s) that other builds cannot replay wait for build v1, "
                "and no live worker runs it: start one, deploy a patched build, or reset "
                "them") in " ".join(shown.output.split())
        misspelt = await anyio.to_thread.run_sync(invoke, "defualt")
        assert ("No worker serves queue 'defualt' and no open run of it has been taken by a "
                "worker yet. Queues in use: default.") in " ".join(misspelt.output.split())
        as_json = await anyio.to_thread.run_sync(invoke, "default", "--json")
        assert [e["build_id"] for e in json.loads(as_json.output)["build_ids"]] == ["v2", "v1"]

        import httpx
        from conftest import REMOTE_TOKEN, remote_plane
        from test_ui_http import VIEWER, Browserless, _app

        transport = httpx.ASGITransport(app=_app(storage), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as page:
            await Browserless(page, storage).login(VIEWER)
            queues = (await page.get("/ui/queues")).text
            assert '<div data-build="v2">v2: 1 live, refused 2</div>' in queues
            assert '<div data-build="v1">v1: no workers, 2 open runs <strong class="warn" ' \
                   'data-stranded="2"' in queues

        async with remote_plane(storage) as url, \
                durable.connect(url, token=REMOTE_TOKEN) as remote:
            theirs = await remote.queue_builds("default")
            ours = await storage.queue_builds("default")
            for snapshot in (theirs, ours):  # a renewal may move a heartbeat between reads
                for entry in snapshot["build_ids"]:
                    entry.pop("last_heartbeat_at")
            assert theirs == ours
            headers = {"X-Durable-Workflow-Control-Plane-Version": "2",
                       "Authorization": f"Bearer {REMOTE_TOKEN}"}
            async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                for action in ("drain", "promote", "resume"):
                    refused_ = await http.post(f"/api/task-queues/default/build-ids/{action}",
                                               json={"build_id": "v1"})
                    assert refused_.status_code == 409, refused_.text
                    body = refused_.json()
                    assert body["reason"] == "capability_unsupported"
                    assert body["message"].startswith(
                        f"cannot {action} build 'v1' of task queue 'default': this server "
                        "does not drain, promote or resume builds: take a build out by "
                        "stopping its workers")
                bad = await http.post("/api/task-queues/default/build-ids/drain", json={})
                assert bad.status_code == 422  # the reference's body: {build_id}
                info = (await http.get("/api/cluster/info")).json()["capabilities"]
                assert (info["build_id_rollouts"], info["build_id_rollout_control"]) == (
                    True, False)
        assert new.gate.blocked == 2
    async with worker(storage, V1, "v1"):  # the old build back: it finishes them
        for handle in runs:
            await handle.signal("proceed")
        assert [await h.result() for h in runs] == [["a:s0", "b:s0"], ["a:s1", "b:s1"]]
    after = await storage.queue_builds("default")
    assert [(e["build_id"], e["rollout_status"], e["open_runs"]) for e in after["build_ids"]] \
        == []  # every worker stopped and no open run names a build


async def test_a_reset_run_keeps_the_build_of_its_kept_history_and_is_gated(
        storage: durable.Client) -> None:
    # v1 records a and b; the run is reset keeping both, while only v2 (b before a) runs
    async with worker(storage, V1, "v1"):
        handle = await storage.start(OrderV1, "r", id="bd-reset")
        await until(lambda: waiting(handle), "v1 ran the run to its wait")
    ops = [p["op_id"] for p in (await handle.describe())["pending_operations"]]
    new = await handle.reset(to_op=ops[0], reason="repair after the deploy")
    info = await new.describe()
    assert info["run"]["last_build"] == "v1"  # the build that recorded what it keeps
    async with worker(storage, V2, "v2") as v2:
        await until(lambda: _blocked(new), "v2 refused the reset run")
        info = await new.describe()
        assert info["status"] == "running" and not info["run"]["needs_review"]
        assert info["blocked"]["build_id"] == "v2" and v2.gate.checks == 1
    async with worker(storage, V1, "v1"):  # v1 replays it and finishes it
        await until(lambda: waiting(new), "v1 took the reset run")
        await new.signal("proceed")
        assert await new.result() == ["a:r", "b:r"]
        assert (await new.describe())["run"]["last_build"] == "v1"


async def _blocked(handle: durable.WorkflowHandle[Any]) -> bool:
    return (await handle.describe())["blocked"] is not None
