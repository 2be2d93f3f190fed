"""The `durable` command line, driven through click's CliRunner against real SQLite.

A real `durable.Worker` runs in a thread of this process (its own event loop,
its own connection) for most tests; the tests about signals, lost workers
and the installed script run `durable worker tests.cli_app:WORKER` as a real
process. Every --json output is checked against its shape in
`durable.cli.schemas`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import cli_app
import click
import pytest
from click.testing import CliRunner, Result
from conftest import drop_postgres_schema, new_postgres_url, require_postgres

import durable
from durable import present as _fmt
from durable.cli._group import cli
from durable.cli._params import Duration
from durable.cli._worker import build_worker
from durable.cli.schemas import SCHEMAS, validate

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "durable"
ANSI = re.compile(r"\x1b\[")
ANSI_ANY = re.compile(r"\x1b\[[0-9;]*m")
COLOUR_SGR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|4[0-9]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")

# Nothing from the developer's shell may leak into what the tests configure.
CLEAN_ENV: dict[str, str | None] = {
    "DURABLE_DB_URL": None, "DURABLE_SERVER_URL": None, "DURABLE_TOKEN": None,
    "DURABLE_NAMESPACE": None, "DURABLE_DEBUG": None, "NO_COLOR": None, "FORCE_COLOR": None,
    "COLUMNS": None, "DURABLE_BUILD_ID": None,
}


# ---------------------------------------------------------------- helpers


class ThreadWorker:
    """A real durable.Worker on its own event loop in a thread of this process."""

    def __init__(self, url: str, namespace: str = "default") -> None:
        self.url = url
        self.namespace = namespace
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            anyio.run(self._main)
        except BaseException as exc:  # surfaced by start()/close()
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        async with durable.connect(self.url, namespace=self.namespace) as client:
            worker = durable.Worker(client, workflows=cli_app.WORKFLOWS,
                                    activities=cli_app.ACTIVITIES, poll_interval=0.1,
                                    lease_seconds=5.0)
            async with worker:
                self.ready.set()
                while not self.stop.is_set():
                    await anyio.sleep(0.05)

    def start(self) -> ThreadWorker:
        self.thread.start()
        assert self.ready.wait(30), "the worker thread did not start"
        if self.error is not None:
            raise self.error
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker thread did not stop"


def invoke(url: str | None, *args: str, env: dict[str, str | None] | None = None,
           prog: str = "durable") -> Result:
    """Run `durable [--db url] args...` in this process; never hides a crash."""
    runner = CliRunner()
    argv = (["--db", url] if url else []) + list(args)
    result = runner.invoke(cli, argv, env={**CLEAN_ENV, **(env or {})}, prog_name=prog)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ok(url: str | None, *args: str, env: dict[str, str | None] | None = None) -> Result:
    result = invoke(url, *args, env=env)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def as_json(result: Result, shape: str) -> Any:
    data = json.loads(result.stdout)
    problems = validate(data, SCHEMAS[shape])
    assert not problems, problems
    return data


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def describe(url: str, workflow_id: str, *extra: str) -> dict[str, Any]:
    data: dict[str, Any] = as_json(ok(url, "describe", workflow_id, *extra, "--json"),
                                   "describe")
    return data


def event_types(url: str, workflow_id: str) -> list[str]:
    data = as_json(ok(url, "history", workflow_id, "--json"), "history")
    return [e["event_type"] for e in data["events"]]


def start(url: str, workflow_type: str, workflow_id: str, *args: Any, extra: tuple[str, ...] = ()
          ) -> dict[str, Any]:
    data: dict[str, Any] = as_json(
        ok(url, "start", workflow_type, "--id", workflow_id, "--input", json.dumps(list(args)),
           *extra, "--json"), "start")
    return data


def activity_running(url: str, workflow_id: str) -> Callable[[], bool]:
    """True once the run's first activity started (False while the run does not exist yet)."""

    def check() -> bool:
        result = invoke(url, "history", workflow_id, "--json")
        if result.exit_code == 3:
            return False
        assert result.exit_code == 0, result.stderr
        return "ActivityStarted" in [e["event_type"] for e in json.loads(result.stdout)["events"]]

    return check


def spawn_worker(url: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`durable --db URL worker tests.cli_app:WORKER` as a real process, once it runs."""
    if not SCRIPT.exists():
        pytest.fail(f"the durable script is not installed at {SCRIPT}: pip install -e '.[dev]'")
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [str(SCRIPT), "--db", url, "worker", "tests.cli_app:WORKER", *extra],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, env=env,
        )
    wait_for(lambda: "running in namespace" in log.read_text() or proc.poll() is not None,
             "the worker process to start")
    assert proc.poll() is None, log.read_text()
    return proc


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SQLite file served by a worker thread for the whole module."""
    db = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'app.db'}"
    worker = ThreadWorker(db).start()
    yield db
    worker.close()


@pytest.fixture
def fresh_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fresh.db'}"


# ---------------------------------------------------------------- start and result


def test_start_by_type_name_then_result_wait_prints_the_result(url: str) -> None:
    started = start(url, "cli-greet", "greet-1", "ada",
                    extra=("--execution-timeout", "1h", "--run-timeout", "600"))
    assert started["workflow_id"] == "greet-1"
    assert started["workflow_type"] == "cli-greet"
    assert started["execution_timeout_seconds"] == 3600.0
    assert started["run_timeout_seconds"] == 600.0
    assert started["run_deadline_at"] is not None
    answer = as_json(ok(url, "result", "greet-1", "--wait", "--json"), "result")
    assert answer == {"workflow_id": "greet-1", "run_id": started["run_id"],
                      "status": "completed", "result": "hello, ada", "failure": None}
    assert ok(url, "result", "greet-1").stdout.strip() == '"hello, ada"'


def test_start_human_output_shows_deadlines_absolute_and_relative(url: str) -> None:
    out = ok(url, "start", "cli-greet", "--id", "greet-human", "--input", '["bo"]',
             "--execution-timeout", "2h").stdout
    assert "Started greet-human (cli-greet)" in out
    assert re.search(r"execution deadline\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
                     r"\(in (1h 59m|2h 00m)\)", out), out


def test_start_of_a_type_no_worker_registered_says_how_to_fix_it(url: str) -> None:
    result = invoke(url, "start", "no-such-type", "--id", "x-1")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "no live worker" in line and "'no-such-type'" in line
    assert "durable worker MODULE:ATTR" in line


def test_start_with_an_id_in_use_is_refused_with_exit_4(url: str) -> None:
    first = start(url, "cli-guarded", "dup-1", "a")
    result = invoke(url, "start", "cli-guarded", "--id", "dup-1", "--input", '["b"]')
    assert result.exit_code == 4
    line = one_error_line(result)
    assert line.startswith("durable: refused: workflow id 'dup-1' is already in use")
    assert "--id" in line
    again = start(url, "cli-guarded", "dup-1", "b",
                  extra=("--id-reuse", "return_existing_active"))
    assert again["run_id"] == first["run_id"]
    ok(url, "terminate", "dup-1")
    # closed: --id-reuse return_existing_active is refused too, so it is not the advice
    for extra in ((), ("--id-reuse", "return_existing_active")):
        result = invoke(url, "start", "cli-guarded", "--id", "dup-1", "--input", '["c"]', *extra)
        assert result.exit_code == 4
        line = one_error_line(result)
        assert "was used by a run that closed terminated" in line, line
        assert "durable result dup-1" in line and "allow_duplicate_failed_only" in line
        assert "return_existing_active" not in line


