"""Reset: repair a failed or stuck run after a fix without running its recorded steps again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.testing import Replayer

pytestmark = pytest.mark.anyio

ONCE = durable.ActivityOptions(max_attempts=1, start_to_close_timeout=30)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[pytest.param("sqlite"),
                        pytest.param("postgres", marks=[pytest.mark.postgres]),
                        pytest.param("mariadb", marks=[pytest.mark.mariadb])])
def driver_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


#: how often each step ran, and whether step 5's bug is fixed (the deploy)
RAN: dict[int, int] = {}
FIXED = {"step5": False}


@activity.defn(name="rs_step")
async def step(i: int) -> int:
    RAN[i] = RAN.get(i, 0) + 1
    if i == 5 and not FIXED["step5"]:
        raise ValueError("bug in step 5: division by the wrong total")
    return i * 10


@workflow.defn(name="rs_six_steps")
async def six_steps(n: int) -> list[int]:
    return [await workflow.execute_activity(step, i, options=ONCE) for i in range(1, n + 1)]


@workflow.defn(name="rs_waiting")
class Waiting:
    """Two steps, a signal, then waits for a signal that never comes: stuck."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self) -> list[Any]:
        done = [await workflow.execute_activity(step, 1, options=ONCE)]
        await workflow.wait_condition(lambda: len(self.notes) >= 1)
        done.append(await workflow.execute_activity(step, 2, options=ONCE))
        await workflow.wait_condition(lambda: len(self.notes) >= 2)
        return [*done, *self.notes]

    @workflow.signal
    def note(self, text: str) -> None:
        self.notes.append(text)


@pytest.fixture
async def storage(db_url: str) -> AsyncIterator[durable.Client]:
    RAN.clear()
    FIXED["step5"] = False
    async with durable.connect(db_url) as c:
        yield c
        drop = getattr(c.driver, "drop_schema", None)
        if drop is not None:
            await drop()


def worker(c: durable.Client) -> durable.Worker:
    return durable.Worker(c, workflows=[six_steps, Waiting], activities=[step],
                          poll_interval=0.1, lease_seconds=5.0)


async def test_a_run_failed_by_a_bug_at_its_fifth_step_completes_after_a_fix_and_a_reset(
        storage: durable.Client) -> None:
    async with worker(storage):
        handle = await storage.start(six_steps, 6, id="rs-bug")
        with pytest.raises(durable.WorkflowFailed):
            await handle.result()
        assert RAN == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
        FIXED["step5"] = True  # the fix is deployed
        new = await handle.reset(to_op="0:5", reason="step 5 fixed in 1.4.2")
        assert await new.result() == [10, 20, 30, 40, 50, 60]
    assert RAN == {1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 1}  # steps 1-4 did not run again
    old_run = handle.run_id
    info = await storage.get_handle("rs-bug").describe()
    assert info["status"] == "completed" and info["run_count"] == 2
    assert info["run"]["run_id"] == new.run_id
    assert (info["run"]["reset_from_run_id"], info["run"]["reset_from_op"]) == (old_run, "0:5")
    old = await storage.get_handle("rs-bug", run_id=old_run).describe()
    assert old["run"]["status"] == "failed" and old["run"]["reset_run_id"] == new.run_id
    history = await new.history()
    reset_event = next(e for e in history if e.type == "WorkflowReset")
    assert reset_event.data["kept_ops"] == 4 and reset_event.data["reason"] == (
        "step 5 fixed in 1.4.2")
    assert any(e.type == "WorkflowResetAsNew" for e in await storage.get_handle(
        "rs-bug", run_id=old_run).history())
    # the new run's history stands on its own: it replays against the fixed code
    result = await Replayer(workflows=[six_steps], activities=[step]).replay(history)
    assert result.finished and result.status == "completed"


async def test_a_stuck_run_is_terminated_and_continues_keeping_the_signals_before_the_op(
        storage: durable.Client) -> None:
    async with worker(storage):
        handle = await storage.start(Waiting, id="rs-stuck")
        await handle.signal("note", "first")

        async def second_step_done() -> bool:
            return RAN.get(2) == 1 and any(
                p["kind"] == "condition" for p in (await handle.describe())["pending_operations"])

        with anyio.fail_after(20):
            while not await second_step_done():
                await anyio.sleep(0.05)
        # stuck waiting: reset to the second step (the first step and the first
        # signal's delivery are kept; the second step runs again)
        new = await handle.reset(to_op="0:2", reason="stuck")
        old = await storage.get_handle("rs-stuck", run_id=handle.run_id).describe()
        assert old["run"]["status"] == "terminated" and old["run"]["reset_run_id"] == new.run_id
        await new.signal("note", "second")
        assert await new.result() == [10, 20, "first", "second"]
    assert RAN == {1: 1, 2: 2}


