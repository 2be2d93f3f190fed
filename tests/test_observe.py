"""What an operator's logs and traces say when runs and attempts end.

Every stopped run is logged once (``durable.runs`` ``run_stopped``) with its stop
kind, the deadline that stopped it, its duration and phase; every ended attempt
(``durable.activities`` ``attempt_ended``) with its outcome; secrets are masked
in all of durable's events; `durable.otel` turns the same notices into spans and
metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import durable
import durable.otel
from durable import activity, observe, workflow

pytestmark = pytest.mark.anyio


@activity.defn(name="observe_flaky")
async def flaky(fail_times: int) -> str:
    if activity.info().attempt <= fail_times:
        raise RuntimeError("not yet")
    return "ok"


@workflow.defn(name="observe_wf")
async def observe_wf(mode: str) -> str:
    workflow.logger.info("charging", card_token="tok_4242", amount=3)
    if mode == "fail":
        raise durable.ApplicationError("declined", non_retryable=True)
    if mode == "sleep":
        await workflow.sleep(60)
    if mode == "phase":
        async with workflow.phase("import", limit=0.2):
            await workflow.sleep(60)
    return await workflow.execute_activity(
        flaky, 1, options=durable.ActivityOptions(
            start_to_close_timeout=10, retry=durable.RetryPolicy(initial_interval=0.01)))


@pytest.fixture
def notices() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    remove = observe.add_listener(lambda kind, notice: seen.append((kind, notice)))
    yield seen
    remove()


def _runs(seen: list[tuple[str, dict[str, Any]]], workflow_id: str) -> list[dict[str, Any]]:
    return [n for kind, n in seen if kind == "run" and n["workflow_id"] == workflow_id]


async def test_each_stopped_run_is_logged_once_with_its_kind_and_duration(
    client: durable.Client, make_worker: Any, caplog: pytest.LogCaptureFixture,
    notices: list[tuple[str, dict[str, Any]]],
) -> None:
    caplog.set_level(logging.INFO, logger="durable.runs")
    caplog.set_level(logging.INFO, logger="durable.activities")
    async with make_worker(workflows=[observe_wf], activities=[flaky]):
        assert await client.execute(observe_wf, "ok", id="obs-ok") == "ok"
        with pytest.raises(durable.WorkflowFailed):
            await client.execute(observe_wf, "fail", id="obs-fail")
        with pytest.raises(durable.WorkflowTimedOut):
            await client.execute(observe_wf, "sleep", id="obs-timeout",
                                 options=durable.StartOptions(execution_timeout=1))
    [ok] = _runs(notices, "obs-ok")
    assert ok["status"] == "completed" and ok["closed_at"] >= ok["started_at"]
    [failed] = _runs(notices, "obs-fail")
    assert failed["status"] == "failed" and failed["failure_category"] == "application"
    [timed_out] = _runs(notices, "obs-timeout")
    assert timed_out["status"] == "timed_out"
    assert timed_out["timeout_kind"] == "execution_timeout"
    assert timed_out["closed_at"] - timed_out["started_at"] >= 0.9

    attempts = [n for kind, n in notices if kind == "attempt" and n["run_id"] == ok["run_id"]]
    assert [a["outcome"] for a in attempts] == ["ActivityRetryScheduled", "ActivityCompleted"]
    assert [a["attempt"] for a in attempts] == [1, 2]

    lines = [r.getMessage() for r in caplog.records if r.name == "durable.runs"]
    stopped = [line for line in lines if "workflow_id='obs-timeout'" in line]
    assert len(stopped) == 1
    assert "event='run_stopped'" in stopped[0]
    assert "stop_kind='timed_out'" in stopped[0]
    assert "timeout_kind='execution_timeout'" in stopped[0]
    assert "duration_seconds=" in stopped[0]
    ended = [r.getMessage() for r in caplog.records if r.name == "durable.activities"]
    assert any("outcome='ActivityCompleted'" in line and "observe_flaky" in line
               for line in ended)


async def test_a_phase_timeout_names_the_phase(
    client: durable.Client, make_worker: Any, notices: list[tuple[str, dict[str, Any]]],
) -> None:
    async with make_worker(workflows=[observe_wf], activities=[flaky]):
        with pytest.raises(durable.WorkflowTimedOut):
            await client.execute(observe_wf, "phase", id="obs-phase")
    [stop] = _runs(notices, "obs-phase")
    assert stop["timeout_kind"] == "phase" and stop["phase"] == "import"


async def test_secret_fields_are_masked_in_workflow_logs(
    client: durable.Client, make_worker: Any, capsys: pytest.CaptureFixture[str],
) -> None:
    durable.redact_fields("amount")
    try:
        async with make_worker(workflows=[observe_wf], activities=[flaky]):
            await client.execute(observe_wf, "ok", id="obs-secret")
    finally:
        from durable import _log
        _log.SECRET_FIELDS.discard("amount")
    out = capsys.readouterr().out
    assert "charging" in out
    assert "tok_4242" not in out and "card_token=***" in out.replace("'", "")
    assert "amount=3" not in out


def test_the_redaction_processor_masks_nested_fields() -> None:
    from durable._log import redact_secrets
    event = {"event": "connect", "dsn": "x", "headers": {"Authorization": "Bearer a"},
             "db_password": "p", "count": 3}
    out = redact_secrets(None, "info", dict(event))
    assert out["headers"] == {"Authorization": "***"}
    assert out["db_password"] == "***" and out["count"] == 3 and out["dsn"] == "x"


async def test_a_failing_listener_never_reaches_the_engine(
    client: durable.Client, make_worker: Any,
) -> None:
    def broken(kind: str, notice: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    remove = observe.add_listener(broken)
    try:
        async with make_worker(workflows=[observe_wf], activities=[flaky]):
            assert await client.execute(observe_wf, "ok", id="obs-broken") == "ok"
    finally:
        remove()


async def test_otel_spans_and_metrics_for_runs_and_attempts(
    client: durable.Client, make_worker: Any,
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    stop = durable.otel.instrument(tracer_provider, meter_provider)
    try:
        async with make_worker(workflows=[observe_wf], activities=[flaky]):
            await client.execute(observe_wf, "ok", id="otel-ok")
            with pytest.raises(durable.WorkflowFailed):
                await client.execute(observe_wf, "fail", id="otel-fail")
    finally:
        stop()
    spans = {(s.name, s.attributes.get("durable.workflow_id")): s
             for s in exporter.get_finished_spans() if s.attributes is not None}
    ok = spans[("workflow observe_wf", "otel-ok")]
    assert ok.attributes is not None and ok.attributes["durable.stop_kind"] == "completed"
    assert ok.status.status_code is not StatusCode.ERROR
    assert ok.start_time is not None and ok.end_time is not None
    assert ok.end_time >= ok.start_time
    failed = spans[("workflow observe_wf", "otel-fail")]
    assert failed.status.status_code is StatusCode.ERROR
    activity_spans = [s for s in exporter.get_finished_spans()
                      if s.name == "activity observe_flaky"]
    assert len(activity_spans) >= 2

    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    stopped = {(p.attributes["stop_kind"]): p.value for p in points["durable.runs.stopped"]
               if p.attributes["workflow_type"] == "observe_wf"}
    assert stopped.get("completed", 0) >= 1 and stopped.get("failed", 0) >= 1
    assert points["durable.run.duration"]
    assert sum(p.value for p in points["durable.activity.attempts"]) >= 2


async def test_instrument_without_opentelemetry_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(durable.ConfigurationError, match=r"durable-sdk\[otel\]"):
        durable.otel.instrument()


async def test_two_clients_over_one_driver_still_report_each_stop_once(
    client: durable.Client, make_worker: Any, notices: list[tuple[str, dict[str, Any]]],
) -> None:
    second = durable.Client(client.driver)  # shares the driver (and its wake-up hub)
    async with make_worker(workflows=[observe_wf], activities=[flaky]):
        assert await second.execute(observe_wf, "ok", id="obs-twice") == "ok"
    assert len(_runs(notices, "obs-twice")) == 1