@pytest.mark.parametrize(("args", "needle"), [
    (("--input", '{"a": 1}'), "must be a JSON array"),
    (("--input", "[1,"), "not valid JSON"),
    (("--execution-timeout", "0.5"), "at least 1 second"),
    (("--run-timeout", "5x"), "is not a duration"),
    ((), "Missing option '--id'"),
])
def test_start_with_bad_input_is_a_usage_error_on_one_line(
        url: str, args: tuple[str, ...], needle: str) -> None:
    base = ("start", "cli-greet") if not args else ("start", "cli-greet", "--id", "bad-1")
    result = invoke(url, *base, *args)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert needle in line and "durable start --help" in line


@pytest.mark.parametrize(("args", "needle"), [
    (("serve", "--db", "sqlite:///x.db", "--port", "0"),
     "--db is a global option: give it before the command, durable --db URL serve ..."),
    (("schedule", "list", "--namespace", "other"),
     "--namespace is a global option: give it before the command, durable --namespace NS "
     "schedule list ..."),
    (("list", "--server", "http://h:8233"), "durable --server URL list ..."),
])
def test_a_global_option_after_the_command_says_where_it_goes(
        args: tuple[str, ...], needle: str) -> None:
    """`durable serve --db URL` (as the README wrote it) said only "No such
    option '--db'"; nothing was served or written."""
    result = invoke(None, *args)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert needle in line, line
    assert "No such option" not in line


def test_result_of_a_failed_workflow_exits_1_with_its_failure(url: str) -> None:
    start(url, "cli-fail", "fail-1", "boom")
    result = invoke(url, "result", "fail-1", "--wait", "--json")
    assert result.exit_code == 1
    data = as_json(result, "result")
    assert data["status"] == "failed"
    assert data["result"] is None
    assert "boom" in data["failure"]["message"]
    assert "boom" in one_error_line(result)


def test_result_without_wait_of_an_open_run_exits_1_and_says_to_wait(url: str) -> None:
    start(url, "cli-guarded", "open-1", "k")
    result = invoke(url, "result", "open-1")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "pass --wait" in one_error_line(result)
    data = as_json(invoke(url, "result", "open-1", "--json"), "result")
    assert data["status"] in ("pending", "running") and data["result"] is None
    ok(url, "terminate", "open-1")


def test_result_follows_continue_as_new_and_runs_can_be_named(url: str) -> None:
    first = start(url, "cli-again", "again-1", 0)
    assert as_json(ok(url, "result", "again-1", "--wait", "--json"), "result")["result"] == 1
    old = describe(url, "again-1", "--run", first["run_id"])
    assert old["run"]["status"] == "continued"
    assert describe(url, "again-1")["run"]["run_number"] == 2
    refused = invoke(url, "request-cancellation", "again-1", "--reason", "r",
                     "--run", first["run_id"])
    assert refused.exit_code == 4
    assert "leave out --run" in one_error_line(refused)


# ---------------------------------------------------------------- reading


def test_list_filters_by_status_and_type_and_pages_as_the_wire(url: str) -> None:
    start(url, "cli-greet", "list-a", "a")
    start(url, "cli-greet", "list-b", "b")
    ok(url, "result", "list-a", "--wait")
    ok(url, "result", "list-b", "--wait")
    data = as_json(ok(url, "list", "--type", "cli-greet", "--status", "completed", "--json"),
                   "list")
    ids = [r["workflow_id"] for r in data["workflows"]]
    assert {"list-a", "list-b"} <= set(ids)
    assert {r["status"] for r in data["workflows"]} == {"completed"}
    assert {r["workflow_type"] for r in data["workflows"]} == {"cli-greet"}
    assert data["workflow_count"] == len(ids) and data["next_page_token"] is None
    one = as_json(ok(url, "list", "--type", "cli-greet", "--limit", "1", "--json"), "list")
    assert one["workflow_count"] == 1 and one["next_page_token"]
    # the same page as the wire's: the token reads the next one
    two = as_json(ok(url, "list", "--type", "cli-greet", "--limit", "1", "--next-page-token",
                     one["next_page_token"], "--json"), "list")
    assert [r["workflow_id"] for r in one["workflows"] + two["workflows"]] == ids[:2]
    human = ok(url, "list", "--type", "cli-greet").stdout
    assert human.splitlines()[0].split()[:3] == ["WORKFLOW", "ID", "TYPE"]
    assert "[completed]" in human and "list-a" in human
    # a run is shown by its id's last digits: ids are time-ordered, so their
    # first digits are the same for every run started in the same instant
    for r in data["workflows"][:2]:
        assert f"1 …{r['run_id'][-8:]}" in human, human
    assert data["workflows"][0]["run_id"][:8] not in human, human
    assert "No workflow runs match." in ok(url, "list", "--type", "nothing-here").stdout
    # a status nobody stores is refused, naming the one meant: "no runs match"
    # would read as a fact about the runs (over --server too, before any request)
    typo = invoke(url, "list", "--status", "runing")
    assert typo.exit_code == 1 and typo.stdout == ""
    assert ("status must be one of pending, running, completed" in one_error_line(typo)
            and "got 'runing'; did you mean 'running'?" in one_error_line(typo))


def test_describe_shows_status_deadlines_and_pending_activity(url: str) -> None:
    start(url, "cli-guarded", "desc-1", "k", extra=("--run-timeout", "10m"))
    wait_for(activity_running(url, "desc-1"), "the activity to start")
    info = describe(url, "desc-1")
    assert info["status"] == "running"
    assert info["pending_operations"][0]["name"] == "cli-hang"
    out = ok(url, "describe", "desc-1").stdout
    assert "Workflow desc-1 (cli-guarded) [running]" in out
    assert re.search(r"run deadline\s+\S+ \S+ UTC \(in (9m \d\ds|10m)\)", out), out
    assert "Pending operations" in out and "cli-hang" in out
    ok(url, "terminate", "desc-1")
    closed = ok(url, "describe", "desc-1").stdout
    # judged by its close, not a bare "passed"; and a terminated run did not
    # "meet" its deadline: it was closed before it (12-06)
    assert "[terminated]" in closed and re.search(
        r"run deadline .*\(not reached: terminated \S+( \S+)? before it\)", closed), closed
    assert "met," not in closed


def test_describe_of_an_unknown_id_exits_3_on_one_line(url: str) -> None:
    result = invoke(url, "describe", "nope")
    assert result.exit_code == 3
    line = one_error_line(result)
    assert line.startswith("durable: not found: no workflow 'nope'")
    assert "durable list" in line
    assert invoke(url, "cascade", "nope").exit_code == 3
    assert invoke(url, "history", "nope").exit_code == 3