async def test_what_a_reset_refuses(storage: durable.Client) -> None:
    FIXED["step5"] = True
    async with worker(storage):
        done = await storage.start(six_steps, 2, id="rs-done")
        assert await done.result() == [10, 20]
        with pytest.raises(durable.ConfigurationError, match="is completed: only a failed"):
            await done.reset(to_op="0:1", reason="why not")
        FIXED["step5"] = False
        failed = await storage.start(six_steps, 6, id="rs-failed")
        with pytest.raises(durable.WorkflowFailed):
            await failed.result()
        with pytest.raises(durable.ConfigurationError,
                           match=r"recorded no op '0:9'; its main ops are 0:1, 0:2, 0:3, 0:4, "
                                 r"0:5 \(`durable history ID`"):
            await failed.reset(to_op="0:9", reason="typo")
        with pytest.raises(durable.ConfigurationError, match="reason must say why"):
            await failed.reset(to_op="0:5", reason=" ")
        with pytest.raises(durable.WorkflowNotFound):
            await storage.get_handle("rs-nobody").reset(to_op="0:1", reason="x")
        FIXED["step5"] = True
        new = await failed.reset(to_op="0:5", reason="fixed")
        assert await new.result() == [10, 20, 30, 40, 50, 60]
        with pytest.raises(durable.RunNotCurrent):  # the old run is no longer current
            await failed.reset(to_op="0:5", reason="again")


async def test_reset_over_http_and_from_the_command_line(storage: durable.Client,
                                                         db_url: str) -> None:
    import json

    from click.testing import CliRunner
    from conftest import REMOTE_TOKEN, remote_plane

    from durable.cli._group import cli

    async with worker(storage):
        failed = [await storage.start(six_steps, 6, id=f"rs-{via}") for via in ("http", "cli")]
        for handle in failed:
            with pytest.raises(durable.WorkflowFailed):
                await handle.result()
        FIXED["step5"] = True
        async with remote_plane(storage) as url, durable.connect(url, token=REMOTE_TOKEN) as remote:
            with pytest.raises(durable.ConfigurationError, match="recorded no op '0:7'"):
                await remote.get_handle("rs-http").reset(to_op="0:7", reason="typo")
            new = await remote.get_handle("rs-http").reset(to_op="0:5", reason="fixed")
            assert await new.result() == [10, 20, 30, 40, 50, 60]

        def invoke() -> Any:
            return CliRunner().invoke(cli, ["--db", db_url, "reset", "rs-cli", "--to-op", "0:5",
                                            "--reason", "fixed", "--json"])

        result = await anyio.to_thread.run_sync(invoke)
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        assert (out["to_op"], out["kept_ops"], out["reset_from_run_id"]) == (
            "0:5", 4, failed[1].run_id)
        assert await storage.get_handle("rs-cli").result() == [10, 20, 30, 40, 50, 60]
    assert RAN == {1: 2, 2: 2, 3: 2, 4: 2, 5: 4, 6: 2}  # two runs: steps 1-4 once each


async def test_the_web_ui_shows_the_links_and_resets_a_failed_run(
        storage: durable.Client) -> None:
    import httpx
    from test_ui_http import OPERATOR, Browserless, _app

    async with worker(storage):
        failed = await storage.start(six_steps, 6, id="rs-ui")
        with pytest.raises(durable.WorkflowFailed):
            await failed.result()
        FIXED["step5"] = True
        transport = httpx.ASGITransport(app=_app(storage), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            ui = Browserless(http, storage)
            await ui.login(OPERATOR)
            page = await http.get(f"/ui/run?wf=rs-ui&run={failed.run_id}")
            assert "/ui/run/reset?" in page.text  # a failed run offers a reset
            form = f"/ui/run/reset?wf=rs-ui&run={failed.run_id}"
            csrf = await ui.csrf(form)
            refused = await http.post(form, data={"csrf": csrf, "to_op": ""})
            assert refused.status_code == 422 and "Give the op to continue from" in refused.text
            done = await http.post(form, data={"csrf": csrf, "to_op": "0:5", "reason": "fixed"})
            assert done.status_code == 303
            new_run = (await storage.get_handle("rs-ui").describe())["run"]["run_id"]
            assert f"run={new_run}" in done.headers["location"]
            assert await storage.get_handle("rs-ui").result() == [10, 20, 30, 40, 50, 60]
            page = await http.get(done.headers["location"])
            assert "Reset from" in page.text and failed.run_id in page.text
            old = await http.get(f"/ui/run?wf=rs-ui&run={failed.run_id}")
            assert "Reset as" in old.text and new_run in old.text
            assert "/ui/run/reset?" not in old.text  # reset once: the old run offers no more
