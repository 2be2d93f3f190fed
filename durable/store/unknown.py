"""Writes whose outcome is unknown, read back instead of sent again blind.

A connection lost while COMMIT was on the wire, or while one of PostgreSQL's
self-committing statements was (`durable.program.Stmt.autocommit`: a run's
local steps, a group of runs' steps, a claim, a start), leaves the client
not knowing whether the server committed: the driver raises
`StorageUnavailable(outcome_unknown=True)` rather than re-send it (a step
re-sent blind met its own ops; a claim re-sent took nothing and left its
runs owned by a worker that never heard of them). Here the store finds out:

- a start (`start_workflow`) reads its run back by the id fixed for all its
  attempts: there, it started; not there, it is sent again;
- a commit of local steps (`settle_commit`, the committer's `settle`)
  reads the batches' ops back (`commit.landed_steps`): those that landed are
  reported landed, the others are sent again;
- a claim is resolved by the worker, which hands back the runs storage says
  it owns but it does not run (`durable._runtime.claiming.RunClaims`).

Each is sent again at most `RESENDS` times after reading back that it did
not land; an unknown outcome that remains is raised to the caller.
"""

from __future__ import annotations

import functools

from ..driver import Driver, Program, Tx, brief
from ..errors import StorageUnavailable
from . import commit, runs, start_statement
from .records import CommitResult, StartRequest, StartResult, new_id, plus
from .writes import RunWrites

#: how often a start or a commit is sent again after reading back that it did
#: not land, before the unknown outcome is raised
RESENDS = 2


async def start_workflow(driver: Driver, request: StartRequest, now: float,
                         taker: runs.Taker | None = None,
                         run_id: str | None = None) -> StartResult:
    """`durable.store.Store.start_workflow`: the start, in one statement where the
    dialect allows (`start_statement.start_in_one`), else in a transaction; its run's
    id fixed for every attempt (`runs.reuse`). An outcome-unknown attempt is
    read back (`runs.started_run`): there, it started (its notification went
    with it, and this process is told here, as the driver would have);
    not there, it is sent again.

    Its wake-up is addressed to one process of the queue when the driver can
    choose one (`addressee`). A `taker` (a worker of this process) takes the
    run in the start's transaction or statement (`runs.Taker`); read back, a
    run its taker took is still handed to it (`runs.started_run`)."""
    run_id = run_id or new_id()
    to = await addressee(driver, request.namespace, request.task_queue, now)
    for again in range(RESENDS + 1):
        try:
            return await _start(driver, request, now, run_id, to, taker)
        except StorageUnavailable as exc:
            if not exc.outcome_unknown or again == RESENDS:
                raise
            try:
                landed = await driver.run(lambda tx: runs.started_run(run_id, taker),
                                          write=False)
            except StorageUnavailable:
                raise exc from None  # still unknown: the caller hears so
            if landed is not None:
                if landed.taken is None:  # (a taken run is announced to nobody)
                    deadline = plus(now, request.execution_timeout)
                    driver.hub.publish([runs.start_wake(request, now, deadline, to)])
                return landed
    raise AssertionError("unreachable")  # (the loop returns or raises)


async def addressee(driver: Driver, namespace: str, task_queue: str, now: float) -> str | None:
    """The process a start on this queue is addressed to, where the driver
    addresses starts (its optional ``start_addressee``: PostgreSQL); None:
    told to every process of the queue, as any other wake-up."""
    choose = getattr(driver, "start_addressee", None)
    if choose is None:
        return None
    to: str | None = await choose(namespace, task_queue, now)
    return to


async def _start(driver: Driver, request: StartRequest, now: float,
                 run_id: str, to: str | None, taker: runs.Taker | None) -> StartResult:
    if driver.dialect.writable_cte:  # one round trip (`start_statement.start_in_one`)
        started = await driver.run(
            lambda tx: start_statement.start_in_one(tx, request, run_id, now, to, taker))
        if started is not None:
            return started
    # brief: one instance's rows by key (decision (ba)); SQLite runs it on the
    # caller's thread when its loop is idle, so an awaited start needs no hop
    return await driver.run(
        brief(lambda tx: runs.start_workflow(tx, request, now, run_id, to, taker)))


async def settle_commit(driver: Driver, batches: list[RunWrites],
                        now: float) -> list[CommitResult] | None:
    """The results of a commit of these batches that failed with an unknown
    outcome: a batch that landed is reported landed, one that did not is
    committed again (read back first again if that, too, is unknown). None
    when storage cannot tell (batches other than local steps only) or cannot
    be reached: the caller keeps the unknown outcome (the run is replayed)."""
    results: list[CommitResult | None] = [None] * len(batches)
    pending = list(range(len(batches)))
    for again in range(RESENDS + 1):
        chosen = [batches[i] for i in pending]
        try:
            landed = await driver.run(functools.partial(_landed, chosen), write=False)
        except StorageUnavailable:
            return None
        if landed is None:
            return None
        for i, result in zip(pending, landed, strict=True):
            results[i] = result
        pending = [i for i in pending if results[i] is None]
        if not pending:
            return [r for r in results if r is not None]
        if again == RESENDS:
            return None
        redo = [batches[i] for i in pending]
        try:
            sent = await driver.run(functools.partial(_commit, redo, now))
        except StorageUnavailable as exc:
            if exc.outcome_unknown:
                continue  # read back again
            return None
        for i, result in zip(pending, sent, strict=True):
            results[i] = result
        return [r for r in results if r is not None]
    return None


def _landed(batches: list[RunWrites], tx: Tx) -> Program[list[CommitResult | None] | None]:
    return commit.landed_steps(batches)


def _commit(batches: list[RunWrites], now: float, tx: Tx) -> Program[list[CommitResult]]:
    return commit.commit(tx, batches, now)