def test_history_lists_events_in_order(url: str) -> None:
    started = start(url, "cli-greet", "hist-1", "h")
    ok(url, "result", "hist-1", "--wait")
    data = as_json(ok(url, "history", "hist-1", "--json"), "history")
    assert data["run_id"] == started["run_id"] and data["workflow_id"] == "hist-1"
    assert data["next_page_token"] is None
    types = [e["event_type"] for e in data["events"]]
    assert types[0] == "WorkflowStarted" and types[-1] == "WorkflowCompleted"
    assert [e["sequence"] for e in data["events"]] == list(range(1, len(types) + 1))
    human = ok(url, "history", "hist-1").stdout
    assert "ActivityCompleted" in human and "activity_type=cli-greet-activity" in human
    assert re.search(r"\+\d+\.\d{3}s\s+WorkflowCompleted", human), human


def test_history_follow_streams_events_until_the_run_closes(url: str) -> None:
    start(url, "cli-count", "follow-1", 8, 0.05)
    result = ok(url, "history", "follow-1", "--follow", "--json")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    for event in events:
        assert not validate(event, SCHEMAS["history_event"])
    assert events[0]["event_type"] == "WorkflowStarted"
    assert events[-1]["event_type"] == "WorkflowCompleted"
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    human = ok(url, "history", "follow-1", "--follow")
    assert "WorkflowCompleted" in human.stdout
    assert "no more events to follow" in human.stderr


def test_watch_draws_heartbeat_progress_as_a_bar(url: str) -> None:
    start(url, "cli-count", "watch-1", 400, 0.05)

    def has_progress() -> bool:
        ops = describe(url, "watch-1")["pending_operations"]
        return bool(ops) and isinstance(ops[0].get("heartbeat_details"), dict)

    wait_for(has_progress, "a heartbeat")
    frame = ok(url, "watch", "watch-1", "--once").stdout
    assert "watch-1 (cli-count)" in frame and "[running]" in frame
    assert "cli-count-activity (op 0:1) attempt 1" in frame
    assert re.search(r"progress\s+[█░]{30} \d+/400 \(\d+%\)", frame), frame
    assert "run deadline" in frame
    as_json(ok(url, "watch", "watch-1", "--once", "--json"), "watch")
    ok(url, "terminate", "watch-1")


def test_watch_prints_frames_until_the_run_closes(url: str) -> None:
    start(url, "cli-count", "watch-2", 6, 0.05)
    frames = ok(url, "watch", "watch-2", "--interval", "0.2").stdout
    assert frames.rstrip().splitlines()[0].startswith("watch-2 (cli-count)")
    assert "[completed]" in frames.split("watch-2 (cli-count)")[-1]
    lines = ok(url, "watch", "watch-2", "--json").stdout.splitlines()
    assert json.loads(lines[-1])["status"] == "completed"
    # on a terminal (FORCE_COLOR makes rich treat the stream as one) it is a rich.Live view
    start(url, "cli-count", "watch-3", 6, 0.05)
    live = ANSI_ANY.sub("", ok(url, "watch", "watch-3", env={"FORCE_COLOR": "1"}).stdout)
    assert "[completed]" in live.split("watch-3 (cli-count)")[-1]
    assert "\x1b[?25l" in ok(url, "watch", "watch-3", env={"FORCE_COLOR": "1"}).stdout


# ---------------------------------------------------------------- steering


def test_request_cancellation_runs_cleanup_and_a_repeat_keeps_the_deadline(url: str) -> None:
    # the cleanup waits for the test: the repeat below is made while the run is
    # still open (a fast worker had closed it first under load, 12-06)
    held = cli_app.HELD_CLEANUPS.setdefault("k-held", threading.Event())
    try:
        start(url, "cli-guarded", "cancel-1", "k-held")
        wait_for(activity_running(url, "cancel-1"), "the activity to start")
        first = as_json(ok(url, "request-cancellation", "cancel-1", "--reason", "Order withdrawn",
                           "--cleanup-timeout", "45s", "--json"), "request-cancellation")
        repeat = as_json(ok(url, "request-cancellation", "cancel-1", "--reason", "again",
                            "--cleanup-timeout", "600", "--json"), "request-cancellation")
    finally:
        held.set()
        del cli_app.HELD_CLEANUPS["k-held"]
    assert first["accepted"] is True
    assert first["context"]["reason"] == "Order withdrawn"
    assert first["context"]["source"] == "cli"
    assert first["context"]["requester"]["type"] == "user"
    assert repeat["accepted"] is False
    assert repeat["context"]["request_id"] == first["context"]["request_id"]
    assert repeat["context"]["deadline"] == first["context"]["deadline"]
    failed = invoke(url, "result", "cancel-1", "--wait")
    assert failed.exit_code == 1
    assert "is cancelled: Order withdrawn" in one_error_line(failed)
    info = describe(url, "cancel-1")
    assert info["cancellation"]["lifecycle"] == "cancelled"
    assert info["cancellation"]["cleanup_outcome"] == "completed"
    assert "released k-held" in json.dumps(
        as_json(ok(url, "history", "cancel-1", "--json"), "history"))
    human = ok(url, "describe", "cancel-1").stdout
    assert "lifecycle         [cancelled]" in human
    assert "cleanup outcome   completed" in human
    # a repeat once the run closed: the original request still stands, the
    # run is said to be closed, and its deadline is judged by the close, not
    # counted as late
    assert first["status"] is None and first["cancellation"] is None  # read for repeats
    assert repeat["status"] == "running" and repeat["cancellation"]["lifecycle"] in (
        "requested", "delivered", "cleaning_up")
    closed = as_json(ok(url, "request-cancellation", "cancel-1", "--reason", "again",
                        "--json"), "request-cancellation")
    assert (closed["accepted"], closed["status"]) == (False, "cancelled")
    assert closed["cancellation"]["cleanup_outcome"] == "completed"
    again = ok(url, "request-cancellation", "cancel-1", "--reason", "again").stdout
    assert "now closed [cancelled]" in again and "met, " in again, again
    assert "late" not in again, again


def test_request_cancellation_of_a_closed_run_is_refused(url: str) -> None:
    start(url, "cli-greet", "closed-1", "c")
    ok(url, "result", "closed-1", "--wait")
    result = invoke(url, "request-cancellation", "closed-1", "--reason", "late")
    assert result.exit_code == 4
    assert one_error_line(result).startswith("durable: refused: workflow 'closed-1' run ")
    missing = invoke(url, "request-cancellation", "closed-1")
    assert missing.exit_code == 2 and "--reason" in one_error_line(missing)


