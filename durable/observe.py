"""What the logs (and, optionally, OpenTelemetry) say when a run or an attempt ends.

Every run that stops — completed, failed, cancelled, timed out (and which
deadline: execution, run, phase), terminated, continued — is logged once, by
the process that recorded the stop, as a ``run_stopped`` event of the
``durable.runs`` logger with its duration, stop kind, reason, phase and
failure category; every activity attempt that ends as ``attempt_ended`` of
``durable.activities``. Values of fields whose names look like secrets
(`SECRET_FIELDS`, extended with `redact_fields`) are masked in durable's own
log events. `durable.otel` turns the same notices into spans and metrics.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ._log import get_logger
from .wakes import Wake, WakeHub, WakeKind

Listener = Callable[[str, dict[str, Any]], None]

_runs_log = get_logger("durable.runs")
_activities_log = get_logger("durable.activities")


def _log(kind: str, notice: dict[str, Any]) -> None:
    if kind == "run":
        duration = notice["closed_at"] - (notice.get("started_at") or notice["closed_at"])
        _runs_log.info(
            "run_stopped", workflow_id=notice["workflow_id"], run_id=notice["run_id"],
            workflow_type=notice["workflow_type"], stop_kind=notice["status"],
            reason=notice.get("reason"), duration_seconds=round(max(0.0, duration), 6),
            phase=notice.get("phase"), timeout_kind=notice.get("timeout_kind"),
            failure_category=notice.get("failure_category"))
    else:
        started = notice.get("started_at")
        duration = None if started is None else round(max(0.0, notice["ended_at"] - started), 6)
        _activities_log.info(
            "attempt_ended", task_id=notice["task_id"], activity_type=notice["activity_type"],
            run_id=notice["run_id"], attempt=notice["attempt"], outcome=notice["outcome"],
            duration_seconds=duration, timeout_kind=notice.get("timeout_kind"),
            failure_category=notice.get("failure_category"))


_listeners: list[Listener] = [_log]


def add_listener(listener: Listener) -> Callable[[], None]:
    """Call ``listener(kind, notice)`` for every stop this process records
    (kind ``"run"`` or ``"attempt"``); returns the function that removes it."""
    _listeners.append(listener)

    def remove() -> None:
        if listener in _listeners:
            _listeners.remove(listener)

    return remove


_watched: weakref.WeakSet[WakeHub] = weakref.WeakSet()
#: the wake-ups that carry a stop notice, and what the listeners are told it is
_NOTICES: dict[WakeKind | None, str] = {WakeKind.STOPPED: "run", WakeKind.ATTEMPT_ENDED: "attempt"}


def watch(hub: WakeHub) -> Callable[[], None]:
    """Hand the stop notices published on `hub` to the listeners (once per hub:
    several clients over one driver still log each stop once)."""
    if hub in _watched:
        return lambda: None
    _watched.add(hub)

    def on_wake(wake: Wake) -> None:
        if wake.data is None or not wake.local:
            return
        kind = _NOTICES.get(wake.kind)
        if kind is None:
            return
        for listener in list(_listeners):
            try:
                listener(kind, wake.data)
            except Exception as exc:  # a listener's bug never reaches the engine
                _runs_log.warning("observer_failed", listener=repr(listener), error=repr(exc))

    unsubscribe = hub.subscribe(on_wake)

    def stop() -> None:
        _watched.discard(hub)
        unsubscribe()

    return stop
