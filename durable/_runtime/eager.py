"""Eager starts: a worker takes a run of its process's start in the start's own
transaction, instead of claiming it after the start woke it.

Why (issue 26): a client that awaits each start (an HTTP handler, a loop of
``await client.start``) woke the worker once per run, and the worker's claim
of that one run was a transaction of its own (the fair share's counts, the
queue's limits, the claiming UPDATE) plus a pass of its claim loop: 10-15
µs of the database thread per step of a ten-step workflow, ~5 % of its CPU
(docs/benchmarks.md). Temporal calls the same idea "eager workflow start";
DBOS runs every workflow in the process that starts it.

A worker takes a start (`EagerStarts.offer`) only where its claim would have
taken the run at once, and in no other order:

- the start is for its namespace, task queue and one of its workflow types,
  with no concurrency key (a key's slots are counted by a claim);
- it has a free slot that neither a running claim nor another eager start
  holds (`ClaimLoop.claiming`, `reserved`), and it is serving (not stopping,
  not in an outage, no claim outcome to clear up first);
- it overtakes no ready run that its claim would take first (by priority,
  then age): where its last claim left ready runs behind or a wake-up (or
  the watchdog's poke) is still to be claimed on (`Trigger.pending`), it
  takes the start only if a slot stays free beyond all that its next claim
  may take (`ClaimLoop.batch`); where the queue's limits held runs back
  (`ClaimLoop.held`), it takes none;
- in the transaction, the queue has no limits (`durable.store.runs.may_take`:
  ``max_running``, rates and per-key slots are a claim's to honour).

Across processes it changes nothing that a claim would not: a start in this
process was claimed by this process's worker first anyway (its wake-up is
local; on PostgreSQL it is addressed here). PostgreSQL's start stays one
statement, the take in it (`durable.store.start_statement.start_in_one`). A worker
built with ``eager_starts=False`` takes none.

The run is inserted owned by the worker, epoch 1, with the builds and
capabilities a claim records; the worker starts it when the start returns
(`settle`). A start that raised may have committed a run it owns: the next
claim hands such runs back first (`RunClaims.failed`, `release_strays`), as
after a claim whose outcome was lost.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any, Protocol

from ..store.records import ClaimedRun, StartRequest
from ..store.runs import Taker
from .claiming import ClaimLoop


class _Failed(Protocol):
    failed: bool


class TakingWorker(Protocol):
    """What eager starts need of their worker (`durable.worker.Worker`)."""

    worker_id: str
    lease_seconds: float
    build_id: str | None
    capabilities: tuple[str, ...]
    namespace: str
    task_queue: str

    @property
    def workflows(self) -> Collection[str]: ...
    @property
    def runs(self) -> ClaimLoop[Any]: ...
    @property
    def run_claims(self) -> _Failed: ...
    @property
    def serving(self) -> bool: ...
    def run_room(self) -> int: ...
    def start_taken(self, taken: ClaimedRun) -> None: ...


class EagerStarts:
    """One worker's takes of its process's starts (`durable.store.Store.takers`)."""

    def __init__(self, worker: TakingWorker, enabled: bool) -> None:
        self.worker = worker
        self.enabled = enabled
        #: slots held for starts under way (the claim loop's room leaves them out)
        self.reserved = 0
        #: the runs of those starts: a claim's hand-back of strays spares them
        self.in_flight: set[str] = set()
        #: runs taken so far (`worker.eager.taken`, for tests and operators)
        self.taken = 0
        #: the thread of the worker's event loop: it takes only starts made there
        #: (it starts the run in its task group at once, `settle`)
        self.thread = threading.get_ident()
        self._taker = Taker(worker.worker_id, worker.lease_seconds, worker.build_id,
                            worker.capabilities)

    def offer(self, request: StartRequest, run_id: str) -> Taker | None:
        """This worker's `Taker` for the start, its slot reserved; None when it
        does not take it (module docstring)."""
        worker = self.worker
        runs = worker.runs
        if threading.get_ident() != self.thread:
            return None  # a start from another thread (its own loop): claimed as before
        if not self.enabled or not worker.serving or runs.ended or (
                request.workflow_type not in worker.workflows
                or request.namespace != worker.namespace
                or request.task_queue != worker.task_queue
                or request.concurrency_key is not None):
            return None
        if runs.held or worker.run_claims.failed:
            return None  # the queue's limits decide, or a claim must be cleared up first
        free = worker.run_room() - runs.claiming
        if free <= 0 or ((runs.left or runs.trigger.pending) and free - 1 < runs.batch):
            return None  # ready work may wait for the slot: the claim takes it first
        self.reserved += 1
        self.in_flight.add(run_id)
        return self._taker

    def settle(self, run_id: str, taken: ClaimedRun | None, failed: bool) -> None:
        """The start ended: start the run it took; after a failure, have the next
        claim hand back what it may have committed (module docstring)."""
        self.reserved -= 1
        self.in_flight.discard(run_id)
        worker = self.worker
        if taken is not None:
            self.taken += 1
            worker.start_taken(taken)
        elif failed:
            worker.run_claims.failed = True
            worker.runs.trigger.set()