def _talk_to_a_gate(run: Callable[..., Result], workflow_id: str) -> None:
    """signal / query / update against a waiting cli-gate, with their errors."""
    wait_for(lambda: run("describe", workflow_id, "--json").exit_code == 0
             and json.loads(run("describe", workflow_id, "--json").stdout)["pending_operations"],
             "the gate to wait")
    state = as_json(run("query", workflow_id, "state", "--json"), "query")
    assert state == {"workflow_id": workflow_id, "query": "state",
                     "result": {"opened_by": None, "limit": 3}}
    assert json.loads(run("query", workflow_id, "state").stdout) == state["result"]
    missing = run("query", workflow_id, "nope", "--timeout", "5")
    assert missing.exit_code == 1 and "no query handler named 'nope'" in one_error_line(missing)
    updated = as_json(run("update", workflow_id, "set_limit", "--args", "[9]",
                          "--update-id", "u-9", "--json"), "update")
    assert updated == {"workflow_id": workflow_id, "update": "set_limit", "update_id": "u-9",
                       "result": 9}
    human = run("update", workflow_id, "set_limit", "--args", "[9]", "--update-id", "u-9")
    assert human.exit_code == 0 and "completed: 9" in human.stdout
    refused = run("update", workflow_id, "set_limit", "--args", "[-1]")
    assert refused.exit_code == 4 and "limit must be at least 0" in one_error_line(refused)
    bad = run("signal", workflow_id, "open", "--args", "ann")
    assert bad.exit_code == 2 and "--args" in bad.stderr
    sent = as_json(run("signal", workflow_id, "open", "--args", '["ann"]', "--request-id",
                       "open-ann", "--json"), "signal")
    assert sent["recorded"] is True
    assert json.loads(run("result", workflow_id, "--wait", "--json").stdout)["result"] == {
        "opened_by": "ann", "limit": 9}
    # a retry with the same request id: recorded once, even now that the run has closed
    again = run("signal", workflow_id, "open", "--args", '["ann"]', "--request-id", "open-ann")
    assert again.exit_code == 0 and "was already recorded" in again.stdout
    late = run("signal", workflow_id, "open", "--args", '["bob"]')
    assert late.exit_code == 4 and "durable describe" in one_error_line(late)


def test_signal_query_and_update_a_running_workflow(url: str) -> None:
    start(url, "cli-gate", "gate-1", 3)
    _talk_to_a_gate(lambda *args: invoke(url, *args), "gate-1")
    assert event_types(url, "gate-1").count("UpdateAccepted") == 1


def test_units_whose_effect_is_unknown_are_shown_and_cleared_after_review(url: str) -> None:
    start(url, "cli-units", "units-1", ["a", "stuck", "b"])
    wait_for(lambda: describe(url, "units-1")["durable_status"] == "unknown",
             "the run to wait for review")
    info = describe(url, "units-1")
    assert "stuck" in info["reason"] and "could not be confirmed" in info["reason"]
    human = ok(url, "describe", "units-1").stdout
    assert "unknown" in human and "retry-after-review" in human and "stuck" in human
    listed = as_json(ok(url, "list", "--status", "unknown", "--json"), "list")
    assert "units-1" in [r["workflow_id"] for r in listed["workflows"]]
    undecided = invoke(url, "retry-after-review", "units-1")
    assert undecided.exit_code == 1 and "units='rerun'" in one_error_line(undecided)
    cleared = as_json(ok(url, "retry-after-review", "units-1", "--units", "confirm", "--json"),
                      "retry-after-review")
    assert cleared == {"workflow_id": "units-1", "cleared": True, "units": "confirm"}
    done = as_json(ok(url, "result", "units-1", "--wait", "--json"), "result")
    assert done["result"] == {"done": {"a": "imported a", "stuck": None, "b": "imported b"}}
    again = ok(url, "retry-after-review", "units-1").stdout
    assert "not marked for review" in again


def test_a_run_waiting_for_review_is_open_and_listed_by_the_word_it_shows(url: str) -> None:
    """A run marked for review (``unknown`` here) is open: `durable list --query`
    finds it by the reference's word its row shows (running, not pending),
    `durable result` says it has no result yet instead of waiting for one, and
    `durable cancel` closes it (it refused it as "already unknown")."""
    start(url, "cli-units", "units-2", ["stuck"])
    wait_for(lambda: describe(url, "units-2")["durable_status"] == "unknown",
             "the run to wait for review")

    def listed(*args: str) -> list[tuple[str, str, str]]:
        data = as_json(ok(url, "list", *args, "--json"), "list")
        return [(r["workflow_id"], r["status"], r["durable_status"]) for r in data["workflows"]]

    one = "WorkflowId = 'units-2'"
    assert listed("--query", one) == [("units-2", "running", "unknown")]
    assert listed("--query", f"{one} AND ExecutionStatus = 'running'") == [
        ("units-2", "running", "unknown")]
    assert listed("--query", f"{one} and ExecutionStatus = 'pending'") == []
    assert listed("--status", "unknown", "--query", "ExecutionStatus = 'running'") == [
        ("units-2", "running", "unknown")]
    assert ("units-2", "running", "unknown") in listed("--query", "its-2")  # id text
    human = ok(url, "list", "--query", one).stdout
    assert "units-2" in human and "[unknown]" in human
    refused = invoke(url, "list", "--query", "ExecutionStatus = 'Running'")
    assert refused.exit_code == 1
    assert "requires a quoted pending, running, waiting" in one_error_line(refused)
    # a process of its own, bounded: it used to wait for the result of a run in review
    result = subprocess.run([str(SCRIPT), "--db", url, "result", "units-2"], cwd=REPO,
                            capture_output=True, text=True, timeout=60,
                            env={k: v for k, v in os.environ.items() if k not in CLEAN_ENV})
    assert result.returncode == 1, result
    assert "is still unknown: it has no result yet" in result.stderr
    cancelled = as_json(ok(url, "cancel", "units-2", "--reason", "decided", "--json"), "cancel")
    assert cancelled["status"] == "cancelled" and cancelled["action"] == "cancelled"


def test_cancel_and_terminate_close_at_once_and_refuse_a_closed_run(url: str) -> None:
    start(url, "cli-guarded", "close-1", "k")
    start(url, "cli-guarded", "close-2", "k")
    cancelled = as_json(ok(url, "cancel", "close-1", "--reason", "not needed", "--json"),
                        "cancel")
    assert cancelled["status"] == "cancelled" and cancelled["action"] == "cancelled"
    assert cancelled["reason"] == "not needed"
    terminated = as_json(ok(url, "terminate", "close-2", "--json"), "terminate")
    assert terminated["status"] == "terminated"
    assert terminated["reason"] == "terminated with the durable CLI"
    again = invoke(url, "cancel", "close-1")
    assert again.exit_code == 4
    assert "already cancelled; nothing was cancelled" in one_error_line(again)
    assert "Terminated close-2" not in ok(url, "describe", "close-2").stdout


# ---------------------------------------------------------------- cascade


def test_cascade_shows_the_tree_of_runs_with_policies_and_receipts(url: str) -> None:
    start(url, "cli-parent", "tree-1", "tree-1")
    wait_for(activity_running(url, "tree-1-child"), "the child's activity to start")
    ok(url, "request-cancellation", "tree-1", "--reason", "Order withdrawn")
    assert invoke(url, "result", "tree-1", "--wait").exit_code == 1

    def child_stopped() -> bool:
        view = as_json(ok(url, "cascade", "tree-1", "--json"), "cascade")
        stops = [s["state"] for r in view["runs"] for s in r["activity_stops"]]
        return len(view["runs"]) == 2 and stops == ["stopped"]

    wait_for(child_stopped, "the child's stop receipt")
    view = as_json(ok(url, "cascade", "tree-1", "--json"), "cascade")
    assert view["inspection_complete"] is True and view["findings"] == []
    assert [e["child_workflow_id"] for e in view["edges"]] == ["tree-1-child"]
    tree = ok(url, "cascade", "tree-1").stdout
    assert 'Cancellation cascade of tree-1: "Order withdrawn"' in tree
    assert "✓ verified: inspection complete" in tree
    assert "NOT VERIFIED" not in tree
    assert "child tree-1-child  policy wait_cancellation_completed" in tree
    assert re.search(r"tree-1-child \(cli-guarded\) run \S+\s+status \[cancelled\]\s+"
                     r"lifecycle \[cancelled\]\s+cleanup completed", tree), tree
    assert re.search(r"activity cli-hang op 0:1 attempt 1\s+policy try_cancel\s+✓ stopped\s+"
                     r"receipt cancel_scope", tree), tree
    assert "cleanup deadline" in tree and "via parent_cancellation" in tree
    # the child is drawn under its parent
    lines = tree.splitlines()
    parent_line = next(i for i, line in enumerate(lines) if "tree-1 (cli-parent)" in line)
    child_line = next(i for i, line in enumerate(lines) if "tree-1-child (cli-guarded)" in line)
    indent = len(lines[child_line]) - len(lines[child_line].lstrip(" │├└─"))
    assert child_line > parent_line and indent > 4


