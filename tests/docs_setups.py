"""Named setups and checks for the documentation's Python blocks.

A setup runs before a block, in its namespace: ``SETUPS[name](ns, replace)``;
``replace`` maps text in the block to what it must be here (a server's real
port, a writable path) and is applied to the block before it runs. A check
runs after it: ``CHECKS[name](ns)``, a function or a coroutine function (run
on each of the block's backends). Both are named in the markdown
(``<!-- docs-test: setup=... run=... -->``), so a reader of the test sees
exactly what was added around the block. Checks use what the block defined
(``ns["quote"]``) with real storage and real workers, and compare what the
page shows with what happened.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import io
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio

import durable
from durable.testing import TimeSkippingEnvironment

Namespace = dict[str, Any]
Setup = Callable[[Namespace, dict[str, str]], None]
Check = Callable[[Namespace], None] | Callable[[Namespace], Awaitable[None]]

# The instant the timeouts page's examples start at (its deadlines are
# 13:00 and 14:00 on that day).
DOCS_START = dt.datetime(2026, 4, 12, 12, 0, tzinfo=dt.UTC).timestamp()


# -- helpers -----------------------------------------------------------------


@contextlib.asynccontextmanager
async def running(ns: Namespace, workflows: Iterable[str], activities: Iterable[str] = (),
                  url: str = "sqlite://:memory:",
                  **connect: Any) -> AsyncIterator[durable.Client]:
    """A client and a real worker for the named definitions of the block."""
    async with durable.connect(url, **connect) as client:
        async with durable.Worker(client, workflows=[ns[w] for w in workflows],
                                  activities=[ns[a] for a in activities],
                                  lease_seconds=5.0, poll_interval=0.1):
            yield client


@contextlib.asynccontextmanager
async def virtual(ns: Namespace, workflows: Iterable[str], activities: Iterable[str] = (),
                  start: float | None = DOCS_START) -> AsyncIterator[TimeSkippingEnvironment]:
    async with TimeSkippingEnvironment(start=start) as env:
        async with env.worker(workflows=[ns[w] for w in workflows],
                              activities=[ns[a] for a in activities]):
            yield env


async def history_types(handle: durable.WorkflowHandle) -> list[str]:
    return [e.type for e in await handle.history()]


async def wait_for_event(handle: durable.WorkflowHandle, event: str, count: int = 1) -> None:
    with anyio.fail_after(20):
        while (await history_types(handle)).count(event) < count:
            await anyio.sleep(0.02)


def printed(fn: Callable[[], Any]) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn()
    return out.getvalue().splitlines()


async def printed_async(fn: Callable[[], Awaitable[Any]]) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        await fn()
    return out.getvalue().splitlines()


def comments_after(source: str, code: str) -> list[str]:
    """The ``# comment`` on each line of the block that contains `code`."""
    return [line.split("#", 1)[1].strip() for line in source.splitlines()
            if code in line and "#" in line]


def subset(documented: dict[str, Any], actual: dict[str, Any], where: str) -> None:
    """Every key the page shows is there, with the value it shows."""
    for key, value in documented.items():
        assert key in actual, f"{where}: the page shows {key!r}, the real record has none: {actual}"
        assert actual[key] == value, f"{where}: {key!r} is {actual[key]!r}, the page says {value!r}"


# -- setups ------------------------------------------------------------------


def _code(code: str) -> Setup:
    def setup(ns: Namespace, replace: dict[str, str]) -> None:
        exec(code, ns)
    return setup


def _ctrl_c_after(wait: Callable[[], bool], timeout: float = 20.0) -> Setup:
    """For a block that runs until Ctrl-C: press it once `wait()` is true."""
    def setup(ns: Namespace, replace: dict[str, str]) -> None:
        def press() -> None:
            deadline = time.monotonic() + timeout
            while not wait() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)
        # Ctrl-C raises KeyboardInterrupt, as in a terminal, even where this
        # suite was started with SIGINT ignored (a shell's background job)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=press, daemon=True).start()
        ns["__expect__"] = KeyboardInterrupt
    return setup


