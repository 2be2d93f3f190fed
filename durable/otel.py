"""OpenTelemetry spans and metrics for runs and activity attempts (optional extra).

``pip install 'durable-sdk[otel]'`` (opentelemetry-api), then::

    import durable.otel
    durable.otel.instrument()      # the global tracer and meter providers, or pass your own

From then on every run and every activity attempt that this process records
as ended becomes a span (its real start and end times; attributes
``durable.workflow_id``, ``durable.run_id``, ``durable.stop_kind``,
``durable.timeout_kind``, ``durable.phase``, ...; an error status for what did
not complete) and counts in three instruments: ``durable.runs.stopped``
(by workflow type and stop kind), ``durable.run.duration`` (seconds) and
``durable.activity.attempts`` (by activity type and outcome). The notices
come from `durable.observe`, so nothing is exported that the logs do not say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import observe
from .errors import ConfigurationError

_NS = 1_000_000_000


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> Callable[[], None]:
    """Start exporting runs and attempts; returns the function that stops it."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.context import Context
        from opentelemetry.trace import Status, StatusCode
    except ImportError as exc:
        raise ConfigurationError(
            "durable.otel needs OpenTelemetry's API: pip install 'durable-sdk[otel]'"
        ) from exc
    tracer = (tracer_provider.get_tracer("durable") if tracer_provider is not None
              else trace.get_tracer("durable"))
    meter = (meter_provider.get_meter("durable") if meter_provider is not None
             else metrics.get_meter("durable"))
    stopped = meter.create_counter("durable.runs.stopped", unit="{run}",
                                   description="Runs that stopped, by stop kind")
    durations = meter.create_histogram("durable.run.duration", unit="s",
                                       description="From a run's start to its stop")
    attempts = meter.create_counter("durable.activity.attempts", unit="{attempt}",
                                    description="Activity attempts that ended, by outcome")

    # Every span is a root (`context=Context()`): a notice is delivered in the
    # context of whichever task committed the stop (a worker started inside an
    # application's span, a request that terminated a run), whose current span
    # is no parent of the run or attempt; inheriting it put every run of a
    # worker's lifetime into one trace.

    def on_notice(kind: str, notice: dict[str, Any]) -> None:
        if kind == "run":
            start = float(notice.get("started_at") or notice["closed_at"])
            end = float(notice["closed_at"])
            attributes = {k: v for k, v in {
                "durable.workflow_id": notice["workflow_id"],
                "durable.run_id": notice["run_id"],
                "durable.workflow_type": notice["workflow_type"],
                "durable.namespace": notice["namespace"],
                "durable.stop_kind": notice["status"],
                "durable.reason": notice.get("reason"),
                "durable.timeout_kind": notice.get("timeout_kind"),
                "durable.phase": notice.get("phase"),
                "durable.failure_category": notice.get("failure_category"),
            }.items() if v is not None}
            span = tracer.start_span(f"workflow {notice['workflow_type']}", context=Context(),
                                     start_time=int(start * _NS), attributes=attributes)
            if notice["status"] not in ("completed", "continued"):
                span.set_status(Status(StatusCode.ERROR, notice.get("reason")))
            span.end(end_time=int(end * _NS))
            labels = {"workflow_type": notice["workflow_type"], "stop_kind": notice["status"]}
            stopped.add(1, labels)
            durations.record(max(0.0, end - start), labels)
        else:
            started = notice.get("started_at")
            end = float(notice["ended_at"])
            span = tracer.start_span(
                f"activity {notice['activity_type']}", context=Context(),
                start_time=int((float(started) if started is not None else end) * _NS),
                attributes={k: v for k, v in {
                    "durable.activity_type": notice["activity_type"],
                    "durable.task_id": notice["task_id"],
                    "durable.run_id": notice["run_id"],
                    "durable.attempt": notice["attempt"],
                    "durable.outcome": notice["outcome"],
                    "durable.timeout_kind": notice.get("timeout_kind"),
                }.items() if v is not None})
            if notice["outcome"] != "ActivityCompleted":
                span.set_status(Status(StatusCode.ERROR, notice["outcome"]))
            span.end(end_time=int(end * _NS))
            attempts.add(1, {"activity_type": notice["activity_type"],
                             "outcome": notice["outcome"]})

    return observe.add_listener(on_notice)