def test_cascade_of_a_request_no_worker_took_yet_is_in_progress_not_verified(url: str) -> None:
    """A request recorded while nothing has stopped yet (no worker serves the
    run's queue): the cascade read "✓ verified: inspection complete, every
    stop is confirmed by a receipt" though no stop had been asked for."""
    start(url, "cli-guarded", "inflight-1", "k", extra=("--task-queue", "nobody-serves"))
    ok(url, "request-cancellation", "inflight-1", "--reason", "withdrawn")
    tree = ok(url, "cascade", "inflight-1").stdout
    assert "verified" not in tree, tree
    assert "… in progress: 1 of 1 run still open; nothing to verify until they end" in tree
    assert "not delivered yet: no worker has taken the request" in tree
    view = as_json(ok(url, "cascade", "inflight-1", "--json"), "cascade")
    assert view["findings"] == []  # nothing is missing either: it is under way
    ok(url, "terminate", "inflight-1")
    closed = ok(url, "cascade", "inflight-1").stdout
    assert "in progress" not in closed and "✓ verified: inspection complete" in closed


def test_cascade_of_a_run_never_asked_to_cancel_says_so(url: str) -> None:
    start(url, "cli-greet", "calm-1", "c")
    out = ok(url, "cascade", "calm-1").stdout
    assert "has no cancellation request" in out
    view = as_json(ok(url, "cascade", "calm-1", "--json"), "cascade")
    assert view["root"] is None and view["runs"] == []


