"""What an operator's dashboards and alerts read in situations that fooled
them (the observability audit, 12-07): retried activity timeouts in
`durable_timeouts_total`, a queue no worker serves, overdue schedules,
OpenTelemetry spans that do not join the application's ambient trace, and a
locked SQLite file at connect time."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

import durable
import durable.otel
from durable import workflow
from durable.http.metrics import Metrics
from durable.store.records import RecordedEvent

pytestmark = pytest.mark.anyio


@workflow.defn(name="audit_obs_nap")
async def audit_obs_nap(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "rested"


def test_a_retried_activity_timeout_counts_as_a_timeout() -> None:
    metrics = Metrics(store=None)  # type: ignore[arg-type]
    metrics._count(RecordedEvent(
        event_id=1, namespace="default", run_id="r", type="ActivityRetryScheduled",
        recorded_at=100.5, data={
            "op_id": "0:1", "activity_type": "slow", "task_id": "t", "failed_attempt": 1,
            "next_attempt": 2, "timeout_kind": "start_to_close",
            "failure": {"timeout_kind": "start_to_close",
                        "deadline_at": "1970-01-01T00:01:40+00:00"}}))
    metrics._count(RecordedEvent(  # a retry after an application error is no timeout
        event_id=2, namespace="default", run_id="r", type="ActivityRetryScheduled",
        recorded_at=101.0, data={"op_id": "0:2", "failure": {"message": "boom"}}))
    text = generate_latest(metrics.registry).decode()
    assert ('durable_timeouts_total{kind="start_to_close",namespace="default",'
            'scope="activity"} 1.0') in text
    assert 'durable_deadline_lateness_seconds_count{scope="activity"} 1.0' in text


async def test_a_queue_with_runs_and_no_worker_reads_alive_zero(
    storage_client: durable.Client,
) -> None:
    await storage_client.start(audit_obs_nap, 1.0, id="nobody-1", task_queue="nobody")
    metrics = Metrics(storage_client.store)
    text = (await metrics.render())[0].decode()
    assert 'durable_queue_runs{namespace="default",queue="nobody",state="waiting"} 1.0' in text
    assert 'durable_workers{namespace="default",queue="nobody",state="alive"} 0.0' in text


async def test_otel_spans_do_not_inherit_the_ambient_span(
    storage_client: durable.Client, make_worker: Any,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    stop = durable.otel.instrument(provider)
    try:
        with provider.get_tracer("app").start_as_current_span("app-lifetime"):
            async with make_worker(workflows=[audit_obs_nap]):
                await storage_client.execute(audit_obs_nap, 0.01, id="otel-root-1")
                await storage_client.execute(audit_obs_nap, 0.01, id="otel-root-2")
    finally:
        stop()
    runs = [s for s in exporter.get_finished_spans() if s.name == "workflow audit_obs_nap"]
    assert len(runs) == 2
    assert all(s.parent is None for s in runs)
    assert runs[0].context.trace_id != runs[1].context.trace_id


async def test_connecting_to_a_locked_sqlite_file_is_storage_unavailable(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/locked.db"
    async with durable.connect(url):
        pass
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(durable.StorageUnavailable, match="right now"):
            async with durable.connect(url, busy_timeout=0.2):
                pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_an_overdue_schedule_shows_in_metrics(storage_client: durable.Client) -> None:
    """Workers fire schedules: in a namespace with none, a schedule's fire
    times pass unfired and /metrics must say so (describe() does: `overdue`)."""
    import time

    await storage_client.create_schedule("audit-obs-every", durable.ScheduleSpec(every=60),
                                         audit_obs_nap, 0.0)
    metrics = Metrics(storage_client.store)
    await metrics._refresh_schedules()  # due within a minute: not overdue yet
    text = generate_latest(metrics.registry).decode()
    assert "durable_schedules_overdue{" not in text
    await metrics._refresh_schedules(now=time.time() + 600)  # ten minutes on, no worker
    text = generate_latest(metrics.registry).decode()
    assert 'durable_schedules_overdue{namespace="default"} 1.0' in text
    late = [line for line in text.splitlines()
            if line.startswith('durable_schedule_oldest_overdue_seconds{namespace="default"}')]
    assert len(late) == 1 and 540 < float(late[0].split()[-1]) <= 600
