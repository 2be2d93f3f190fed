"""Arguments a function does not take, and options of the wrong type, are
refused at the call that passes them, before anything is recorded; so are a
child's id that storage cannot hold and a predicate that is async.

Before: `client.start(wf, 1, 2)` recorded a run that failed on the worker
with Python's TypeError; `workflow.execute_activity(act, 1, 2)` scheduled an
activity whose every attempt failed with it, retried by its policy; a dict
as options raised AttributeError('dict' object has no attribute 'memo'); a
child id with a NUL was started; an async predicate was always true.
"""

from __future__ import annotations

from typing import Any

import pytest

import durable
from durable import activity, workflow

pytestmark = pytest.mark.anyio


@activity.defn
def args_double(x: int) -> int:
    return 2 * x


@workflow.defn
async def args_one(x: int) -> int:
    return x + 1


@workflow.defn
async def args_misuse(kind: str) -> object:
    if kind == "activity":
        return await workflow.execute_activity(args_double, 1, 2)
    if kind == "local":
        return await workflow.execute_local_activity(args_double)
    if kind == "child":
        return await workflow.execute_child(args_one, 1, 2, id="args-child")
    if kind == "continue":
        workflow.continue_as_new()
    if kind == "child id":
        return await workflow.execute_child(args_one, 1, id="child\x00")
    if kind == "predicate":
        async def ready() -> bool:
            return False
        return await workflow.wait_condition(ready)
    if kind == "external id":
        return await workflow.get_external_handle("x" * 300).signal("go")
    if kind == "temporal style":  # Temporal's keyword options
        return await workflow.execute_activity(
            args_double, 1, start_to_close_timeout=10)  # type: ignore[arg-type]
    if kind == "local keyword":
        return await workflow.execute_local_activity(args_double, x=1)  # type: ignore[arg-type]
    if kind == "child keyword":
        return await workflow.execute_child(
            args_one, 1, id="args-kw", run_timeout=5)  # type: ignore[arg-type]
    return await workflow.execute_activity(args_double, 1, options={"max_attempts": 1})


async def test_a_start_with_arguments_the_workflow_does_not_take_records_nothing(
    client: durable.Client
) -> None:
    with pytest.raises(durable.ConfigurationError,
                       match=r"workflow 'args_one' takes 1 argument \(x\), got 2"):
        await client.start(args_one, 1, 2, id="args-many")
    with pytest.raises(durable.ConfigurationError, match="got 0"):
        await client.signal_with_start(args_one, id="args-none", signal="go")
    with pytest.raises(durable.ConfigurationError,
                       match=r"options must be a durable\.StartOptions, got \{'priority': 1\}"):
        await client.start(args_one, 1, id="args-opts", options={"priority": 1})  # type: ignore[arg-type]
    with pytest.raises(durable.ConfigurationError, match=(
            r"client\.start\(\) takes its options in one object, not as keyword arguments: "
            r"options=durable\.StartOptions\(execution_timeout=60\); client\.start\(\) got "
            r"the keyword argument\(s\) 'x', which it does not take: the workflow's arguments "
            r"are positional .* whose fields are .*execution_timeout")):
        await client.start(args_one, id="args-kw", execution_timeout=60, x=1)  # type: ignore[arg-type]
    with pytest.raises(durable.ConfigurationError, match=r"client\.execute\(\) takes its opt"):
        await client.execute(args_one, 1, id="args-kw", priority=1)  # type: ignore[arg-type]
    assert await client.list() == []