@pytest.fixture
def lost_worker_db(tmp_path: Path) -> Iterator[str]:
    """A database whose worker process was SIGKILLed while it ran `cli-hang` for 'lost-1'."""
    db = f"sqlite:///{tmp_path / 'lost.db'}"
    proc = spawn_worker(db, tmp_path / "worker.log")
    try:
        start(db, "cli-guarded", "lost-1", "k")
        wait_for(activity_running(db, "lost-1"), "the activity to start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    yield db


def test_describe_says_whether_the_owner_is_still_there(lost_worker_db: str) -> None:
    """The owner line named the SIGKILLed worker and nothing more; it says when
    it was last seen and whether it is presumed alive (its registration
    outlives it) or gone."""
    out = " ".join(ok(lost_worker_db, "describe", "lost-1").stdout.split())
    owner = re.search(r"owner (worker-\S+) \(last seen [^,]*, presumed (alive until|gone)",
                      out)
    assert owner is not None, out


def test_cascade_marks_a_stop_it_cannot_verify_in_colour_and_words(lost_worker_db: str) -> None:
    db = lost_worker_db
    request = as_json(ok(db, "request-cancellation", "lost-1", "--reason", "worker died",
                         "--json"), "request-cancellation")
    assert request["accepted"] is True  # recorded though no live worker can deliver it
    ok(db, "cancel", "lost-1")
    view = as_json(ok(db, "cascade", "lost-1", "--json"), "cascade")
    assert view["inspection_complete"] is False
    assert len(view["findings"]) == 1
    assert view["runs"][0]["activity_stops"][0]["state"] == "unverified"
    for env in ({}, {"NO_COLOR": "1"}, {"NO_COLOR": "1", "FORCE_COLOR": "1"}):
        raw = ok(db, "cascade", "lost-1", env=env).stdout
        assert not COLOUR_SGR.search(raw)
        tree = ANSI_ANY.sub("", raw)
        assert "✗ NOT VERIFIED: inspection incomplete, 1 finding: could not verify" in tree
        assert "✗ NOT VERIFIED lost-1: attempt 1 of cli-hang has no stop receipt" in tree
        assert "✗ NOT VERIFIED no stop receipt" in tree
        assert "✓" not in tree and "inspection complete" not in tree.replace("incomplete", "")
    coloured = ok(db, "cascade", "lost-1", env={"FORCE_COLOR": "1"}).stdout
    marker = coloured.index("NOT VERIFIED")
    assert "\x1b[1;37;41m" in coloured[max(0, marker - 40):marker], "white on red"


def test_repair_pass_enforces_a_deadline_no_worker_is_left_to_enforce(
        lost_worker_db: str) -> None:
    db = lost_worker_db
    as_json(ok(db, "repair-pass", "--json"), "repair-pass")
    # the killed worker's registration has not expired yet, so the type is still known
    start(db, "cli-greet", "late-1", "x", extra=("--run-timeout", "1", "--task-queue", "nobody"))
    wait_for(lambda: "(" in ok(db, "describe", "late-1").stdout.split("run deadline")[1]
             and " late)" in ok(db, "describe", "late-1").stdout, "the run deadline to pass")
    # --dry-run shows what is overdue and enforces nothing
    seen = as_json(ok(db, "repair-pass", "--dry-run", "--json"), "repair-pass --dry-run")
    assert seen["runs"].get("run_timeout") == 1 and seen["oldest_overdue_seconds"] > 0
    shown = " ".join(ok(db, "repair-pass", "--dry-run").stdout.split())
    assert "passed without being enforced; the oldest is" in shown
    assert "runs run_timeout 1" in shown
    assert describe(db, "late-1")["status"] == "pending"  # not enforced: still open
    counts = as_json(ok(db, "repair-pass", "--json"), "repair-pass")
    assert counts["total"] >= 1 and sum(counts["repaired"].values()) == counts["total"]
    assert counts["total"] == sum(seen["runs"].values()) + sum(
        seen["activity_attempts"].values())
    assert ("No deadline has passed without being enforced."
            in ok(db, "repair-pass", "--dry-run").stdout)
    info = describe(db, "late-1")
    # the wire's words (a timed-out run is failed, closed timed_out), ours beside them
    assert info["status"] == "failed" and info["closed_reason"] == "timed_out"
    assert info["durable_status"] == "timed_out" and info["timeout_kind"] == "run_timeout"
    assert "Repair pass: nothing was due." in ok(db, "repair-pass").stdout
    # docs/cli.md's transcript of this (`durable describe order-12`) is what it prints
    shown = ok(db, "describe", "late-1").stdout
    documented = _transcript("describe order-12")
    assert _labels(documented) == _labels(shown), (_labels(documented), _labels(shown))
    for text in (shown, documented):
        deadline = next(line for line in text.splitlines() if line.startswith("run deadline"))
        assert deadline.endswith("(reached: the run timed out)"), deadline
        reason = next(line for line in text.splitlines() if line.startswith("reason"))
        assert reason.endswith("exceeded its run timeout (run_timeout)"), reason


def _transcript(command: str) -> str:
    """The output docs/cli.md shows for `$ durable COMMAND`."""
    text = (REPO / "docs" / "cli.md").read_text()
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for shown, output in re.findall(r"^\$ durable (.+?)\n(.*?)(?=^\$ |\Z)", block,
                                        flags=re.S | re.M):
            if shown == command:
                return str(output)
    raise AssertionError(f"no `$ durable {command}` in docs/cli.md")


def _labels(text: str) -> list[str]:
    """The row labels of a describe's first grid (up to its first blank line)."""
    rows = text.split("\n\n")[0].splitlines()[1:]
    return [re.split(r"\s{2,}", row.strip())[0] for row in rows]


# ---------------------------------------------------------------- the worker command


def test_worker_process_runs_workflows_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    log = tmp_path / "worker.log"
    proc = spawn_worker(db, log, "--identity", "cli-test-worker")
    try:
        start(db, "cli-greet", "proc-1", "eve")
        answer = as_json(ok(db, "result", "proc-1", "--wait", "--json"), "result")
        assert answer["result"] == "hello, eve"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        stop_process(proc)
    text = log.read_text()
    assert "durable worker cli-test-worker running in namespace 'default'" in text
    assert "SIGTERM received, stopping gracefully" in text
    assert "durable worker cli-test-worker stopped" in text


def test_a_second_signal_forces_the_worker_to_exit(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    log = tmp_path / "worker.log"
    proc = spawn_worker(db, log)
    try:
        start(db, "cli-stuck", "stuck-1", 3600)
        wait_for(activity_running(db, "stuck-1"), "the blocking activity to start")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "stopping gracefully" in log.read_text(), "the first signal")
        # the blocked thread holds the graceful stop up: the process is still there
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 128 + signal.SIGINT
    finally:
        stop_process(proc)
    assert "second SIGINT, exiting now without waiting" in log.read_text()


def test_worker_accepts_a_spec_object_and_a_factory(fresh_url: str) -> None:
    async def main() -> list[tuple[str, str]]:
        async with durable.connect(fresh_url) as client:
            spec = SimpleNamespace(workflows=[cli_app.greet], activities=[cli_app.greet_activity],
                                   task_queue="q1")
            a = await build_worker(client, spec, "m:spec", {"task_queue": None, "identity": "a"})
            b = await build_worker(client, cli_app.make_worker, "m:f", {})

            async def factory(c: durable.Client) -> durable.Worker:
                return durable.Worker(c, workflows=[cli_app.greet], identity="async-made")

            c = await build_worker(client, factory, "m:af", {})
            return [(w.identity, w.task_queue) for w in (a, b, c)]

    assert anyio.run(main) == [("a", "q1"), ("factory-worker", "default"),
                               ("async-made", "default")]


def test_a_worker_spec_may_turn_eager_starts_off(fresh_url: str) -> None:
    """A spec's ``eager_starts`` reaches the Worker (`durable serve --worker`
    takes its HTTP starts itself unless told not to)."""
    async def main() -> list[bool]:
        async with durable.connect(fresh_url) as client:
            off = await build_worker(client, {"workflows": [cli_app.greet],
                                              "eager_starts": False}, "m:off", {})
            on = await build_worker(client, {"workflows": [cli_app.greet]}, "m:on", {})
            return [off.eager.enabled, on.eager.enabled]

    assert anyio.run(main) == [False, True]


@pytest.mark.parametrize(("target", "code", "needle"), [
    ("cli_app", 2, "is not MODULE:ATTR"),
    ("no_such_module:WORKER", 1, "cannot import module 'no_such_module'"),
    ("cli_app:NOPE", 1, "has no attribute 'NOPE'"),
    ("cli_app:OPTS", 1, "neither a worker spec nor a factory"),
    ("cli_app:greet_activity", 1, "returned"),
    ("cli_app:BAD_SPEC", 1, "unknown key(s) workflow"),
    ("cli_app:EMPTY_SPEC", 1, "lists no workflows and no activities"),
])
def test_worker_refuses_a_target_it_cannot_run(fresh_url: str, target: str, code: int,
                                               needle: str) -> None:
    result = invoke(fresh_url, "worker", target)
    assert result.exit_code == code, result.stderr
    assert needle in one_error_line(result)


@pytest.mark.postgres
def test_commands_work_the_same_on_postgresql() -> None:
    require_postgres()
    pg = new_postgres_url()
    worker = ThreadWorker(pg).start()
    try:
        started = start(pg, "cli-greet", "pg-1", "pat", extra=("--run-timeout", "5m"))
        answer = as_json(ok(pg, "result", "pg-1", "--wait", "--json"), "result")
        assert answer["result"] == "hello, pat" and answer["run_id"] == started["run_id"]
        listed = as_json(ok(pg, "list", "--json"), "list")
        assert [r["workflow_id"] for r in listed["workflows"]] == ["pg-1"]
        assert describe(pg, "pg-1")["run"]["run_timeout_seconds"] == 300.0
        start(pg, "cli-guarded", "pg-2", "k")
        wait_for(activity_running(pg, "pg-2"), "the activity to start")
        ok(pg, "request-cancellation", "pg-2", "--reason", "stop")
        assert invoke(pg, "result", "pg-2", "--wait").exit_code == 1
        view = as_json(ok(pg, "cascade", "pg-2", "--json"), "cascade")
        assert view["runs"][0]["lifecycle"] == "cancelled"
        assert invoke(pg, "describe", "nope").exit_code == 3
    finally:
        worker.close()
        drop_postgres_schema(pg)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_refuses_a_build_id_it_cannot_give_a_factorys_worker(tmp_path: Path) -> None:
    """A factory builds its own Worker: serve cannot set its build id, and
    ignoring DURABLE_BUILD_ID would run it without the upgrade gate."""
    db = f"sqlite:///{tmp_path / 'factory.db'}"
    refused = invoke(db, "serve", "--port", "0", "--worker", "tests.cli_app:make_worker",
                     env={"DURABLE_BUILD_ID": "v9"})
    assert refused.exit_code != 0
    line = one_error_line(refused)
    assert "tests.cli_app:make_worker is a factory: set the build id in it" in line, line
    assert "applies to worker specs only" in line, line


def test_commands_work_the_same_against_a_live_durable_serve(tmp_path: Path) -> None:
    """`durable serve` runs the control plane (and a worker) as a real process;
    the commands then go over HTTP with --server and behave as with --db."""
    db = f"sqlite:///{tmp_path / 'served.db'}"
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [str(SCRIPT), "--db", db, "serve", "--port", str(port), "--worker",
             "tests.cli_app:WORKER", "--worker", "tests.ui_app:WORKER"],
            # the deploy pipeline's build id reaches serve's workers too (it was
            # ignored: they ran without the upgrade gate)
            cwd=REPO, stdout=err, stderr=err, env={**env, "DURABLE_BUILD_ID": "srv-7"})
    server = f"http://127.0.0.1:{port}"

    def remote(*args: str) -> Result:
        result = CliRunner().invoke(cli, ["--server", server, *args], env=CLEAN_ENV,
                                    prog_name="durable")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    try:
        wait_for(lambda: remote("list", "--json").exit_code == 0 or proc.poll() is not None,
                 "durable serve to answer")
        assert proc.poll() is None, log.read_text()
        # the addresses are printed once the server is up; a request may be answered first
        wait_for(lambda: f"the web UI at http://127.0.0.1:{port}/ui" in log.read_text(),
                 "durable serve to print its addresses")
        served = json.loads(remote("workers", "--json").stdout)["workers"]
        assert len(served) == 2 and {w["build_id"] for w in served} == {"srv-7"}, served
        # the second --worker serves the types the first does not
        as_json(remote("start", "ui-greet", "--id", "http-ui", "--input", '["bo"]', "--json"),
                "start")
        assert as_json(remote("result", "http-ui", "--wait", "--json"),
                       "result")["result"] == "hello, bo"
        started = as_json(remote("start", "cli-greet", "--id", "http-1", "--input", '["ann"]',
                                 "--json"), "start")
        answer = as_json(remote("result", "http-1", "--wait", "--json"), "result")
        assert answer["result"] == "hello, ann" and answer["run_id"] == started["run_id"]
        listed = as_json(remote("list", "--json"), "list")["workflows"]
        assert [r["workflow_id"] for r in listed] == ["http-1", "http-ui"]
        info = as_json(remote("describe", "http-1", "--json"), "describe")
        assert info["status"] == "completed"
        types = [e["event_type"] for e in as_json(remote("history", "http-1", "--json"),
                                            "history")["events"]]
        assert types[0] == "WorkflowStarted" and types[-1] == "WorkflowCompleted"
        remote("start", "cli-guarded", "--id", "http-2", "--input", '["k"]')
        wait_for(lambda: "ActivityStarted" in [
            e["event_type"]
            for e in json.loads(remote("history", "http-2", "--json").stdout)["events"]],
            "the activity to start")
        assert remote("request-cancellation", "http-2", "--reason", "stop").exit_code == 0
        assert remote("result", "http-2", "--wait").exit_code == 1
        view = as_json(remote("cascade", "http-2", "--json"), "cascade")
        assert view["runs"][0]["lifecycle"] == "cancelled"
        assert remote("describe", "nope").exit_code == 3
        assert remote("start", "cli-greet", "--id", "http-1", "--input", '["x"]').exit_code == 4
        assert remote("repair-pass", "--json").exit_code == 0
        remote("start", "cli-gate", "--id", "http-gate", "--input", "[3]")
        _talk_to_a_gate(remote, "http-gate")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        finally:
            stop_process(proc)