def _listening(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        import socket
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        return False
    return probe


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_on_free_port(old: str) -> Setup:
    """The block serves on a fixed port: serve on a free one instead, and
    press Ctrl-C once it answers."""
    def setup(ns: Namespace, replace: dict[str, str]) -> None:
        port = _free_port()
        replace[old] = f"port={port}"
        _ctrl_c_after(_listening(port))(ns, replace)
    return setup


def _myapp_workers(ns: Namespace, replace: dict[str, str]) -> None:
    """The worker module control-plane.md names (myapp.workers:make_worker)."""
    Path("myapp").mkdir(exist_ok=True)
    Path("myapp/__init__.py").write_text("")
    Path("myapp/workers.py").write_text(
        "import durable\nfrom examples.control_plane import make_worker\n")


def _control_plane_server(ns: Namespace, replace: dict[str, str]) -> None:
    """examples/control_plane.py served on a free port, as the page's curl
    session ran it (tokens s3cret/peek), on SQLite in the working directory."""
    import durable.http

    port = _free_port()
    threading.Thread(target=durable.http.serve, daemon=True, kwargs=dict(
        db_url="sqlite:///demo.db", port=port, tokens={"s3cret": "operator", "peek": "viewer"},
        worker="examples.control_plane:make_worker")).start()
    deadline = time.monotonic() + 20
    while not _listening(port)() and time.monotonic() < deadline:
        time.sleep(0.05)
    replace["http://127.0.0.1:8233"] = f"http://127.0.0.1:{port}"


def _var_lib(ns: Namespace, replace: dict[str, str]) -> None:
    """/var/lib/myapp does not exist here: the same absolute URL, in the test's directory."""
    replace["sqlite:////var/lib/myapp/durable.db"] = f"sqlite:///{Path.cwd()}/durable.db"


async def _open(url: str) -> durable.Client:
    client: durable.Client = await durable.connect(url)
    return client


def _client(ns: Namespace, replace: dict[str, str]) -> None:
    """`client`: an open client, as in the code around the fragment."""
    ns["client"] = anyio.run(_open, "sqlite:///app.db")


SETUPS: dict[str, Setup] = {
    # the imports a page states once ("the code samples assume")
    "imports": _code("import anyio\nimport durable\nfrom durable import activity, workflow\n"),
    # the definitions cli.md's worker specs name (examples/shop.py)
    "shop": _code("import durable\n"
                  "from examples.shop import fulfil, pack, pack_items, release, reserve\n"),
    # what durable/cli/_commands.py, where commands live, has in scope
    "cli_commands": _code("from typing import Any\nimport click\nimport durable\n"
                          "from durable.cli._commands import *\n"
                          "from durable.cli._commands import Session, _fmt, parse_args_json\n"
                          "from durable.cli._group import cli\n"),
    "ctrl_c": _ctrl_c_after(lambda: Path("app.db").exists()),
    "serve_on_free_port_8233": _serve_on_free_port("port=8233"),
    "serve_on_free_port_8000": _serve_on_free_port("port=8000"),
    "myapp_workers": _myapp_workers,
    "control_plane_server": _control_plane_server,
    "var_lib": _var_lib,
    "client": _client,
}

CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


# -- README.md and quickstart.md -------------------------------------------------


@check
async def open_clients(ns: Namespace) -> None:
    await ns["open_clients"]()


@check
async def operate(ns: Namespace) -> None:
    import hello  # type: ignore[import-not-found]  # the page's hello.py, saved by the block

    # on virtual time: the page's hello sleeps a 2 s durable timer per run
    # (two runs, on each host loop: 8 s of the suite)
    async with TimeSkippingEnvironment(start=DOCS_START) as env:
        async with env.worker(workflows=[hello.hello], activities=[hello.greet, hello.shout]):
            lines = await printed_async(lambda: ns["operate"](env.client))
    assert lines[0] == "HELLO, ADA!" and lines[1] == "HELLO, GRACE!", lines
    assert lines[2].startswith("completed ") and lines[2].endswith(" []"), lines


@check
def fastapi_app(ns: Namespace) -> None:
    from starlette.testclient import TestClient

    with TestClient(ns["app"]) as http:     # runs the lifespan: the worker starts
        assert http.post("/orders/7").json() == {"workflow_id": "order-7"}
        assert http.post("/orders/7").json() == {"workflow_id": "order-7"}  # a retry
        deadline = time.monotonic() + 20
        while (body := http.get("/orders/7").json())["status"] != "completed":
            assert time.monotonic() < deadline, body
            time.sleep(0.05)
        assert http.get("/orders/unknown").status_code == 404  # not a 500
    assert body == {"status": "completed", "failures": []}


@check
async def main(ns: Namespace) -> None:
    await ns["main"]()


# -- concepts.md -------------------------------------------------------------------


@check
async def quote(ns: Namespace) -> None:
    async with running(ns, ["quote"], ["lookup_price"]) as client:
        result = await client.execute(ns["quote"], ["a", "b", "c"], id="q-1")
    assert result["total"] == 3 * 4200, result
    assert dt.datetime.fromisoformat(result["issued_at"]).tzinfo is not None, result


@check
async def checkout(ns: Namespace) -> None:
    async with running(ns, ["checkout"], ["charge_card"]) as client:
        handle = await client.start(ns["checkout"], "o-1", id="checkout-1")
        assert await handle.result() == "declined: PaymentDeclined: card declined"
        # non_retryable: one attempt, no retry scheduled
        assert (await history_types(handle)).count("ActivityStarted") == 1


@check
async def fulfil(ns: Namespace) -> None:
    async with running(ns, ["fulfil", "ship"]) as client:
        assert await client.execute(ns["fulfil"], "o-1", id="fulfil-1") == "tracking-o-1"
        child = await client.get_handle("ship-o-1").describe()
    assert child["run"]["parent_workflow_id"] == "fulfil-1", child


@check
async def poller(ns: Namespace) -> None:
    """The page's poller as written: 1,000 durable timers of a minute each,
    10 runs chained by continue-as-new, on virtual time."""
    async with virtual(ns, ["poller"]) as env:
        handle = await env.client.start(ns["poller"], 0, 0, id="poller")
        assert await handle.result() == 1_000
        assert (await handle.describe())["run_count"] == 10
        assert env.now() - DOCS_START >= 1_000 * 60


@check
async def priced(ns: Namespace) -> None:
    order_cls = ns["Order"]
    async with running(ns, ["priced"], ["price"]) as client:
        result = await client.execute(ns["priced"], order_cls("o-1", 10), id="priced-1")
    assert result == order_cls("o-1", 20), result


@check
async def structural_limit(ns: Namespace) -> None:
    """The failure record the page shows is what a run over its limit records."""
    from durable import workflow

    @workflow.defn
    async def many_timers() -> None:
        async with workflow.task_group() as tg:
            for _ in range(4):
                tg.start_soon(workflow.sleep, 60)

    ns["many_timers"] = many_timers
    limits = durable.Limits(pending_timers=3)
    async with running(ns, ["many_timers"], limits=limits) as client:
        handle = await client.start(many_timers, id="limits-1")
        try:
            await handle.result()
            raise AssertionError("the run should fail")
        except durable.WorkflowFailed as exc:
            subset(ns["_"], exc.failure, "concepts.md structural_limit")


# -- timeouts.md ---------------------------------------------------------------------


async def _deadlines_run(ns: Namespace, env: TimeSkippingEnvironment) -> durable.WorkflowHandle:
    handle: durable.WorkflowHandle = await ns["start_with_deadlines"](env.client)
    with contextlib.suppress(durable.WorkflowTimedOut):
        await handle.result()
    return handle


@check
async def start_with_deadlines(ns: Namespace) -> None:
    async with virtual(ns, ["sleeper"]) as env:
        handle = await _deadlines_run(ns, env)
        with anyio.fail_after(5):
            try:
                await handle.result()
            except durable.WorkflowTimedOut as exc:
                assert exc.timeout_kind == "run_timeout"
                assert exc.deadline_at == dt.datetime(2026, 4, 12, 13, tzinfo=dt.UTC)


@check
async def workflow_started(ns: Namespace) -> None:
    async with virtual(ns, ["sleeper"]) as env:
        handle = await _deadlines_run(ns, env)
        started = (await handle.history())[0]
    assert started.type == "WorkflowStarted"
    subset(ns["_"], started.data, "timeouts.md WorkflowStarted")


@check
async def show(ns: Namespace) -> None:
    async with virtual(ns, ["sleeper"]) as env:
        handle = await _deadlines_run(ns, env)
        lines = await printed_async(lambda: ns["show"](handle))
    source = ns["__source__"]
    documented = comments_after(source, "print(")
    assert lines[:6] == documented, (lines, documented)
    failure = ast.literal_eval(lines[6])
    shown = ast.literal_eval("\n".join(line.strip()[2:] for line in source.splitlines()
                                       if line.strip().startswith("# ")))
    subset(shown, failure, "timeouts.md describe() failure")


@check
async def looping(ns: Namespace) -> None:
    async with virtual(ns, ["looping"]) as env:
        handle = await env.client.start(
            ns["looping"], 1, 1500, id="looping",
            options=durable.StartOptions().with_execution_timeout(7200).with_run_timeout(3600))
        try:
            await handle.result()
            raise AssertionError("the execution timeout should end it")
        except durable.WorkflowTimedOut as exc:
            assert exc.timeout_kind == "execution_timeout"
            assert exc.deadline_at == dt.datetime(2026, 4, 12, 14, tzinfo=dt.UTC)
        info = await handle.describe()
        assert info["run_count"] == 5, info
        runs = [e for e in await env.client.list(limit=10)]
        deadlines = set()
        for summary in runs:
            run = (await env.client.get_handle("looping", run_id=summary["run_id"]).describe())
            deadlines.add(run["run"]["execution_deadline_at"])
        assert deadlines == {"2026-04-12T14:00:00+00:00"}, deadlines


@check
async def importer(ns: Namespace) -> None:
    async with running(ns, ["importer"], ["import_rows"]) as client:
        assert await client.execute(ns["importer"], "rows.csv", id="import-1") == 1000


@check
async def bounded(ns: Namespace) -> None:
    async with running(ns, ["bounded"], ["call_supplier"]) as client:
        assert await client.execute(ns["bounded"], "o-1", id="bounded-1") == "confirmed-o-1"
        handle = await client.start(ns["bounded"], "o-2", id="bounded-2",
                                    options=durable.StartOptions().with_run_timeout(120))
        assert await handle.result() == "confirmed-o-2"
        scheduled = [e.data for e in await handle.history() if e.type == "ActivityScheduled"]
        assert scheduled[0]["start_to_close_timeout"] <= 120, scheduled


@check
async def activity_timeout_failure(ns: Namespace) -> None:
    """An import_rows whose attempts outlast start-to-close until the
    schedule-to-close deadline (12:10) ends it on attempt 2."""
    from durable import activity, workflow

    @activity.defn(name="import_rows")
    async def slow_rows(path: str) -> int:
        await activity.sleep(400)
        return 0

    @workflow.defn
    async def importer(path: str) -> int:
        rows: int = await workflow.execute_activity(
            slow_rows, path, options=durable.ActivityOptions(
                start_to_close_timeout=300, schedule_to_close_timeout=600, max_attempts=3))
        return rows

    ns.update(slow_rows=slow_rows, importer=importer)
    async with virtual(ns, ["importer"], ["slow_rows"]) as env:
        handle = await env.client.start(importer, "rows.csv", id="import-2")
        with contextlib.suppress(durable.WorkflowFailed):
            await handle.result()
        failures = (await handle.describe())["failures"]
    timed_out = [f for f in failures if f.get("exception_class") == "durable.ActivityTimedOut"]
    subset(ns["_"], timed_out[-1], "timeouts.md ActivityTimedOut failure")


@check
async def tolerant(ns: Namespace) -> None:
    # The page's import_rows is quick: its timeout branch is pinned by
    # activity_timeout_failure and tests/test_timeouts.py. Real time here: under
    # auto_skip, virtual time moves on while a sync activity's thread works.
    async with running(ns, ["tolerant"], ["import_rows"]) as client:
        assert await client.execute(ns["tolerant"], "rows.csv", id="tolerant") == 1000


@check
async def crunch(ns: Namespace) -> None:
    from durable import workflow

    @workflow.defn
    async def crunching() -> int:
        done: int = await workflow.execute_activity(
            ns["crunch"], "b-1",
            options=durable.ActivityOptions(heartbeat_timeout=5, start_to_close_timeout=3600))
        return done

    ns["crunching"] = crunching
    async with virtual(ns, ["crunching"], ["crunch"]) as env:
        assert await env.client.execute(crunching, id="crunch") == 100


@check
async def repair(ns: Namespace) -> None:
    url = f"sqlite:///{Path.cwd()}/repair.db"
    assert await printed_async(lambda: ns["repair"](url)) == ["{}"]


@check
def pytest_module(ns: Namespace) -> None:
    """The page's test module, run by pytest as the reader would."""
    import pytest

    assert pytest.main(["-q", "-p", "no:cacheprovider", "-o",
                        "asyncio_default_fixture_loop_scope=function",
                        "test_virtual_time.py"]) == 0


# -- cancellation.md ------------------------------------------------------------------


async def _ship_started(ns: Namespace, client: durable.Client, wf: str = "order",
                        wid: str = "order-c") -> durable.WorkflowHandle:
    handle = await client.start(ns[wf], "o-9", id=wid)
    await wait_for_event(handle, "ActivityStarted", 2)
    return handle


@check
async def withdraw(ns: Namespace) -> None:
    async with running(ns, ["order"], ["reserve", "ship", "release"]) as client:
        handle = await _ship_started(ns, client)
        context = await ns["withdraw"](handle)
        assert isinstance(context, durable.CancellationContext)
        assert context.reason == "Order withdrawn" and context.source == "support-console"
        assert context.requester == {"type": "user", "id": "u-17", "label": "Ada"}
        assert context.deadline.tzinfo is not None
        again = await handle.request_cancellation(reason="again", cleanup_timeout=300)
        assert not again.accepted and again.context == context


@check
async def charge_and_ship(ns: Namespace) -> None:
    async with running(ns, ["charge_and_ship"], ["ship", "refund", "notify"]) as client:
        handle = await client.start(ns["charge_and_ship"], "o-3", id="cs-1")
        await wait_for_event(handle, "ActivityStarted")
        await handle.request_cancellation(reason="Order withdrawn", cleanup_timeout=30)
        try:
            await handle.result()
            raise AssertionError("the run should close as cancelled")
        except durable.WorkflowCancelled:
            pass
        completed = [e.data["activity_type"] for e in await handle.history()
                     if e.type == "ActivityCompleted"]
    assert completed == ["refund", "notify"], completed


@check
async def fire_and_forget(ns: Namespace) -> None:
    async with running(ns, ["fire_and_forget"], ["audit"]) as client:
        result = await client.execute(ns["fire_and_forget"], "o-1", id="ff-1")
    assert "needs a finite schedule_to_close_timeout" in result, result


@check
async def cascade(ns: Namespace) -> None:
    async with running(ns, ["order"], ["reserve", "ship", "release"]) as client:
        handle = await _ship_started(ns, client)
        await handle.request_cancellation(reason="Order withdrawn")
        with contextlib.suppress(durable.WorkflowCancelled):
            await handle.result()
        lines = await printed_async(lambda: ns["inspect"](handle))
    assert lines[0] == "Order withdrawn True", lines
    assert lines[1] == "order-c cancelled completed", lines
    assert lines[2].split()[:3] == ["ship", "try_cancel", "stopped"], lines


@check
async def legacy(ns: Namespace) -> None:
    async with durable.connect("sqlite://:memory:") as client:
        lines = await printed_async(lambda: ns["legacy"](client))
        status = (await client.get_handle("order-o-2").describe())["status"]
    assert "nothing was recorded" in lines[0], lines
    assert status == "terminated"


# -- deployment.md, cli.md, control-plane.md, api.md ------------------------------------


@check
async def billing(ns: Namespace) -> None:
    async with running(ns, ["billing"], ["send_invoice"]) as client:
        assert await client.execute(ns["billing"], "o-1", id="bill-1") == "invoice-o-1"
    await ns["main"]()


@check
async def worker_settings(ns: Namespace) -> None:
    worker = ns["worker"]
    assert worker.worker_id.startswith("worker-") and worker.task_queue == "default"
    await ns["client"].close()


@check
async def sigterm(ns: Namespace) -> None:
    url = f"sqlite:///{Path.cwd()}/serve.db"
    before = signal.getsignal(signal.SIGTERM)
    async with anyio.create_task_group() as tg:
        tg.start_soon(ns["serve"], url)
        # the signal is sent once serve() listens for it (its receiver replaces the
        # handler): sent after a fixed 0.5 s it killed the process on a loaded machine
        with anyio.fail_after(30):
            while signal.getsignal(signal.SIGTERM) is before:
                await anyio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
    # serve() returned: the worker stopped cleanly on SIGTERM


@check
async def worker_spec(ns: Namespace) -> None:
    async with durable.connect("sqlite://:memory:") as client:
        if "make_worker" in ns:
            worker = ns["make_worker"](client)
            assert isinstance(worker, durable.Worker) and worker.task_queue == "orders"
        async with durable.Worker(client, **ns["WORKER"]):
            assert await client.execute(ns["fulfil"], "o-1", 2, id="fulfil-1")


@check
async def describe_keys(ns: Namespace) -> None:
    from durable import workflow

    @workflow.defn
    async def napping() -> None:
        await workflow.sleep(3600)

    ns["napping"] = napping
    async with running(ns, ["napping"]) as client:
        handle = await client.start(napping, id="nap", options=durable.StartOptions()
                                    .with_execution_timeout(7200).with_run_timeout(3600)
                                    .with_memo({"customer": "c-9"}))
        await wait_for_event(handle, "TimerScheduled")
        info = await handle.describe()
    shown = ns["_"]
    assert set(info) == set(shown), (set(info) ^ set(shown))
    assert set(info["run"]) == set(shown["run"]), (set(info["run"]) ^ set(shown["run"]))
    pending = info["pending_operations"][0]
    assert set(pending) <= set(shown["pending_operations"][0]), pending


@check
async def instants(ns: Namespace) -> None:
    from durable import workflow

    @workflow.defn
    async def overslept() -> None:
        await workflow.sleep(3600)

    ns["overslept"] = overslept
    async with virtual(ns, ["overslept"]) as env:
        handle = await env.client.start(overslept, id="late",
                                        options=durable.StartOptions().with_run_timeout(60))
        await ns["instants"](handle)


# -- logging.md -------------------------------------------------------------------


@check
async def default_output(ns: Namespace) -> None:
    import logging

    lines = await printed_async(ns["main"])
    assert lines[-1] == "hello Ada", lines
    assert any("greeting" in line and "workflow_id=greet-ada" in line for line in lines), lines
    # durable's own events stay in logging, quiet at its default level
    assert not logging.getLogger("durable.worker").isEnabledFor(logging.INFO)


@check
async def json_lines(ns: Namespace) -> None:
    import json

    lines = await printed_async(ns["main"])
    assert "hello Ada" in lines, lines
    events = [json.loads(line) for line in lines if line != "hello Ada"]
    by_event = {e["event"]: e for e in events}
    assert by_event["worker_started"]["logger"] == "durable.worker", events
    assert by_event["greeting"]["logger"] == "durable.workflow", events
    assert by_event["greeting"]["workflow_id"] == "greet-ada", events
    assert by_event["run_stopped"]["stop_kind"] == "completed", events
    assert by_event["run_stopped"]["logger"] == "durable.runs", events


@check
async def stdlib_records(ns: Namespace) -> None:
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logging.getLogger().addHandler(keep)
    await ns["main"]()
    logging.getLogger().removeHandler(keep)
    names = {(r.name, r.msg["event"]) for r in records if isinstance(r.msg, dict)}
    assert ("durable.worker", "worker_started") in names, names
    assert ("durable.workflow", "greeting") in names, names
    assert ("durable.runs", "run_stopped") in names, names


@check
async def main_in_new_dir(ns: Namespace) -> None:
    """`main()` in a directory of its own, once per backend (it creates files)."""
    import tempfile

    here = Path.cwd()
    with tempfile.TemporaryDirectory(dir=here) as fresh:
        os.chdir(fresh)
        try:
            await ns["main"]()
        finally:
            os.chdir(here)


# -- coming-from.md -----------------------------------------------------------------


@check
async def caught_cancellation(ns: Namespace) -> None:
    async with running(ns, ["reorder"], ["wait_for_stock"]) as client:
        lines = await printed_async(lambda: ns["show_status"](client))
    assert lines == ["cancelled", "WorkflowCancelled gave up"], lines


@check
async def clocks(ns: Namespace) -> None:
    async with virtual(ns, ["clocks"]) as env:
        seen = await env.client.execute(ns["clocks"], id="clocks")
    shown = ast.literal_eval("\n".join(line.strip()[2:] for line in ns["__source__"].splitlines()
                                       if line.strip().startswith("# ")))
    assert seen == shown, seen


# -- interaction.md -------------------------------------------------------------------


async def raises(error: type[BaseException], call: Awaitable[Any]) -> BaseException:
    """The `error` that `call` raised (it must raise it)."""
    try:
        await call
    except error as exc:
        return exc
    raise AssertionError(f"expected {error.__name__}")


def _page_says(page: str, text: str) -> None:
    """`text` appears on the page (as one paragraph: line breaks and indents aside)."""
    from docs_blocks import ROOT

    flat = " ".join((ROOT / page).read_text(encoding="utf-8").split())
    assert " ".join(text.split()) in flat, f"{page} should show:\n{text}"


@contextlib.asynccontextmanager
async def _approval_worker(client: durable.Client, ns: Namespace) -> AsyncIterator[None]:
    async with durable.Worker(client, workflows=[ns["Approval"]], activities=[ns["charge"]],
                              lease_seconds=5.0, poll_interval=0.1):
        yield


async def _waiting(handle: durable.WorkflowHandle) -> durable.WorkflowHandle:
    """The run waits for its approval (its wait_condition is recorded)."""
    await wait_for_event(handle, "ConditionScheduled")
    return handle


@check
async def approval(ns: Namespace) -> None:
    from durable import workflow
    from durable.testing import isolated_definitions

    approval_cls = ns["Approval"]
    async with running(ns, ["Approval"], ["charge"]) as client:
        handle = await _waiting(await client.start(approval_cls, "o-7", 250, id="order-7"))
        assert await handle.query("status") == {"approved": None, "limit": 100}
        before = await history_types(handle)
        rejected = await raises(durable.UpdateRejected, handle.update("set_limit", 0))
        assert str(rejected) == "the limit must be positive", rejected
        assert await history_types(handle) == before   # a rejected update leaves no trace
        assert await handle.update("set_limit", 500) == 100
        await handle.signal("approve", "ann")
        assert await handle.result() == "receipt-o-7-250"
        capped = await _waiting(await client.start(approval_cls, "o-8", 250, id="order-8"))
        await capped.signal("approve", "ann")
        assert await capped.result() == "receipt-o-8-100"
        denied = await _waiting(await client.start(approval_cls, "o-9", 250, id="order-9"))
        await denied.signal("reject", "bob")   # deny() answers to "reject"
        assert await denied.result() == "not approved"

    # refused at the decorator: no run method, two, two handlers of a kind under one name
    def no_run() -> None:
        @workflow.defn
        class NoRun:
            @workflow.signal
            def go(self) -> None: ...

    def two_runs() -> None:
        @workflow.defn
        class TwoRuns:
            @workflow.run
            async def one(self) -> None: ...

            @workflow.run
            async def two(self) -> None: ...

    def same_name() -> None:
        @workflow.defn
        class SameName:
            @workflow.run
            async def run(self) -> None: ...

            @workflow.signal(name="go")
            def go(self) -> None: ...

            @workflow.signal(name="go")
            def go_too(self) -> None: ...

    for bad in (no_run, two_runs, same_name):
        with isolated_definitions():
            try:
                bad()
                raise AssertionError(f"{bad.__name__}: the class should be refused")
            except durable.ConfigurationError:
                pass


@check
async def collector(ns: Namespace) -> None:
    async with durable.connect("sqlite://:memory:") as client:
        handle = await client.start(ns["collector"], 2, id="collector-1")
        await handle.signal("add", "early")      # no worker yet: recorded, kept
        async with durable.Worker(client, workflows=[ns["collector"]], poll_interval=0.1):
            with anyio.fail_after(20):
                while await handle.query("count") != 1:
                    await anyio.sleep(0.02)
            nope = await raises(durable.QueryFailed, handle.query("nope"))
            assert "no query handler named 'nope' (it has: count)" in str(nope), nope
            nope = await raises(durable.UpdateRejected, handle.update("nope"))
            assert "no update handler named 'nope'" in str(nope), nope
            assert await handle.update("clear") is None
            assert await handle.query("count") == 0
            await handle.signal("add", "b")
            await handle.signal("add", "c")
            assert await handle.result() == ["b", "c"]
            assert await handle.query("count") == 2   # a closed run: its final state
        events = await handle.history()
    delivered = [e.data["seq"] for e in events if e.type == "SignalDelivered"]
    received = [e.data["seq"] for e in events if e.type == "SignalReceived"]
    assert delivered == received and len(received) == 3, events


@check
async def approve(ns: Namespace) -> None:
    async with durable.connect("sqlite://:memory:") as client:
        missing = await raises(durable.WorkflowNotFound, ns["approve"](client))
        assert "order-7" in str(missing), missing
        handle = await client.start(ns["Approval"], "o-7", 250, id="order-7")
        await ns["approve"](client)              # no worker runs: recorded, waits for one
        assert "SignalReceived" in await history_types(handle)
        assert "SignalDelivered" not in await history_types(handle)
        async with _approval_worker(client, ns):
            assert await handle.result() == "receipt-o-7-100"
        closed = await raises(durable.RunAlreadyClosed, ns["approve"](client))
        assert "already completed" in str(closed), closed
        kinds = await history_types(handle)
    assert kinds.count("SignalReceived") == kinds.count("SignalDelivered") == 1, kinds
    assert kinds.index("SignalReceived") < kinds.index("SignalDelivered"), kinds


@check
async def look(ns: Namespace) -> None:
    async with durable.connect("sqlite://:memory:") as client:
        handle = await client.start(ns["Approval"], "o-7", 250, id="order-7")
        nobody = await raises(durable.QueryFailed, handle.query("status", timeout=0.3))
        assert "no worker answered" in str(nobody), nobody
        assert "'approval'" in str(nobody) and "'default'" in str(nobody), nobody
        async with _approval_worker(client, ns):
            await _waiting(handle)
            before = await history_types(handle)
            lines = await printed_async(lambda: ns["look"](client))
            assert lines == comments_after(ns["__source__"], "print("), lines
            assert await history_types(handle) == before   # a query records nothing
            await handle.signal("approve", "ann")
            await handle.result()
            # a closed run answers from its final state
            assert await handle.query("status") == {"approved": True, "limit": 100}


@check
async def raise_limit(ns: Namespace) -> None:
    async with durable.connect("sqlite://:memory:") as client, _approval_worker(client, ns):
        handle = await _waiting(await client.start(ns["Approval"], "o-7", 250, id="order-7"))
        lines = []
        for limit in (0, 500, 500):
            lines += await printed_async(lambda limit=limit: ns["raise_limit"](client, limit))
        assert lines == ["refused: the limit must be positive", "the limit was 100",
                         "the limit was 100"], lines
        assert await handle.query("status") == {"approved": None, "limit": 500}
        await handle.signal("approve", "ann")
        assert await handle.result() == "receipt-o-7-250"
        await raises(durable.RunAlreadyClosed, ns["raise_limit"](client, 600))
        events = await handle.history()
    accepted = [e.data["update_id"] for e in events if e.type == "UpdateAccepted"]
    completed = [e.data for e in events if e.type == "UpdateCompleted"]
    assert accepted == ["limit-500"], accepted
    assert completed == [{"update_id": "limit-500", "name": "set_limit", "status": "completed",
                          "result": 100}], completed


@check
async def shipment(ns: Namespace) -> None:
    shipment_cls = ns["Shipment"]
    async with virtual(ns, ["Shipment"]) as env:   # a day passes on virtual time
        nobody = await env.client.start(shipment_cls, id="ship-1")
        assert await nobody.result() == "no address within a day"
        events = await nobody.history()
        # set before the run method started: the condition is true at once, nothing recorded
        early = await env.client.signal_with_start(
            shipment_cls, id="ship-2", signal="set_address", signal_args=("1 Main St",))
        assert await early.result() == "shipping to 1 Main St"
        early_kinds = await history_types(early)
    kinds = [e.type for e in events]
    assert kinds == ["WorkflowStarted", "ConditionScheduled", "ConditionTimedOut",
                     "WorkflowCompleted"], kinds
    assert events[1].data["timeout_seconds"] == 86400, events[1].data
    assert not any(k.startswith("Condition") for k in early_kinds), early_kinds
    async with running(ns, ["Shipment"]) as client:
        handle = await client.start(shipment_cls, id="ship-3")
        await wait_for_event(handle, "ConditionScheduled")
        await handle.signal("set_address", "2 Elm St")
        assert await handle.result() == "shipping to 2 Elm St"
        assert "ConditionSatisfied" in await history_types(handle)


@check
async def quotes(ns: Namespace) -> None:
    from durable.testing import Replayer

    async with running(ns, ["quotes"], ["get_quote"]) as client:
        handle = await client.start(ns["quotes"], id="quotes-1")
        assert await handle.result() == 100
        events = await handle.history()
        slow = next(e.data["op_id"] for e in events if e.type == "ActivityScheduled"
                    and e.data["op_id"] != next(x.data["op_id"] for x in events
                                                if x.type == "ActivityCompleted"))
        # the slow-co attempt stops on the request (it would otherwise sleep a minute)
        with anyio.fail_after(20):
            while not any(e.data.get("op_id") == slow and e.type in (
                    "ActivityStopReceipt", "ActivityResultRefused")
                    for e in await handle.history()):
                await anyio.sleep(0.05)
    asked = [e.data for e in events if e.type == "ActivityCancelRequested"]
    assert [(a["op_id"], a["policy"], a["scope"]) for a in asked] == [
        (slow, "try_cancel", "operation")], asked
    assert "CancellationDelivered" not in [e.type for e in events]
    assert (await Replayer(workflows=[ns["quotes"]]).replay(events)).finished


@check
async def patched(ns: Namespace) -> None:
    from durable import workflow
    from durable.testing import Replayer, isolated_definitions

    charge, audit, order_v2 = ns["charge"], ns["audit"], ns["order_v2"]
    with isolated_definitions():   # the code before the change
        @workflow.defn(name="order-v2")
        async def order_v1(order_id: str) -> str:
            receipt: str = await workflow.execute_activity(charge, order_id, 10)
            await workflow.sleep(3600)
            return receipt

    with isolated_definitions():   # the change without a patch
        @workflow.defn(name="order-v2")
        async def unpatched(order_id: str) -> str:
            receipt: str = await workflow.execute_activity(charge, order_id, 10)
            await workflow.execute_activity(audit, order_id)
            await workflow.sleep(3600)
            return receipt

    with isolated_definitions():   # later: no run of the old branch is open
        @workflow.defn(name="order-v2")
        async def deprecated(order_id: str) -> str:
            receipt: str = await workflow.execute_activity(charge, order_id, 10)
            workflow.deprecate_patch("add-audit")
            await workflow.execute_activity(audit, order_id)
            await workflow.sleep(3600)
            return receipt

    async with TimeSkippingEnvironment() as env:
        env.auto_skip = False
        async with env.worker(workflows=[order_v1], activities=[charge, audit]):
            old = await env.client.start(order_v1, "o-1", id="order-o-1")
            await wait_for_event(old, "TimerScheduled")   # asleep when the new code ships
        async with env.worker(workflows=[order_v2], activities=[charge, audit]):
            new = await env.client.start(order_v2, "o-2", id="order-o-2")
            assert await env.run(old.result) == "receipt-o-1-10"
            assert await env.run(new.result) == "receipt-o-2-10"
        old_events, new_events = await old.history(), await new.history()
    audited = [e.data["activity_type"] for e in new_events if e.type == "ActivityCompleted"]
    assert audited == ["charge", "audit"], audited
    assert [e.type for e in old_events].count("ActivityCompleted") == 1
    assert "MarkerRecorded" not in [e.type for e in old_events]
    marker = next(e.data for e in new_events if e.type == "MarkerRecorded")
    assert marker == {"op_id": "0:2", "name": "patch:add-audit", "patch_id": "add-audit"}
    for events in (old_events, new_events):
        assert (await Replayer(workflows=[order_v2]).replay(events)).finished
    error = await raises(durable.NonDeterminismDetected,
                         Replayer(workflows=[unpatched]).replay(old_events))
    _page_says("docs/interaction.md", str(error))
    assert (await Replayer(workflows=[deprecated]).replay(new_events)).finished


@check
def replayer_module(ns: Namespace) -> None:
    """The page's test module, run by pytest on histories recorded by real
    runs of the page's own Approval and Shipment (as myapp/workflows.py)."""
    import importlib
    import sys

    import pytest
    from docs_blocks import ROOT, blocks_of

    blocks = {b.options.get("name"): b for b in blocks_of(ROOT / "docs/interaction.md")}
    Path("myapp").mkdir(exist_ok=True)
    Path("myapp/__init__.py").write_text("")
    Path("myapp/workflows.py").write_text(
        "import anyio\nimport durable\nfrom durable import activity, workflow\n\n"
        + blocks["approval"].source + "\n\n" + blocks["shipment"].source)
    importlib.invalidate_caches()
    workflows = importlib.import_module("myapp.workflows")
    Path("histories").mkdir(exist_ok=True)

    async def record() -> None:
        from durable.testing import history_to_json

        runs: dict[str, durable.WorkflowHandle] = {}
        async with durable.connect("sqlite:///histories.db") as client:
            async with durable.Worker(client, workflows=[workflows.Approval, workflows.Shipment],
                                      activities=[workflows.charge], poll_interval=0.1):
                approved = await _waiting(await client.start(workflows.Approval, "o-1", 250,
                                                             id="approved"))
                assert await approved.update("set_limit", 500) == 100
                await approved.signal("approve", "ann")
                rejected = await client.signal_with_start(workflows.Approval, "o-2", 50,
                                                          id="rejected", signal="reject",
                                                          signal_args=("bob",))
                shipped = await _waiting(await client.start(workflows.Shipment, id="shipped"))
                await shipped.signal("set_address", "1 Main St")
                runs = {"approved": approved, "rejected": rejected, "shipped": shipped}
                for handle in runs.values():
                    await handle.result()
            for name, handle in runs.items():
                Path(f"histories/{name}.json").write_text(
                    history_to_json(await handle.history()))

    anyio.run(record)
    assert pytest.main(["-q", "-p", "no:cacheprovider", "-o",
                        "asyncio_default_fixture_loop_scope=function",
                        "test_replayer.py"]) == 0
    assert "myapp.workflows" in sys.modules


# -- cli.md -------------------------------------------------------------------------------


@check
def cli_memo(ns: Namespace) -> None:
    """The page's hypothetical `memo` command, run by click as `durable memo`."""
    import json

    from click.testing import CliRunner

    from durable import workflow

    @workflow.defn(name="memo_demo")
    async def memo_demo() -> None:
        await workflow.sleep(60)

    async def start() -> None:
        async with durable.connect("sqlite:///memo.db") as client:
            await client.start(memo_demo, id="order-7",
                               options=durable.StartOptions().with_memo({"customer": "c-9"}))

    anyio.run(start)

    def memo(*args: str) -> Any:
        result = CliRunner().invoke(ns["cli"], ["--db", "sqlite:///memo.db", "memo", *args],
                                    env={"COLUMNS": "160", "NO_COLOR": "1"}, prog_name="durable")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    shown = memo("order-7")
    assert shown.exit_code == 0 and json.loads(shown.stdout) == {"customer": "c-9"}, shown.output
    as_json = memo("order-7", "--json")
    assert json.loads(as_json.stdout) == {"workflow_id": "order-7",
                                          "memo": {"customer": "c-9"}}, as_json.output
    missing = memo("nope")
    assert missing.exit_code == 3 and "no workflow 'nope'" in missing.output, missing.output
