"""Prometheus metrics of the control plane, read from storage at each scrape.

Each app has its own `CollectorRegistry` (two apps in one process never mix
their series). What is exported, and where each figure comes from:

Gauges, counted in storage at every scrape (one read transaction,
`Store.observe`):

- ``durable_runs{namespace,status}``: runs by status (ours, as a list shows
  them: a run in review is ``needs_review``/``unknown``, not ``running``).
- ``durable_cancellations_open{namespace,lifecycle}``: open runs under a
  cooperative cancellation request, by lifecycle (requested, delivered,
  cleaning_up).
- ``durable_runs_blocked{namespace,build_id}``: open runs a build cannot take
  (its code does not replay their history: the upgrade gate).
- ``durable_deadlines_overdue{namespace,of}`` (of: runs, activity_attempts)
  and ``durable_deadline_oldest_overdue_seconds{namespace}``: deadlines that
  have passed and are not enforced yet, and how late the oldest is
  (`Store.overdue_counts`). Every worker's watchdog enforces a deadline as it
  falls due, so these stay at none, or milliseconds, while one runs; alert
  when the oldest is seconds late: no watchdog runs in the namespace.

Queue gauges, counted at every scrape (`Store.queue_gauges`; docs/queues.md):

- ``durable_queue_runs{namespace,queue,state}``: runs running (held under a
  live lease) and waiting (ready, no live owner): the queue's depth; and
  parked: runs a full worker put down while they wait (on a child, a timer,
  a signal), claimable again once that wait ends (docs/deployment.md).
- ``durable_queue_activities{namespace,queue,state}``: the same for remote
  activity attempts.
- ``durable_queue_limit{namespace,queue,limit}``: each limit that is set
  (max_running, max_running_activities, max_running_per_key, rate,
  activity_rate: the count per ``rate_period``).
- ``durable_queue_rate_period_seconds{namespace,queue,limit}`` and
  ``durable_queue_rate_left{namespace,queue,kind}``: a rate's period, and the
  starts it allows now (runs, activities).

Counters, from the history events recorded since this process first served
/metrics (the scrape reads the event table after the last event it saw, by
primary key; a restart starts again from the newest event, which Prometheus
treats as a counter reset):

- ``durable_events_total{namespace,type}``: every event type.
- ``durable_activity_attempts_total{namespace}``: remote activity attempts
  started (``ActivityStarted``; local activities record no attempt events).
- ``durable_steps_total{namespace,kind,outcome}``: durable operations that
  ended: kind activity / local_activity / timer / child; outcome completed,
  failed, timed_out, cancelled.
- ``durable_timeouts_total{namespace,scope,kind}``: scope workflow (kind
  execution_timeout / run_timeout), activity (schedule_to_start,
  start_to_close, schedule_to_close, heartbeat) and cancellation (kind
  cleanup_deadline: a cleanup that outlived its budget).
- ``durable_cancellations_total{namespace,lifecycle}``: requested and
  delivered (cooperative requests), deadline_expired (cleanup budget
  exhausted), cancelled (every run closed as cancelled, cooperatively or by
  cancel()), terminated (every terminated run).

Histogram ``durable_deadline_lateness_seconds{scope}``: how long after its
deadline a timeout was recorded (scopes workflow, activity, cleanup) or a
timer fired (scope timer, when its ``TimerScheduled`` was read by the same
process).

Gauges the storage driver reports about itself, read at each scrape from
its optional ``gauges()`` (name -> (help, value)); SQLite:
``durable_sqlite_wal_bytes`` (the ``-wal`` file's size),
``durable_sqlite_last_checkpoint_timestamp_seconds`` and
``durable_sqlite_last_wal_reset_timestamp_seconds`` (each once it happened).

Schedules and retention, read at each scrape (`Store.schedule_stats`):
``durable_schedules{namespace,state}`` (active, paused),
``durable_schedules_overdue{namespace}`` and
``durable_schedule_oldest_overdue_seconds{namespace}`` (active schedules whose
next fire passed over 5 s ago unfired: no worker of the namespace runs),
``durable_schedule_fires{namespace,kind}`` (kind fired / skipped: the sums of
the schedules' counters, which lose a deleted schedule's share),
``durable_schedule_fires_recorded_total{namespace,origin,outcome}`` and the
histogram ``durable_schedule_fire_lateness_seconds{namespace}`` (fired_at -
due_at of scheduled fires, jitter excluded: due_at includes it), both from
the fires recorded since this process first served /metrics, and
``durable_retention_deleted_rows{namespace,table}``: rows retention deleted
(stored per namespace, so it survives restarts).

Workers, read at each scrape (`durable.store.workers.gauges`; docs/deployment.md):
``durable_workers{namespace,queue,state}`` (alive, gone: a gone worker is
listed for an hour), and for each live worker whose event loop something
blocked, ``durable_worker_event_loop_blocks{namespace,queue,worker_id}``
(how many times) and ``durable_worker_event_loop_last_block_seconds{...}``
(how long the last one lasted), as recorded at its last renewal; and for each
live worker that put runs down under pressure (decision (am)), the counter
``durable_worker_runs_released_total{namespace,queue,worker_id}`` (in all, as
of its last renewal: a new worker starts a new series; the runs down now are
``durable_queue_runs{state="parked"}``).

And the control plane's own traffic: ``durable_http_requests_total{method,
route,status}`` and ``durable_http_request_duration_seconds{method,route}``
(route is the template, e.g. ``/api/workflows/{workflowId}``).
"""