@pytest.mark.parametrize(("loop", "signum"), [("asyncio", signal.SIGTERM),
                                              ("trio", signal.SIGINT)])
def test_serve_stops_its_workers_gracefully_on_a_signal(tmp_path: Path, loop: str,
                                                        signum: int) -> None:
    """A deploy stops `durable serve --worker` with SIGTERM: its workers stop as
    `durable worker`'s do (runs released, the worker shown stopped), not killed
    by the signal uvicorn raises again once it has shut down."""
    db = f"sqlite:///{tmp_path / 'served.db'}"
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [str(SCRIPT), "--db", db, "serve", "--loop", loop, "--port", str(_free_port()),
             "--worker", "tests.cli_app:WORKER"], cwd=REPO, stdout=err, stderr=err, env=env)
    try:
        wait_for(lambda: "the web UI at" in log.read_text() or proc.poll() is not None,
                 "durable serve to start")
        assert proc.poll() is None, log.read_text()
        start(db, "cli-gate", "held-1", 3)
        wait_for(lambda: describe(db, "held-1")["run"]["owner"] is not None, "a worker to hold it")
        proc.send_signal(signum)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        stop_process(proc)
    assert "stopping gracefully" in log.read_text()
    workers = json.loads(ok(db, "workers", "--all", "--json").stdout)["workers"]
    assert [(w["stopped_at"] is not None, w["runs_held"]) for w in workers] == [(True, 0)]
    assert describe(db, "held-1")["run"]["owner"] is None


# ---------------------------------------------------------------- configuration and errors


def test_configuration_comes_from_the_environment_too(url: str) -> None:
    start(url, "cli-greet", "env-1", "e")
    result = ok(None, "describe", "env-1", "--json", env={"DURABLE_DB_URL": url})
    assert json.loads(result.stdout)["workflow_id"] == "env-1"
    other = invoke(None, "describe", "env-1", env={"DURABLE_DB_URL": url,
                                                   "DURABLE_NAMESPACE": "elsewhere"})
    assert other.exit_code == 3
    assert "namespace 'elsewhere'" in one_error_line(other)


@pytest.mark.parametrize(("args", "env", "code", "needle"), [
    (("list",), {}, 2, "no database or server given"),
    (("--db", "sqlite:///x.db", "--server", "http://127.0.0.1:9", "list"), {}, 2,
     "give --db or --server, not both"),
    (("--db", "sqlite:///no/such/dir/app.db", "list"), {}, 1, "no SQLite database at"),
    # three slashes and a path meant as absolute: the one-slash fix is named
    (("--db", "sqlite:///tmp/durable-no-such-app.db", "list"), {}, 1,
     "for the absolute path '/tmp/durable-no-such-app.db' write "
     "sqlite:////tmp/durable-no-such-app.db (four slashes)"),
    (("--db", "nosuchscheme://x", "list"), {}, 1, "no storage driver for URL scheme"),
    (("--server", "http://127.0.0.1:9", "--token", "t", "list"), {}, 1,
     "cannot use the control plane at http://127.0.0.1:9"),
    (("list",), {"DURABLE_SERVER_URL": "http://127.0.0.1:9"}, 1,
     "cannot use the control plane at http://127.0.0.1:9"),
    (("frobnicate",), {}, 2, "No such command 'frobnicate'"),
    (("--server", "http://127.0.0.1:9", "worker", "cli_app:WORKER"), {}, 2,
     "a worker reads and writes the database itself: give --db URL"),
    (("list", "--limit", "0"), {"DURABLE_DB_URL": "sqlite:///x.db"}, 2, "--limit"),
])
def test_configuration_errors_are_one_line_with_the_fix(
        args: tuple[str, ...], env: dict[str, str | None], code: int, needle: str) -> None:
    result = invoke(None, *args, env=env)
    assert result.exit_code == code
    line = one_error_line(result)
    assert needle in line
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(fresh_url: str) -> None:
    result = invoke(None, "--debug", "--server", "http://127.0.0.1:9", "list")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("durable: error: cannot use")