@pytest.mark.parametrize(("kind", "message"), [
    ("activity", r"activity 'args_double' takes 1 argument \(x\), got 2"),
    ("local", r"local activity 'args_double' takes 1 argument \(x\), got 0"),
    ("child", r"child workflow 'args_one' takes 1 argument \(x\), got 2"),
    ("continue", r"workflow.continue_as_new\(\) of workflow 'args_misuse' takes 1 argument"),
    ("options", r"workflow.execute_activity\(options=...\) must be a durable.ActivityOptions"),
    ("child id", r"child workflow id 'child\\x00' contains the control character"),
    ("predicate", r"wait_condition needs a plain function that says whether to go on"),
    ("external id", r"workflow id is 300 characters long; at most 255"),
    ("temporal style", r"workflow\.execute_activity\(\) takes its options in one object, not as "
                       r"keyword arguments: options=durable\.ActivityOptions\("
                       r"start_to_close_timeout=10\)"),
    ("local keyword", r"workflow\.execute_local_activity\(\) got the keyword argument\(s\) 'x', "
                      r"which it does not take: the activity's arguments are positional"),
    ("child keyword", r"workflow\.execute_child\(\) takes its options in one object, not as "
                      r"keyword arguments: options=durable\.ChildOptions\(run_timeout=5\)"),
])
async def test_a_workflows_call_with_them_fails_the_run_at_that_call(
    client: durable.Client, make_worker: Any, kind: str, message: str
) -> None:
    async with make_worker(workflows=[args_misuse, args_one], activities=[args_double]):
        handle = await client.start(args_misuse, kind, id=f"args-{kind}")
        with pytest.raises(durable.WorkflowFailed, match=message):
            await handle.result()
        types = [e.type for e in await handle.history()]
        # nothing was scheduled, started or continued: the run failed at the call
        assert types[-1] == "WorkflowFailed"
        assert not any(t.startswith(("Activity", "LocalActivity", "Child")) for t in types), types
        assert await (await client.start(args_one, 1, id=f"args-{kind}-after")).result() == 2


@workflow.defn
class ArgsHandlers:
    def __init__(self) -> None:
        self.total = 0

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.total >= 10)
        return self.total

    @workflow.signal
    def add(self, k: int) -> None:
        self.total += k

    @workflow.query
    def read(self) -> int:
        return self.total

    @workflow.update
    async def put(self, k: int) -> int:
        self.total += k
        return self.total


async def test_a_handlers_arguments_are_checked_where_its_workflow_is_known(
    client: durable.Client, make_worker: Any
) -> None:
    """Before, a signal with arguments its handler does not take was recorded
    and failed the run when delivered (a TypeError)."""
    async with make_worker(workflows=[ArgsHandlers]):
        handle = await client.start(ArgsHandlers, id="args-handlers")
        with pytest.raises(durable.ConfigurationError, match=(
                r"the signal 'add' of workflow 'ArgsHandlers' takes 1 argument \(k\), got 2")):
            await handle.signal("add", 1, 2)
        with pytest.raises(durable.ConfigurationError, match=r"the query 'read' .* got 1"):
            await handle.query("read", 1)
        with pytest.raises(durable.ConfigurationError, match=r"the update 'put' .* got 0"):
            await handle.update("put")
        assert await handle.update("put", 4) == 4
        await handle.signal("add", 6)
        assert await handle.result() == 10
        assert not [e for e in await handle.history() if e.type == "SignalReceived"][1:]


async def test_connect_refuses_a_driver_option_the_driver_does_not_take(tmp_path: Any) -> None:
    """Passed on, it would be a TypeError from inside the driver; nothing is opened."""
    url = f"sqlite:///{tmp_path / 'opts.db'}"
    with pytest.raises(durable.ConfigurationError, match=(
            r"durable\.connect\('sqlite:///.*opts\.db'\) does not take busy_timout, pool; its "
            r"driver accepts busy_timeout, poll_interval, checkpoint_every, file_mode")):
        await durable.connect(url, busy_timout=5, pool=2)
    assert not (tmp_path / "opts.db").exists()
    async with durable.connect(url, busy_timeout=5) as client:
        assert await client.list() == []


@pytest.mark.parametrize(("option", "value", "message"), [
    ("limits", "x", r"limits must be a durable\.Limits, got 'x' \(str\)"),
    ("limits", {"payload_bytes": 10},
     r"limits must be a durable\.Limits, got \{'payload_bytes': 10\}"),
    ("clock", "x", r"clock must be a durable\.Clock \(now\(\) and sleep_until\(\)\)"),
    ("converter", "x", r"converter must be a durable\.PayloadConverter"),
])
async def test_connect_refuses_a_client_option_of_the_wrong_kind(
        tmp_path: Any, option: str, value: Any, message: str) -> None:
    """Unchecked, it was kept and the first start raised an AttributeError or a
    TypeError ("encode() argument 'encoding' must be str") far from the call."""
    url = f"sqlite:///{tmp_path / 'opts.db'}"
    with pytest.raises(durable.ConfigurationError, match=message):
        await durable.connect(url, **{option: value})
    async with durable.connect(url, limits=durable.Limits(), clock=durable.SystemClock(),
                               converter=durable.JSONConverter()) as client:
        assert await client.list() == []
