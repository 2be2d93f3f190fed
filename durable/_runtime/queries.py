"""Queries of runs that no live worker holds: load, replay read-only, answer, drop.

A query goes to the run's owner when it has one (its executor answers at the
next scheduling point, from the state in memory). A run with no live owner (a
closed run, or an open one whose worker is gone) is answered by any worker
that has its workflow type on the run's task queue: it takes the request
(one worker only), loads the run's records, replays them without recording
anything (`durable._runtime.replay`), answers from the state reached and
drops the replay. The worker runs this loop beside its claim loops.

A request whose taker is gone before it answered (crashed: its registration
lapsed; or stopped) is offered again, here and to the run's owner once one
claims it; the first answer counts, and the gone taker's late one is refused.
A crashed taker's lapse is an instant no commit announces: each answering
worker's read also says when the first other live taker's registration runs
out (`Store.queries_due`), and the loop looks again just after it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc

from .._registry import WorkflowDefn
from ..failure import leaf_exceptions
from ..store.records import ClientRequest
from .context import LIVE_ADVICE
from .inbox import answer_query
from .race import first_of
from .replay import replay_run
from .serving import ServingWorker

if TYPE_CHECKING:
    pass

#: How long one replay may take to answer a query before the answer says so.
REPLAY_TIMEOUT = 30.0
#: Requests older than this are deleted (their callers gave up long ago) ...
REQUEST_RETENTION = 3600.0
#: ... by each worker's query loop, this often.
PURGE_EVERY = 600.0
#: Without a wake-up, the loop looks for queries every this many poll intervals.
FALLBACK_POLLS = 5
#: Seconds after a taker's registration lapses that the loop looks again: it is
#: live up to that instant itself (``expires_at >= now``).
LAPSE_MARGIN = 0.001


class QueryWorker(ServingWorker, Protocol):
    """What answering queries of idle runs needs of its worker."""

    @property
    def workflows(self) -> Mapping[str, WorkflowDefn]:
        """The workflow types this worker runs, by name."""

    @property
    def build_id(self) -> str | None:
        """The worker's build (named when its code cannot replay a run)."""


class IdleQueries:
    """The worker's loop that answers queries of runs no live worker holds."""

    def __init__(self, worker: QueryWorker) -> None:
        self.worker = worker
        self._event = anyio.Event()

    def trigger(self) -> None:
        self._event.set()

    async def run(self) -> None:
        """Take queries of idle runs and answer each in a task of its own. A
        storage error is raised as itself (the worker retries the loop)."""
        try:
            async with anyio.create_task_group() as tg:
                await self._take(tg)
        except BaseExceptionGroup as group:  # only _take raises: _answer never does
            leaves = leaf_exceptions(group)
            if len(leaves) == 1:
                raise leaves[0] from None
            raise

    async def _take(self, tg: anyio.abc.TaskGroup) -> None:
        worker = self.worker
        types = tuple(sorted(worker.workflows))
        clock = worker.run_setup.clock
        purged_at = clock.now()
        while True:  # a look at once: queries may wait from before this worker started
            now = clock.now()
            if now - purged_at > PURGE_EVERY:
                purged_at = now
                await worker.store.purge_requests(now - REQUEST_RETENTION)
            waiting, lapse = await worker.store.queries_due(  # a read: most find nothing
                worker.namespace, worker.task_queue, types, 20, now, worker.worker_id)
            if waiting:
                for request in await worker.store.take_requests(waiting, worker.worker_id, now):
                    tg.start_soon(self._answer, request)
            # woken by a request's wake-up (or another process's commit), or just
            # after the registration of another worker that took a query lapses
            # (it died before answering: its query is offered again then, and no
            # commit says so); the slow fallback only covers a wake-up that got lost
            await self._wait(worker.poll_interval * FALLBACK_POLLS, lapse)

    async def _wait(self, fallback: float, lapse: float | None) -> None:
        """Until a wake-up (`trigger`), `fallback` seconds, or just after `lapse`
        on the worker's clock (a wait for what should not happen while all is
        well: a virtual clock does not skip ahead to it)."""
        if lapse is None:
            with anyio.move_on_after(fallback):
                await self._event.wait()
        else:
            clock = self.worker.run_setup.clock
            await first_of(self._event.wait, functools.partial(anyio.sleep, fallback),
                           functools.partial(clock.sleep_until, lapse + LAPSE_MARGIN,
                                             background=True))
        self._event = anyio.Event()

    async def _answer(self, request: ClientRequest) -> None:
        worker = self.worker
        answer: dict[str, Any]
        try:
            with anyio.fail_after(REPLAY_TIMEOUT):
                answer = await self._replay_and_ask(request)
        except TimeoutError:
            answer = {"error": {"message": f"replaying run {request.run_id} to answer query "
                                           f"{request.name!r} took over {REPLAY_TIMEOUT:g} s"}}
        except Exception as exc:
            worker.log.warning("query_replay_failed", run_id=request.run_id, error=repr(exc))
            answer = {"error": {"message": f"the run could not be replayed to answer the "
                                           f"query: {exc}"}}
        try:
            await worker.store.answer_request(request.request_id, answer,
                                              worker.run_setup.clock.now(), worker.worker_id)
        except Exception as exc:  # the caller times out and says so
            worker.log.warning("request_answer_failed", request_id=request.request_id,
                               error=repr(exc))

    async def _replay_and_ask(self, request: ClientRequest) -> dict[str, Any]:
        worker = self.worker
        loaded = await worker.store.load_for_replay(request.run_id)
        if loaded is None:
            return {"error": {"message": f"run {request.run_id} no longer exists"}}
        run, ops, inbox = loaded
        defn = worker.workflows[run.workflow_type]

        async def ask(ctx: Any) -> dict[str, Any]:
            return await answer_query(ctx, request.name, request.input)

        setup = worker.run_setup
        outcome = await replay_run(defn, run, ops, inbox, worker=setup.worker,
                                   converter=setup.converter, limits=setup.limits, then=ask)
        if outcome.ctx.fatal is not None:
            # the live executor's advice ("marked for review; deploy the old
            # code") is not true of a query: nothing was marked, and a worker
            # of a build that replays the run answers it
            divergence = str(outcome.ctx.fatal).split(LIVE_ADVICE, 1)[0].rstrip(". ")
            build = f" (build {worker.build_id})" if worker.build_id is not None else ""
            return {"error": {"message": f"the run does not replay with this worker's code{build}"
                                         f", so the query cannot be answered: {divergence}. A "
                                         "worker of a build that replays it (the old one, or a "
                                         "patched one) answers queries; nothing was recorded"}}
        answer: dict[str, Any] = outcome.answer
        return answer