from __future__ import annotations

import datetime
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily

from ..store import Store, workers
from ..store.records import RecordedEvent

# Events read per storage round trip, and round trips per scrape (a backlog
# larger than this is caught up over the next scrapes).
_BATCH = 5000
_BATCHES_PER_SCRAPE = 4
# An event id below the newest one read but not seen yet may still commit
# (PostgreSQL sequences hand out ids before commit); re-checked this long.
_GAP_SECONDS = 60.0
_MAX_GAPS = 1000
_MAX_TIMERS = 100_000

_STEP_EVENTS = {
    "ActivityCompleted": "completed", "ActivityFailed": "failed",
    "ActivityTimedOut": "timed_out", "ActivityCancelled": "cancelled",
}
_LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                     60.0, 300.0)


class _ReleasedRuns:
    """``durable_worker_runs_released_total``: a counter whose value each worker
    keeps (its registry row), so it is read, not incremented, at a scrape."""

    def __init__(self) -> None:
        self.rows: list[tuple[tuple[str, str, str], int]] = []

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "durable_worker_runs_released",
            "Runs a live worker put down under pressure (as of its last renewal).",
            labels=["namespace", "queue", "worker_id"])
        for labels, count in self.rows:
            family.add_metric(list(labels), count)
        yield family


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


