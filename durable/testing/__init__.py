"""An offline, in-process time-skipping environment for tests.

    async with durable.testing.TimeSkippingEnvironment() as env:
        async with env.worker(workflows=[order], activities=[charge]):
            handle = await env.client.start(order, "o-1", id="o-1",
                options=durable.StartOptions().with_execution_timeout(7200))
            with pytest.raises(durable.WorkflowTimedOut):
                await handle.result()          # two virtual hours, milliseconds of real time

Time is a `VirtualClock` that timers, timeouts, leases and the watchdog all
follow. With ``auto_skip=True`` (the default) the environment jumps the clock
to the next thing anyone waits for whenever the whole program is idle: every
task blocked and no storage call in flight. ``await env.sleep(s)`` moves time
by hand. No server is downloaded or started (Temporal's equivalent needs one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._registry import Registry, isolated_definitions
from .._runtime.history import HistoryLike, history_to_json, load_history, records_from_history
from .._runtime.replay import NoStorage, replay_run
from .._testing_deps import (
    AnswersAtDeadline,
    ManualClock,
    SlowCall,
    SlowHTTPServer,
    UnacceptingServer,
    UninterruptibleCall,
)
from ..client import Client
from ..clock import VirtualClock
from ..converter import JSONConverter, PayloadConverter
from ..errors import ConfigurationError, NonDeterminismDetected, NondeterministicCall
from ..options import Limits
from ..store.records import OpRecord
from ..worker import Worker
from .determinism import DeterminismGuard, strict_determinism
from .environment import TimeSkippingEnvironment

__all__ = [
    "CRASH_POINTS",
    "AnswersAtDeadline",
    "CrashExplorationWarning",
    "CrashPoint",
    "CrashReport",
    "DeterminismGuard",
    "ManualClock",
    "NondeterministicCall",
    "ReplayResult",
    "Replayer",
    "SlowCall",
    "SlowHTTPServer",
    "TimeSkippingEnvironment",
    "UnacceptingServer",
    "UninterruptibleCall",
    "crash_at",
    "crashed",
    "declare_dead",
    "explore_crashes",
    "history_to_json",
    "isolated_definitions",
    "load_history",
    "strict_determinism",
]

CRASH_POINTS = Worker.CRASH_POINTS


def crash_at(worker: Worker, *points: str) -> Worker:
    """Stop `worker` abruptly, as a SIGKILL would, the first time it reaches one of
    `points` (see `CRASH_POINTS`): nothing more is recorded or handed back, and
    its ``async with`` block ends at once. Then `declare_dead` it (or wait out
    its leases) and start another worker to see the work resume::

        worker = crash_at(env.worker(workflows=[...], activities=[...]), "after_effect")
        async with worker:
            handle = await env.client.start(...)
            await crashed(worker)           # the block ends here
        await declare_dead(env.client, worker)
        async with env.worker(workflows=[...], activities=[...]):
            await handle.result()           # resumed: the step ran once more
    """
    unknown = sorted(set(points) - set(CRASH_POINTS))
    if not points or unknown:
        raise ConfigurationError(
            f"crash points must be some of {list(CRASH_POINTS)}, got {list(points)}")
    worker._crash_at = frozenset(points)
    return worker


async def crashed(worker: Worker) -> str:
    """Wait until `worker` stopped at its crash point; the point's name. Inside the
    worker's ``async with`` block, the block ends at the next await after it."""
    await worker._crashed.wait()
    assert worker.crashed_at is not None
    return worker.crashed_at


async def declare_dead(client: Client, worker: Worker) -> int:
    """Expire a crashed (or otherwise gone) worker's leases now, so that other
    workers take its runs and attempts at once: what waiting `lease_seconds`
    would do. Returns how many leases were expired."""
    return await client.store.expire_leases(worker.worker_id, client.clock.now())

@dataclass(frozen=True)
class ReplayResult:
    """What a replay went through: the run as history recorded it."""

    workflow_type: str
    status: str  # the history's run status: running, completed, failed, ...
    ops: int  # ops the code asked for, each found in history
    deliveries: int  # signals and updates delivered again where they were recorded
    finished: bool  # the code returned (False: it waits where the history ends)


