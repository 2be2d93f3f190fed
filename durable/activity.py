"""The activity side of the API: define activities and talk to the running attempt.

    @activity.defn
    def import_rows(path: str) -> int:
        for n, row in enumerate(read(path), 1):
            activity.heartbeat({"processed": n})   # raises once the attempt must stop
            store(row)

Activities may be `async def` or plain functions; plain functions run in a
worker thread and stop cooperatively at `heartbeat()` / `check_cancelled()`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, overload

from ._registry import define_activity
from ._runtime.attempts import ActivityInfo, current
from .budget import Budget
from .clock import to_datetime

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "ActivityInfo",
    "budget",
    "check_cancelled",
    "deadline",
    "defn",
    "heartbeat",
    "info",
    "remaining",
    "sleep",
]


@overload
def defn(fn: F, /) -> F: ...


@overload
def defn(*, name: str | None = None, process_isolated: bool = False) -> Callable[[F], F]: ...


def defn(
    fn: F | None = None, /, *, name: str | None = None, process_isolated: bool = False
) -> F | Callable[[F], F]:
    """Declare an activity; its name defaults to the function's name."""

    def decorate(f: F) -> F:
        define_activity(f, name, process_isolated)
        return f

    return decorate(fn) if fn is not None else decorate


def info() -> ActivityInfo:
    """The running attempt's identity, deadline and last heartbeat details."""
    return current().info


def heartbeat(details: Any = None) -> None:
    """Record progress (kept for the next attempt) and prove liveness.

    Raises `durable.ActivityStopRequested` when the attempt must stop.
    """
    current().heartbeat(details)


def check_cancelled() -> None:
    """Raise `durable.ActivityStopRequested` if this attempt must stop."""
    current().check_cancelled()


async def sleep(seconds: float) -> None:
    """Sleep on the engine's clock (virtual time in tests), stopping early if asked to.

    Raises `durable.ActivityStopRequested` when the attempt must stop.
    """
    ctx = current()
    ctx.check_cancelled()
    await ctx.clock.sleep_until(ctx.clock.now() + seconds)
    ctx.check_cancelled()


def deadline() -> Any:
    """The attempt's earliest binding deadline as an aware datetime, or None."""
    return to_datetime(current().deadline)


def budget() -> Budget:
    """The attempt's time budget, for handing the time left to real clients.

    Its deadline is the attempt's binding deadline (start-to-close,
    schedule-to-close); it is cancelled when the attempt must stop. It is also
    `durable.Budget.current()` while the activity runs, so
    `durable.subprocess.run` is bounded by it without being told::

        async with httpx.AsyncClient(timeout=activity.budget().httpx_timeout(connect=2)) as c:
            ...
    """
    return current().budget


def remaining() -> float:
    """Seconds until the attempt's deadline; `math.inf` when unbounded."""
    ctx = current()
    if ctx.deadline is None:
        return math.inf
    return max(0.0, ctx.deadline - ctx.clock.now())
