"""The upgrade gate: a worker takes a run another build advanced only if its
own code replays the run's history.

A run records the build that started it and the build that last took it
(`durable.store.claims`). When a worker with a ``build_id`` claims a run
whose last build is another one (a deploy happened while the run was in
flight), it first replays the run's history against its own code,
read-only: nothing executes, nothing is recorded (`replay.replay_run` with
a scratch committer). Only when the replay does not diverge does the worker
record itself as the run's build and execute it. When it diverges the
worker hands the run back untouched and records which build cannot take it
and the first diverging op (``describe()["blocked"]``); workers of that
build no longer claim it, so a worker of a build that replays it (the old
one, or a patched one) continues it. A deploy never fails a run and never
strands one silently.

Why before, not during: without the gate the new code meets the old history
inside a live execution, and the run is failed for review
(`NonDeterminismDetected`); an operator learns of it after the fact.

`replay_check` is the check itself; `durable check-upgrade` runs it over
every open run without claiming any.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._registry import WorkflowDefn
from ..converter import PayloadConverter
from ..options import Limits
from ..store.records import ClaimedRun, InboxItem, OpRecord, RunRecord, refusing
from .context import LIVE_ADVICE
from .replay import NoStorage, replay_run
from .serving import ServingWorker

if TYPE_CHECKING:
    from ..store import Store

#: A replay check that has not settled after this long counts as diverging
#: (the run is handed back, shown blocked with this reason; never failed).
CHECK_TIMEOUT = 60.0
#: Check results remembered per worker (a worker has one build): a run handed
#: back and claimed again with the same history is not replayed twice.
CACHE_SIZE = 10_000



async def replay_check(
    defn: WorkflowDefn,
    run: RunRecord,
    ops: dict[str, OpRecord],
    inbox: list[InboxItem],
    *,
    activity_names: set[str],
    converter: PayloadConverter,
    limits: Limits,
) -> str | None:
    """Replay an open run's history against `defn`'s code, recording nothing:
    None when it replays, else the first diverging op as the Replayer names it.

    Going past the end of the history is not a divergence (that is where the
    run continues); asking for a different op than history recorded at the
    same place, or returning without asking again for recorded ops, is.
    """
    try:
        with anyio.fail_after(CHECK_TIMEOUT):
            outcome = await replay_run(defn, run, ops, inbox,
                                       worker=NoStorage(activity_names),
                                       converter=converter, limits=limits)
    except TimeoutError:
        return (f"the replay check of run {run.run_id} did not settle within "
                f"{CHECK_TIMEOUT:g} s")
    fatal = outcome.ctx.fatal
    if fatal is not None:
        return str(fatal).split(LIVE_ADVICE, 1)[0]
    closed = outcome.committer.closed_with
    if closed is not None and closed.needs_review:
        message = closed.failure.message if closed.failure is not None else None
        return (message or "the code closed the run without replaying its history").split(
            LIVE_ADVICE, 1)[0]
    return None


@dataclass
class UpgradeReport:
    """What `check_open_runs` found: how many open runs it replayed, and those
    the code cannot take (run id, workflow id and type, last build, divergence)."""

    checked: int = 0
    cannot_take: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self, build_id: str | None) -> dict[str, Any]:
        return {"build_id": build_id, "checked": self.checked, "ok": not self.cannot_take,
                "cannot_take": self.cannot_take, "seconds": round(self.seconds, 3)}


async def check_open_runs(
    store: Store, namespace: str, task_queue: str, workflows: Mapping[str, WorkflowDefn], *,
    activity_names: set[str], converter: PayloadConverter, limits: Limits,
) -> UpgradeReport:
    """Replay every open run of a task queue against `workflows` (read-only, no
    claim): `durable check-upgrade`, a deploy pipeline's gate. A run of a
    workflow type the code does not define cannot be taken either."""
    report = UpgradeReport()
    began = time.perf_counter()
    after = ""
    while True:
        page = await store.open_runs(namespace, task_queue, after)
        if not page:
            break
        after = page[-1]["run_id"]
        for row in page:
            defn = workflows.get(row["workflow_type"])
            divergence: str | None
            if defn is None:
                divergence = (f"workflow type {row['workflow_type']!r} is not defined by this "
                              "code")
            else:
                loaded = await store.load_for_replay(row["run_id"])
                if loaded is None or not loaded[0].is_open:
                    continue  # closed (or deleted) meanwhile
                run, ops, inbox = loaded
                divergence = await replay_check(defn, run, ops, inbox,
                                                activity_names=activity_names,
                                                converter=converter, limits=limits)
            report.checked += 1
            if divergence is not None:
                report.cannot_take.append({
                    "workflow_id": row["workflow_id"], "run_id": row["run_id"],
                    "workflow_type": row["workflow_type"], "last_build": row["last_build"],
                    "divergence": divergence})
    report.seconds = time.perf_counter() - began
    return report


class GateWorker(ServingWorker, Protocol):
    """What the gate needs of its worker."""

    @property
    def build_id(self) -> str | None: ...
    @property
    def workflows(self) -> Mapping[str, WorkflowDefn]: ...

    async def known_activity_names(self) -> set[str]: ...


class UpgradeGate:
    """One worker's gate: which claimed runs need a check, and the check."""

    def __init__(self, worker: GateWorker) -> None:
        self.worker = worker
        #: runs claimed and being checked (they count against the worker's room
        #: and their leases are renewed like those of executed runs)
        self.checking: set[str] = set()
        #: checks run and runs handed back, and the seconds replays took
        self.checks = 0
        self.blocked = 0
        self.check_seconds = 0.0
        self._cache: OrderedDict[tuple[str, int, int, int], str | None] = OrderedDict()

    def needs_check(self, claimed: ClaimedRun) -> bool:
        """A worker with a build takes a run another build (or a worker without
        one) took before only after a replay check; a run's first claim (epoch
        1) recorded this build already, unless the run came with history
        another build recorded (a reset's run keeps its old run's last build)."""
        build = self.worker.build_id
        run = claimed.run
        return (build is not None and run.last_build != build
                and (run.epoch > 1 or run.last_build is not None))

    async def admit(self, claimed: ClaimedRun, start: Callable[[ClaimedRun], None],
                    hand_back: Callable[[str], None]) -> None:
        """Check a claimed run; start it (`start`), or hand it back blocked. A
        storage error or a stop hands it back as it is (`hand_back`)."""
        worker, run = self.worker, claimed.run
        build = worker.build_id
        assert build is not None
        self.checking.add(run.run_id)
        done = False
        try:
            divergence = await self._check(claimed)
            if divergence is None:
                if await worker.store.take_for_build(run.run_id, run.epoch, build):
                    run.last_build, run.blocked_build, run.blocked_divergence = build, None, None
                    run.blocked_builds = None
                    run.started_build = run.started_build or build
                    done = True
                    start(claimed)
                return
            refused = refusing(run.blocked_build, run.blocked_builds)
            done = await worker.store.block_run(run.run_id, run.epoch, worker.worker_id, build,
                                                divergence, refused)
            if done:
                self.blocked += 1
                worker.log.warning("run_blocked", run_id=run.run_id,
                                   workflow_id=run.workflow_id, build_id=build,
                                   last_build=run.last_build, divergence=divergence)
        except Exception as exc:
            worker.log.warning("upgrade_check_failed", run_id=run.run_id, error=repr(exc))
        finally:
            self.checking.discard(run.run_id)
            if not done:
                hand_back(run.run_id)

    async def _check(self, claimed: ClaimedRun) -> str | None:
        run, ops = claimed.run, claimed.ops
        key = (run.run_id, len(ops), sum(1 for op in ops.values() if op.closed), run.inbox_seq)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        worker = self.worker
        loaded = await worker.store.load_for_replay(run.run_id)
        if loaded is None:
            return None  # deleted meanwhile: the executor finds out
        _, ops, inbox = loaded
        setup = worker.run_setup
        began = time.perf_counter()
        divergence = await replay_check(
            worker.workflows[run.workflow_type], run, ops, inbox,
            activity_names=await worker.known_activity_names(), converter=setup.converter,
            limits=setup.limits)
        self.checks += 1
        self.check_seconds += time.perf_counter() - began
        self._cache[key] = divergence
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return divergence