class Metrics:
    """The registry of one app and the storage tail that feeds it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = Gauge("durable_runs", "Runs by status, counted in storage at each scrape.",
                          ["namespace", "status"], registry=r)
        self.open_cancellations = Gauge(
            "durable_cancellations_open",
            "Open runs under a cooperative cancellation request, by lifecycle.",
            ["namespace", "lifecycle"], registry=r)
        self.overdue = Gauge(
            "durable_deadlines_overdue",
            "Deadlines passed and not enforced yet (every worker's watchdog enforces them as "
            "they fall due: a count that stays means none runs), of runs or activity attempts.",
            ["namespace", "of"], registry=r)
        self.oldest_overdue = Gauge(
            "durable_deadline_oldest_overdue_seconds",
            "How late the oldest deadline passed and not enforced yet is.",
            ["namespace"], registry=r)
        self.blocked = Gauge("durable_runs_blocked",
                             "Open runs a build cannot take (its code does not replay them).",
                             ["namespace", "build_id"], registry=r)
        self.queue_runs = Gauge("durable_queue_runs", "Runs of a task queue running or waiting.",
                                ["namespace", "queue", "state"], registry=r)
        self.queue_activities = Gauge(
            "durable_queue_activities", "Activity attempts of a task queue running or waiting.",
            ["namespace", "queue", "state"], registry=r)
        self.queue_limit = Gauge("durable_queue_limit", "A task queue's limits that are set.",
                                 ["namespace", "queue", "limit"], registry=r)
        self.queue_rate_period = Gauge("durable_queue_rate_period_seconds",
                                       "The period of a task queue's rate limit.",
                                       ["namespace", "queue", "limit"], registry=r)
        self.queue_rate_left = Gauge("durable_queue_rate_left",
                                     "Starts a task queue's rate allows now.",
                                     ["namespace", "queue", "kind"], registry=r)
        self.events = Counter("durable_events", "History events recorded, by type.",
                              ["namespace", "type"], registry=r)
        self.attempts = Counter("durable_activity_attempts",
                                "Remote activity attempts started.", ["namespace"], registry=r)
        self.steps = Counter("durable_steps", "Durable operations that ended.",
                             ["namespace", "kind", "outcome"], registry=r)
        self.timeouts = Counter("durable_timeouts", "Timeouts enforced, by scope and kind.",
                                ["namespace", "scope", "kind"], registry=r)
        self.cancellations = Counter("durable_cancellations",
                                     "Cancellation lifecycle transitions recorded.",
                                     ["namespace", "lifecycle"], registry=r)
        self.lateness = Histogram(
            "durable_deadline_lateness_seconds",
            "Seconds between a deadline (or a timer's fire time) and when it was recorded.",
            ["scope"], buckets=_LATENESS_BUCKETS, registry=r)
        self.schedules = Gauge("durable_schedules", "Schedules by state.",
                               ["namespace", "state"], registry=r)
        self.schedules_overdue = Gauge(
            "durable_schedules_overdue",
            "Active schedules whose next fire is overdue (over 5 s): no worker of the "
            "namespace fires them.", ["namespace"], registry=r)
        self.schedule_oldest_overdue = Gauge(
            "durable_schedule_oldest_overdue_seconds",
            "How late the most overdue schedule's next fire is.", ["namespace"], registry=r)
        self.schedule_fires = Gauge(
            "durable_schedule_fires",
            "Fires of the existing schedules: fired (a run started or buffered) or skipped.",
            ["namespace", "kind"], registry=r)
        self.fires_recorded = Counter(
            "durable_schedule_fires_recorded", "Schedule fires recorded, by origin and outcome.",
            ["namespace", "origin", "outcome"], registry=r)
        self.fire_lateness = Histogram(
            "durable_schedule_fire_lateness_seconds",
            "Seconds between a scheduled fire's due time (jitter included) and its firing.",
            ["namespace"], buckets=_LATENESS_BUCKETS, registry=r)
        self.workers = Gauge("durable_workers", "Workers by queue and state (alive, gone).",
                             ["namespace", "queue", "state"], registry=r)
        self.loop_blocks = Gauge(
            "durable_worker_event_loop_blocks",
            "Times something blocked a live worker's event loop (as of its last renewal).",
            ["namespace", "queue", "worker_id"], registry=r)
        self.loop_last_block = Gauge(
            "durable_worker_event_loop_last_block_seconds",
            "How long the last block of a live worker's event loop lasted.",
            ["namespace", "queue", "worker_id"], registry=r)
        self.runs_released = _ReleasedRuns()
        r.register(self.runs_released)
        self.retention_deleted = Gauge(
            "durable_retention_deleted_rows", "Rows retention deleted, by table.",
            ["namespace", "table"], registry=r)
        # fired_at of the newest fire counted (None: the first scrape starts the tail)
        self._fire_mark: float | None = None
        self.http_requests = Counter("durable_http_requests", "Control-plane HTTP requests.",
                                     ["method", "route", "status"], registry=r)
        self.http_duration = Histogram("durable_http_request_duration_seconds",
                                       "Control-plane HTTP request durations.",
                                       ["method", "route"], registry=r)
        self._driver_gauges: dict[str, Gauge] = {}
        self._last_event: int | None = None
        self._gaps: OrderedDict[int, float] = OrderedDict()
        self._timers: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = anyio.Lock()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_duration.labels(method, route).observe(seconds)

    async def refresh(self) -> None:
        """Read counts and new events from storage (one scrape at a time)."""
        async with self._lock:
            self._set_driver_gauges()
            queues = await self.store.queue_gauges(time.time())
            self._set_queue_gauges(queues)
            now = time.time()
            self._set_worker_gauges(await self.store.driver.run(
                lambda tx: workers.gauges(now), write=False),
                [(q["namespace"], q["queue"]) for q in queues])
            await self._refresh_schedules()
            for batch in range(_BATCHES_PER_SCRAPE):
                now = time.monotonic()
                for event_id, since in list(self._gaps.items()):
                    if now - since > _GAP_SECONDS:
                        del self._gaps[event_id]
                snapshot = await self.store.observe(self._last_event, _BATCH,
                                                     tuple(self._gaps))
                self._set_gauges(snapshot.runs, snapshot.open_cancellations)
                if batch == 0:  # the counts are the same in every batch's snapshot
                    await self._refresh_overdue(sorted({ns for ns, _ in snapshot.runs}))
                self.blocked.clear()
                for (namespace, build_id), count in snapshot.blocked.items():
                    self.blocked.labels(namespace, build_id).set(count)
                if self._last_event is None:
                    self._last_event = snapshot.last_event_id
                    return
                previous = self._last_event
                for event in snapshot.events:
                    if event.event_id in self._gaps:
                        del self._gaps[event.event_id]
                    elif event.event_id > previous:
                        for missing in range(previous + 1, event.event_id):
                            self._gaps[missing] = now
                        previous = event.event_id
                    self._count(event)
                while len(self._gaps) > _MAX_GAPS:
                    self._gaps.popitem(last=False)
                self._last_event = snapshot.last_event_id
                if len(snapshot.events) < _BATCH:
                    return

    async def _refresh_overdue(self, namespaces: list[str]) -> None:
        """The overdue gauges of the namespaces that hold runs (those the run
        counts found: an activity attempt always belongs to a run)."""
        now = time.time()
        counts = await self.store.overdue_counts(namespaces, now)
        self.overdue.clear()
        self.oldest_overdue.clear()
        oldest: dict[str, float] = {}
        for (namespace, of), (count, due) in counts.items():
            self.overdue.labels(namespace, of).set(count)
            oldest[namespace] = min(due, oldest.get(namespace, due))
        for namespace, due in oldest.items():
            self.oldest_overdue.labels(namespace).set(max(0.0, now - due))

    async def _refresh_schedules(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        stats = await self.store.schedule_stats(self._fire_mark, _BATCH, now)
        self.schedules.clear()
        self.schedule_fires.clear()
        self.schedules_overdue.clear()
        self.schedule_oldest_overdue.clear()
        for namespace, (count, due) in stats.overdue.items():
            self.schedules_overdue.labels(namespace).set(count)
            self.schedule_oldest_overdue.labels(namespace).set(max(0.0, now - due))
        fired: dict[str, list[int]] = {}
        for (namespace, state), (count, fires, skipped) in stats.schedules.items():
            self.schedules.labels(namespace, state).set(count)
            totals = fired.setdefault(namespace, [0, 0])
            totals[0] += fires
            totals[1] += skipped
        for namespace, (fires, skipped) in fired.items():
            self.schedule_fires.labels(namespace, "fired").set(fires)
            self.schedule_fires.labels(namespace, "skipped").set(skipped)
        for namespace, origin, outcome, due_at, fired_at in stats.fires:
            self.fires_recorded.labels(namespace, origin, outcome).inc()
            if origin == "schedule":
                self.fire_lateness.labels(namespace).observe(max(fired_at - due_at, 0.0))
        self._fire_mark = stats.mark
        self.retention_deleted.clear()
        for namespace, tables in stats.pruned.items():
            for table, rows in tables.items():
                self.retention_deleted.labels(namespace, table).set(rows)

    def _set_gauges(self, runs: dict[tuple[str, str], int],
                    open_cancellations: dict[tuple[str, str], int]) -> None:
        self.runs.clear()
        for (namespace, status), count in runs.items():
            self.runs.labels(namespace, status).set(count)
        self.open_cancellations.clear()
        for (namespace, lifecycle), count in open_cancellations.items():
            self.open_cancellations.labels(namespace, lifecycle).set(count)

    def _set_queue_gauges(self, found: list[dict[str, Any]]) -> None:
        for gauge in (self.queue_runs, self.queue_activities, self.queue_limit,
                      self.queue_rate_period, self.queue_rate_left):
            gauge.clear()
        for q in found:
            ns, name = q["namespace"], q["queue"]
            for state in ("running", "waiting"):
                self.queue_runs.labels(ns, name, state).set(q[f"runs_{state}"])
                self.queue_activities.labels(ns, name, state).set(q[f"activities_{state}"])
            self.queue_runs.labels(ns, name, "parked").set(q["runs_parked"])
            for limit, value in q["limits"].items():
                if isinstance(value, dict):
                    self.queue_limit.labels(ns, name, limit).set(value["count"])
                    self.queue_rate_period.labels(ns, name, limit).set(value["per"])
                elif value is not None:
                    self.queue_limit.labels(ns, name, limit).set(value)
            for kind, left in q["rate_left"].items():
                self.queue_rate_left.labels(ns, name, kind).set(left)

    def _set_worker_gauges(self, found: list[dict[str, Any]],
                           queues: Sequence[tuple[str, str]] = ()) -> None:
        for gauge in (self.workers, self.loop_blocks, self.loop_last_block):
            gauge.clear()
        counts: dict[tuple[str, str, str], int] = {}
        released: list[tuple[tuple[str, str, str], int]] = []
        for w in found:
            key = (w["namespace"], w["task_queue"], "alive" if w["alive"] else "gone")
            counts[key] = counts.get(key, 0) + 1
            if w["alive"] and w["runs_released"]:
                released.append(((w["namespace"], w["task_queue"], w["worker_id"]),
                                 int(w["runs_released"].get("count") or 0)))
            blocked = w["loop_blocked"]
            if w["alive"] and blocked:
                labels = (w["namespace"], w["task_queue"], w["worker_id"])
                self.loop_blocks.labels(*labels).set(blocked.get("count") or 0)
                self.loop_last_block.labels(*labels).set(blocked.get("seconds") or 0.0)
        self.runs_released.rows = released
        for (namespace, queue, state), count in counts.items():
            self.workers.labels(namespace, queue, state).set(count)
        # a queue whose workers are all gone, or that holds runs or attempts and
        # never had a worker (a mistyped task queue), reads alive 0, not nothing:
        # `durable_workers{state="alive"} == 0` must match it
        for namespace, queue in [(ns, q) for ns, q, state in counts if state == "gone"] + list(
                queues):
            if (namespace, queue, "alive") not in counts:
                self.workers.labels(namespace, queue, "alive").set(0)

    def _set_driver_gauges(self) -> None:
        gauges = getattr(self.store.driver, "gauges", None)
        for name, (doc, value) in (gauges() if gauges is not None else {}).items():
            gauge = self._driver_gauges.get(name)
            if gauge is None:
                gauge = self._driver_gauges[name] = Gauge(name, doc, registry=self.registry)
            gauge.set(value)

    def _late(self, scope: str, event: RecordedEvent, deadline: float | None) -> None:
        if deadline is not None:
            self.lateness.labels(scope).observe(max(0.0, event.recorded_at - deadline))

    def _count(self, event: RecordedEvent) -> None:
        ns, kind, data = event.namespace, event.type, event.data
        self.events.labels(ns, kind).inc()
        failure = data.get("failure")
        if not isinstance(failure, dict):
            failure = {}
        deadline = _epoch(data.get("deadline_at") or failure.get("deadline_at"))
        if kind == "ActivityStarted":
            self.attempts.labels(ns).inc()
        elif kind == "ActivityRetryScheduled" and data.get("timeout_kind"):
            # an attempt that timed out and is retried is a timeout enforced too
            # (the last attempt's is ActivityTimedOut, below)
            self.timeouts.labels(ns, "activity", str(data["timeout_kind"])).inc()
            self._late("activity", event, deadline)
        elif kind in _STEP_EVENTS:
            step = "local_activity" if data.get("local") else "activity"
            self.steps.labels(ns, step, _STEP_EVENTS[kind]).inc()
            if kind == "ActivityTimedOut":
                self.timeouts.labels(ns, "activity",
                                     str(data.get("timeout_kind") or "unknown")).inc()
                self._late("activity", event, deadline)
        elif kind == "TimerScheduled":
            fire_at = _epoch(data.get("fire_at"))
            if fire_at is not None:
                self._timers[(event.run_id, str(data.get("op_id")))] = fire_at
                while len(self._timers) > _MAX_TIMERS:
                    self._timers.popitem(last=False)
        elif kind in ("TimerFired", "TimerCancelled"):
            fire_at = self._timers.pop((event.run_id, str(data.get("op_id"))), None)
            self.steps.labels(ns, "timer",
                              "completed" if kind == "TimerFired" else "cancelled").inc()
            if kind == "TimerFired":
                self._late("timer", event, fire_at)
        elif kind in ("ChildWorkflowCompleted", "ChildWorkflowFailed"):
            self.steps.labels(ns, "child",
                              "completed" if kind == "ChildWorkflowCompleted" else "failed").inc()
        elif kind == "WorkflowTimedOut":
            self.timeouts.labels(ns, "workflow", str(data.get("timeout_kind") or "unknown")).inc()
            self._late("workflow", event, deadline)
        elif kind == "CancellationRequested":
            self.cancellations.labels(ns, "requested").inc()
        elif kind == "CancellationDelivered":
            self.cancellations.labels(ns, "delivered").inc()
        elif kind == "WorkflowCancelled":
            if data.get("reason") == "deadline_expired":
                self.cancellations.labels(ns, "deadline_expired").inc()
                self.timeouts.labels(ns, "cancellation", "cleanup_deadline").inc()
                self._late("cleanup", event, deadline)
            else:
                self.cancellations.labels(ns, "cancelled").inc()
        elif kind == "WorkflowTerminated":
            self.cancellations.labels(ns, "terminated").inc()

    async def render(self, namespaces: frozenset[str] | None = None) -> tuple[bytes, str]:
        """The Prometheus text exposition after reading storage; with `namespaces`
        (a token limited to them) only their samples of the per-namespace
        metrics, and the server-wide ones (HTTP traffic, lateness, driver gauges)."""
        await self.refresh()
        if namespaces is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        return generate_latest(_OnlyNamespaces(self.registry, namespaces)), CONTENT_TYPE_LATEST


class _OnlyNamespaces:
    """A registry view holding the samples of these namespaces only (and
    samples without a namespace label)."""

    def __init__(self, registry: CollectorRegistry, namespaces: frozenset[str]) -> None:
        self.registry = registry
        self.namespaces = namespaces

    def collect(self) -> Any:
        for family in self.registry.collect():
            family.samples = [
                sample for sample in family.samples
                if "namespace" not in sample.labels
                or sample.labels["namespace"] in self.namespaces
            ]
            yield family