def test_output_has_no_escape_codes_off_a_terminal_and_no_colour_under_no_color(
        url: str) -> None:
    start(url, "cli-fail", "colour-1", "boom")
    invoke(url, "result", "colour-1", "--wait")
    for command in (("list",), ("describe", "colour-1"), ("history", "colour-1")):
        plain = ok(url, *command).stdout
        assert not ANSI.search(plain), command
        assert not any(line.endswith(" ") for line in plain.splitlines()), command
        forced = ok(url, *command, env={"FORCE_COLOR": "1"}).stdout
        assert COLOUR_SGR.search(forced), command
        no_color = ok(url, *command, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
        assert not COLOUR_SGR.search(no_color), command
        assert "[failed]" in no_color or "WorkflowFailed" in no_color


def test_shell_completion_script_and_workflow_ids(url: str) -> None:
    start(url, "cli-greet", "complete-me", "c")
    script = invoke(None, env={"_DURABLE_COMPLETE": "bash_source"})
    assert script.exit_code == 0
    assert "_durable_completion" in script.stdout
    assert "complete -o nosort -F _durable_completion durable" in script.stdout
    ids = invoke(None, env={"_DURABLE_COMPLETE": "bash_complete", "COMP_WORDS":
                            "durable describe complete-", "COMP_CWORD": "2",
                            "DURABLE_DB_URL": url})
    assert "plain,complete-me" in ids.stdout.splitlines()
    commands = invoke(None, env={"_DURABLE_COMPLETE": "bash_complete",
                                 "COMP_WORDS": "durable re", "COMP_CWORD": "1"})
    assert {"plain,repair-pass", "plain,request-cancellation", "plain,result"} <= set(
        commands.stdout.splitlines())


def test_installed_script_runs_as_a_subprocess(url: str) -> None:
    start(url, "cli-greet", "script-1", "s")
    ok(url, "result", "script-1", "--wait")
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    env["DURABLE_DB_URL"] = url
    listed = subprocess.run([str(SCRIPT), "list", "--type", "cli-greet", "--json"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert not validate(data, SCHEMAS["list"])
    assert "script-1" in [r["workflow_id"] for r in data["workflows"]]
    missing = subprocess.run([str(SCRIPT), "describe", "nope"], capture_output=True, text=True,
                             env=env, timeout=60, check=False)
    assert missing.returncode == 3
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    version = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True,
                             env=env, timeout=60, check=False)
    assert version.stdout.strip() == f"durable, version {durable.__version__}"


def test_without_the_cli_extra_the_script_says_what_to_install() -> None:
    code = ("import sys; sys.modules['click'] = None; from durable.cli import main; main()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "durable: the command line needs the 'cli' extra (click is not installed); "
        "install it with: pip install 'durable-sdk[cli]'")


# ---------------------------------------------------------------- pieces


def test_durations_accept_seconds_and_units() -> None:
    duration = Duration()
    assert duration.convert("90", None, None) == 90.0
    assert duration.convert("1.5", None, None) == 1.5
    assert duration.convert("1h30m", None, None) == 5400.0
    assert duration.convert("2d", None, None) == 172800.0
    assert duration.convert("250ms", None, None) == 0.25
    with pytest.raises(click.BadParameter, match="is not a duration"):
        duration.convert("5 minutes", None, None)


def test_times_are_shown_absolute_and_relative() -> None:
    now = _fmt.instant("2026-04-12T12:00:00+00:00")
    assert now is not None
    later = _fmt.instant("2026-04-12T12:04:12+00:00")
    earlier = _fmt.instant("2026-04-12T11:59:57+00:00")
    assert later is not None and earlier is not None
    assert _fmt.deadline_state(later, now, True) == ("in 4m 12s", "ahead")
    assert _fmt.deadline_state(earlier, now, True) == ("3s late", "late")
    assert _fmt.deadline_state(earlier, now, False) == ("passed 3s ago", "passed")
    assert _fmt.deadline_state(later, now, False) == ("not reached", "passed")
    # closed: met or missed by when it ended, never "passed N ago" (issue 21)
    assert _fmt.deadline_state(earlier, now, False, earlier.replace(second=50)) == (
        "met, 7s to spare", "met")
    assert _fmt.deadline_state(earlier, now, False, now) == ("missed by 3s", "missed")
    # a cleanup deadline knows how the cleanup ended: "met" only when the run's
    # own code closed the run; a close that cut the cleanup short, or came
    # before any cleanup ran, says so and when, never "met"
    before = later.replace(minute=3, second=44)  # closed 28s before `later`
    state = _fmt.cleanup_deadline_state
    for deadline, ended, outcome, judged in [
        (later, before, "completed", ("met, 28s to spare", "met")),
        (later, before, "failed", ("met, 28s to spare", "met")),
        (later, before, "not_delivered", ("no cleanup ran: closed 28s before it", "cut")),
        (later, before, "interrupted",
         ("cleanup cut short by cancel: closed 28s before it", "cut")),
        (later, before, "terminated",
         ("cleanup cut short by terminate: closed 28s before it", "cut")),
        (earlier, now, "timed_out",
         ("cleanup cut short by the run's timeout: closed 3s after it", "cut")),
        (earlier, now, "deadline_expired",
         ("missed: cleanup cut short by it, closed 3s after it", "missed")),
        (earlier, earlier, "deadline_expired", ("missed: cleanup cut short by it", "missed")),
    ]:
        assert state(deadline, now, False, ended, outcome) == judged, outcome
        assert _fmt.judged_deadline(deadline, now, False, ended, cleanup=outcome) == judged
    assert state(later, now, True, None, None) == ("in 4m 12s", "ahead")  # still open
    assert [_fmt.cleanup_end_label(o) for o in ("completed", "not_delivered", "interrupted")] \
        == ["cleanup finished", "closed without cleanup", "cleanup cut short"]
    assert _fmt.absolute(later) == "2026-04-12 12:04:12 UTC"
    assert _fmt.relative(earlier, now) == "3s ago"
    assert [_fmt.duration(s) for s in (0.25, 12, 252, 7500, 90000)] == [
        "250ms", "12s", "4m 12s", "2h 05m", "1d 1h"]


def test_the_shape_validator_reports_what_is_wrong() -> None:
    good = {"repaired": {"run_timeout": 1}, "total": 1}
    assert validate(good, SCHEMAS["repair-pass"]) == []
    assert validate({"repaired": {"x": "1"}, "total": 1}, SCHEMAS["repair-pass"]) == [
        "$.repaired.x: expected integer, got str '1'"]
    assert validate({"total": True, "more": 1}, SCHEMAS["repair-pass"]) == [
        "$: missing key 'repaired'", "$.total: expected integer, got bool True",
        "$: unexpected key 'more'"]
    # a history event is the wire's (durable.http.model.EVENT_SCHEMA)
    event = {"sequence": 1, "type": "T", "recorded_at": "2026-04-12T12:00:00", "data": {}}
    assert validate(event, SCHEMAS["history_event"]) == [
        "$: missing key 'event_type'", "$: missing key 'timestamp'",
        "$: missing key 'payload'"]


def test_the_json_examples_in_docs_cli_md_have_the_documented_shapes() -> None:
    """Every `$ durable COMMAND ... --json` transcript in docs/cli.md fits its schema."""
    text = (REPO / "docs" / "cli.md").read_text()
    checked: set[str] = set()
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for command, output in re.findall(r"^\$ durable (.+?)\n(.*?)(?=^\$ |\Z)", block,
                                          flags=re.S | re.M):
            if "--json" not in command:
                continue
            words = command.split()
            name = " ".join(words[:2]) if words[0] == "schedule" else words[0]
            if "--follow" in command:
                values = [json.loads(line) for line in output.splitlines()]
                shape = "history_event"
            else:
                values, shape = [json.loads(output)], name
            for value in values:
                assert not validate(value, SCHEMAS[shape]), (command, validate(
                    value, SCHEMAS[shape]))
            checked.add(shape)
    assert {"start", "list", "describe", "history_event", "result", "request-cancellation",
            "cascade", "signal", "query", "update"} <= checked