class Replayer:
    """Replays recorded histories against the current code, with no storage.

    ``await Replayer(workflows=[order]).replay(history)`` re-runs the workflow
    as a worker replays a run after a restart, on the history alone (from
    ``await handle.history()``, its JSON export, or a file). Where the code
    asks for a different op than history recorded, or for one past the end of
    a closed history, or returns while history has ops it never asked for, it
    raises `NonDeterminismDetected` naming the first diverging op: the error a
    deploy of this code would park running instances with. Replaying stored
    histories in CI guards deploys (see docs/interaction.md).
    """

    def __init__(
        self,
        workflows: Sequence[Any],
        *,
        activities: Sequence[Any] = (),
        converter: PayloadConverter | None = None,
        limits: Limits | None = None,
    ) -> None:
        if not workflows:
            raise ConfigurationError("a Replayer needs the workflows whose histories it replays")
        self.registry = Registry.of(workflows, activities)
        self.converter = converter or JSONConverter()
        self.limits = limits or Limits()

    async def replay(self, history: HistoryLike) -> ReplayResult:
        """Replay one run's history; raises `NonDeterminismDetected` on divergence."""
        events = load_history(history)
        records = records_from_history(events)
        run = records.run
        defn = self.registry.workflows.get(run.workflow_type)
        if defn is None:
            raise ConfigurationError(
                f"the history is of workflow type {run.workflow_type!r}, which this Replayer "
                f"was not given (it has: {', '.join(sorted(self.registry.workflows)) or 'none'})"
            )
        outcome = await replay_run(
            defn, run, records.ops, records.inbox,
            worker=NoStorage(set(self.registry.activities)), converter=self.converter,
            limits=self.limits, clock=VirtualClock(run.closed_at or run.started_at),
            strict=True,
        )
        ctx = outcome.ctx
        if isinstance(ctx.fatal, NonDeterminismDetected):
            raise ctx.fatal
        if ctx.fatal is not None:
            raise NonDeterminismDetected(
                f"replaying {run.workflow_type} failed: {ctx.fatal!r}") from ctx.fatal
        seen = ctx.asked
        closed = outcome.committer.closed_with
        if outcome.finished and closed is not None and not run.is_open:
            if closed.needs_review and closed.failure is not None:  # the engine's own check
                missing = [op for op_id, op in records.ops.items() if op_id not in seen]
                if not missing:
                    raise NonDeterminismDetected(closed.failure.message or "non-determinism")
            elif records.closed_by_code and closed.status != run.status:
                raise NonDeterminismDetected(
                    f"workflow {run.workflow_type}: the code ended {closed.status}, but "
                    f"history recorded {records.close_type}: the code changed in a way that "
                    "does not replay"
                )
            missing = [op for op_id, op in records.ops.items() if op_id not in seen]
            if missing:
                first = min(missing, key=_op_order)
                raise NonDeterminismDetected(
                    f"workflow {run.workflow_type}: history recorded {first.kind} "
                    f"{first.name!r} at {first.op_id}, which the code never asked for: the "
                    "code changed in a way that does not replay"
                )
        elif records.closed_by_code and not outcome.finished:
            where = ", ".join(f["op_id"] for f in outcome.blocked_at) or "a non-durable await"
            raise NonDeterminismDetected(
                f"workflow {run.workflow_type}: history recorded {records.close_type}, but the "
                f"replayed code is still waiting (at {where}): the code changed in a way that "
                "does not replay"
            )
        return ReplayResult(run.workflow_type, str(run.status), len(seen & records.ops.keys()),
                            ctx.parking.deliveries,
                            outcome.finished)


def _op_order(op: OpRecord) -> tuple[list[str], int]:
    path, _, seq = op.op_id.rpartition(":")
    return path.split("."), int(seq) if seq.isdigit() else 0


from .crashes import (  # noqa: E402  (uses the above)
    CrashExplorationWarning,
    CrashPoint,
    CrashReport,
    explore_crashes,
)
