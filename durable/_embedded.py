"""The embedded control plane: a client's requests as transactions on local storage.

This is what `durable.connect("sqlite:///...")` or ``"postgresql://..."``
gives a client: every request is one domain transaction on the storage the
client opened, and waiting for a result listens to the driver's wake-ups
(in-process at once, from other processes through the driver's watch).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import math
from collections.abc import Sequence
from typing import Any

from ._registry import WorkflowDefn, arity_described
from ._visibility_query import run_filter
from .clock import Clock, held
from .control import Page, RunState
from .errors import (
    ConfigurationError,
    FailureCarrying,
    QueryFailed,
    UpdateFailed,
    UpdateRejected,
    WorkflowNotFound,
)
from .failure import Failure
from .store import Store, retention
from .store.interaction import RequestTicket
from .store.records import (
    OPEN_STATUSES,
    HistoryEvent,
    InboxItem,
    RunRecord,
    StartRequest,
    StartResult,
    refusing,
)
from .wakes import Wake


def encode_cursor(key: tuple[float, str]) -> str:
    """An opaque page cursor: the (created_at, run_id) of a page's last row."""
    return base64.urlsafe_b64encode(f"{key[0]!r}|{key[1]}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        created, run_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return float(created), run_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"cursor {cursor!r} is not one this server returned; pass the `next_cursor` "
            "of the previous page, or none for the first page"
        ) from exc


def _error(cls: type[FailureCarrying], data: dict[str, Any]) -> FailureCarrying:
    """A QueryFailed / UpdateRejected / UpdateFailed from an answer's error,
    with the handler's own error (rebuilt) as its cause."""
    failure = data.get("failure")
    err = cls(str(data.get("message") or cls.__name__), failure)
    if failure:
        err.__cause__ = Failure.from_dict(failure).to_error()
    return err


def _wait_ran_out(message: str, *, accepted: bool) -> dict[str, Any]:
    """The failure of an update whose caller stopped waiting: `accepted` says
    whether it is recorded (and goes on) or was withdrawn (nothing recorded)."""
    return {"failure_category": "timeout", "timeout_kind": "update_wait",
            "message": message, "accepted": accepted}


def _update_outcome(item: InboxItem) -> str | None:
    """An accepted update's result (None while it runs); raises its failure."""
    if item.status == "completed":
        return item.result or "null"
    if item.status == "failed":
        failure = item.failure.to_dict() if item.failure is not None else {}
        raise _error(UpdateFailed, {"message": (failure.get("message") or
                                                f"update {item.name!r} failed"),
                                    "failure": failure})
    return None


def _state(run: RunRecord) -> RunState:
    """The run's state, its status as shown (a run in review: needs_review or
    unknown, as describe() and the result route's ``durable_status`` say)."""
    failure = run.failure.to_dict() if run.failure is not None else None
    return RunState(run.run_id, run.listed_status, run.result, failure, run.continued_run_id,
                    run.closed_reason)


class EmbeddedControl:
    """A `ControlPlane` over storage opened in this process."""

    def __init__(self, store: Store, namespace: str, clock: Clock, *,
                 owns_driver: bool = True) -> None:
        self.store = store
        self.namespace = namespace
        self.clock = clock
        self._owns_driver = owns_driver

    def for_namespace(self, namespace: str) -> EmbeddedControl:
        return EmbeddedControl(self.store, namespace, self.clock, owns_driver=False)

    async def start(self, request: StartRequest) -> StartResult:
        return await self.store.start_workflow(request, self.clock.now())

    async def _run(self, workflow_id: str, run_id: str | None) -> RunRecord | None:
        return await self.store.get_run(self.namespace, workflow_id, run_id)

    async def run_state(self, workflow_id: str, run_id: str | None) -> RunState | None:
        run = await self._run(workflow_id, run_id)
        return None if run is None else _state(run)

    async def await_run(self, workflow_id: str, run_id: str, wait: float, *,
                        until_review: bool = False) -> RunState:
        async def closed() -> RunState | None:
            run = await self._run(workflow_id, run_id)
            if run is None:
                raise await self.not_found(workflow_id, run_id)
            state = _state(run)
            return state if not state.is_open or (until_review and state.in_review) else None

        state = await self.store.hub.until({Wake.run(run_id).key}, closed, wait)
        if state is not None:
            return state
        run = await self._run(workflow_id, run_id)
        if run is None:
            raise await self.not_found(workflow_id, run_id)
        return _state(run)

    async def not_found(self, workflow_id: str, run_id: str | None) -> WorkflowNotFound:
        """The error for an id with no run here, saying when retention may have
        (or, for a schedule's run, did) delete it: a pruned run's id is not
        told apart from a mistyped one otherwise."""
        note = await self.store.driver.run(
            lambda tx: retention.missing_note(self.namespace, workflow_id), write=False)
        message = _not_found(workflow_id, run_id, self.namespace)
        return WorkflowNotFound(message if note is None else f"{message}: {note}")

    async def describe(self, workflow_id: str, run_id: str | None) -> dict[str, Any] | None:
        return await self.store.describe(self.namespace, workflow_id, run_id,
                                         self.clock.now())

    async def history(
        self, workflow_id: str, run_id: str | None, *, after_sequence: int = 0,
        limit: int | None = None,
    ) -> list[HistoryEvent]:
        run = await self._run(workflow_id, run_id)
        if run is None:
            raise await self.not_found(workflow_id, run_id)
        return await self.store.history(run.run_id, after_sequence, limit)

    async def request_cancellation(
        self, workflow_id: str, run_id: str | None, *, reason: str, cleanup_timeout: float,
        requester: dict[str, Any] | None, source: str,
    ) -> tuple[bool, dict[str, Any]]:
        return await self.store.request_cancellation(
            self.namespace, workflow_id, run_id, reason, cleanup_timeout, requester, source,
            self.clock.now(),
        )

    async def close_run(self, workflow_id: str, run_id: str | None, *, status: str,
                        reason: str) -> None:
        await self.store.close_run_externally(
            self.namespace, workflow_id, run_id, status, reason, self.clock.now()
        )

    async def cancellation_cascade(self, workflow_id: str, run_id: str | None) -> dict[str, Any]:
        return await self.store.cancellation_cascade(
            self.namespace, workflow_id, run_id, self.clock.now()
        )

    async def clear_review(self, workflow_id: str, *, units: str | None = None) -> bool:
        return await self.store.clear_review(self.namespace, workflow_id, self.clock.now(),
                                             units)

    async def reset(self, workflow_id: str, run_id: str | None, *, to_op: str,
                    reason: str) -> dict[str, Any]:
        return await self.store.reset_run(self.namespace, workflow_id, run_id, to_op, reason,
                                          self.clock.now())

    async def list_runs(self, *, status: str | None, workflow_type: str | None, limit: int,
                        cursor: str | None, query: str | None = None) -> Page:
        found = run_filter(query)  # before the cursor: a bad query is the error to fix first
        before = decode_cursor(cursor) if cursor else None
        items, next_key = await self.store.list_runs(
            self.namespace, status, workflow_type, limit, before, statuses=found.statuses,
            id_contains=found.id_contains, now=self.clock.now(), matching=found.matching)
        return Page(items, encode_cursor(next_key) if next_key is not None else None)

    async def repair_pass(self) -> dict[str, int]:
        return await self.store.enforce_expired(self.namespace, self.clock.now())

    async def overdue(self) -> dict[str, Any]:
        return await self.store.overdue(self.namespace, self.clock.now())

    async def registered_types(self) -> set[str]:
        types, _ = await self.store.registered_names(self.namespace, self.clock.now())
        return types

    async def close(self) -> None:
        if self._owns_driver:
            await self.store.driver.close()

    # ---------------------------------------------------------------- interaction

    async def signal(self, workflow_id: str, run_id: str | None, name: str, args: str, *,
                     sender: dict[str, Any] | None = None,
                     request_id: str | None = None) -> bool:
        receipt = await self.store.send_signal(self.namespace, workflow_id, run_id, name, args,
                                               self.clock.now(), sender, request_id)
        return receipt.recorded

    async def signal_with_start(self, request: StartRequest, name: str,
                                args: str) -> StartResult:
        return await self.store.signal_with_start(request, name, args, self.clock.now())

    async def query(self, workflow_id: str, run_id: str | None, name: str, args: str,
                    wait: float) -> str:
        store = self.store
        ticket = await store.submit_request(self.namespace, workflow_id, run_id, "query", name,
                                            args, None, self.clock.now())
        assert ticket.request_id is not None
        request_id = ticket.request_id
        with held(self.clock, wait):  # a worker answers at once: virtual time waits for it
            answer = await store.hub.until({Wake.request(request_id).key},
                                           lambda: store.take_answer(request_id), wait,
                                           poll=0.2)
        if answer is None:
            answer = await store.withdraw_request(request_id)
            if answer is None:
                raise QueryFailed(
                    f"no worker answered query {name!r} of workflow {workflow_id!r} "
                    f"within {wait:g} s; " + await self._why_no_worker(workflow_id, ticket)
                    + " (nothing was recorded)",
                    {"failure_category": "timeout", "timeout_kind": "query_wait"},
                )
        if "error" in answer:
            raise _error(QueryFailed, answer["error"])
        result: str = answer["result"]
        return result

    async def update(self, workflow_id: str, run_id: str | None, name: str, args: str,
                     update_id: str, wait: float | None, *,
                     sender: dict[str, Any] | None = None) -> str:
        done = await self._await_update(workflow_id, run_id, name, args, update_id, wait,
                                        sender, accepted_is_enough=False)
        assert done is not None  # only a wait that accepted_is_enough ends without a result
        return done

    async def update_accepted(self, workflow_id: str, run_id: str | None, name: str,
                              args: str, update_id: str, wait: float | None, *,
                              sender: dict[str, Any] | None = None) -> str | None:
        return await self._await_update(workflow_id, run_id, name, args, update_id, wait,
                                        sender, accepted_is_enough=True)

    async def _await_update(self, workflow_id: str, run_id: str | None, name: str, args: str,
                            update_id: str, wait: float | None,
                            sender: dict[str, Any] | None, *,
                            accepted_is_enough: bool) -> str | None:
        """Submit the update (or find it by `update_id`) and wait for its result,
        or only until it is accepted (validated and recorded) when
        `accepted_is_enough`: then None while it still runs."""
        store = self.store
        ticket = await store.submit_request(self.namespace, workflow_id, run_id, "update", name,
                                            args, update_id, self.clock.now(), sender)
        if ticket.existing is not None:
            done = _update_outcome(ticket.existing)
            if done is not None or accepted_is_enough:
                return done
        limit = math.inf if wait is None else wait
        keys = {Wake.update(ticket.run_id, update_id).key}
        if ticket.request_id is not None:
            keys.add(Wake.request(ticket.request_id).key)
        accepted = False
        # a worker accepts at once: virtual time waits for that, not for the handler
        holding = contextlib.ExitStack()
        holding.enter_context(held(self.clock))

        async def outcome() -> tuple[str | None] | None:
            nonlocal accepted
            state = await store.update_state(ticket.run_id, update_id, ticket.request_id)
            if state.item is not None:
                accepted = True
                holding.close()
                done = _update_outcome(state.item)
                if done is not None or accepted_is_enough:
                    return (done,)
            elif state.answer is not None and state.answer.get("rejected"):
                raise _error(UpdateRejected, state.answer.get("error") or {})
            if state.run_status not in OPEN_STATUSES:
                raise UpdateFailed(
                    f"workflow {workflow_id!r} run {ticket.run_id} closed "
                    f"({state.run_status}) before update {name!r} "
                    f"{'completed' if state.item is not None else 'was accepted'}"
                )
            return None

        with holding:
            found = await store.hub.until(keys, outcome, limit, poll=0.2)
        if found is not None:
            return found[0]
        if not accepted and ticket.request_id is not None:
            await store.withdraw_request(ticket.request_id)
            message = (
                f"no worker accepted update {name!r} of workflow {workflow_id!r} "
                f"within {limit:g} s; " + await self._why_no_worker(workflow_id, ticket)
                + " (nothing was recorded)")
            raise UpdateFailed(message, _wait_ran_out(message, accepted=False))
        message = (
            f"update {name!r} (id {update_id!r}) was accepted but has not completed "
            f"within {limit:g} s; it goes on: call update() again with the same "
            "update_id to wait for its result")
        raise UpdateFailed(message, _wait_ran_out(message, accepted=True))


    async def _why_no_worker(self, workflow_id: str, ticket: RequestTicket) -> str:
        """Why no worker took a query or an update, as far as storage knows: the
        run is blocked (every build that tried cannot replay it: only a worker
        of a build that does can answer), or, as a question, no worker runs."""
        run = await self.store.get_run(self.namespace, workflow_id, ticket.run_id)
        if run is not None and run.is_open and run.blocked_build is not None:
            builds = refusing(run.blocked_build, run.blocked_builds)
            which = (f"build {builds[0]}" if len(builds) == 1
                     else "builds " + ", ".join(builds))
            taker = (f"build {run.last_build} (which last took it) or of a patched build"
                     if run.last_build else "a build that replays it (the old one, or a "
                     "patched one)")
            return (f"the run is blocked: {which} cannot replay it (describe()['blocked']) "
                    f"and no worker of {taker} took it")
        return (f"is a worker for workflow type {ticket.workflow_type!r} on task queue "
                f"{ticket.task_queue!r} running?")


def _not_found(workflow_id: str, run_id: str | None, namespace: str) -> str:
    run = f" run {run_id!r}" if run_id else ""
    return f"no workflow {workflow_id!r}{run} in namespace {namespace!r}"


async def check_start_arity(store: Store | None, namespace: str, clock: Clock, wf_type: str,
                            defn: WorkflowDefn | None, args: Sequence[Any]) -> None:
    """Refuse a start (or a schedule) of `wf_type` whose arguments its function
    does not take, before anything is recorded: by `defn` when the function is
    here; by name, when every live worker registering the type registered an
    arity that refuses them (each run would fail with Python's TypeError). Left
    to the run when a worker registered none (an older release), or when
    storage is remote (its control plane checks there)."""
    if defn is not None:
        if defn.arity is not None:
            defn.arity.check(f"workflow {wf_type!r}", len(args))
        return
    if store is None:
        return
    arities = [arity_described(d) for d in await store.workflow_definitions(
        namespace, wf_type, clock.now())]
    if not arities or any(a is None for a in arities):
        return
    failures: list[ConfigurationError] = []
    for arity in arities:
        assert arity is not None
        try:
            arity.check(f"workflow {wf_type!r} (as its live workers register it)", len(args))
            return
        except ConfigurationError as exc:
            failures.append(exc)
    raise failures[0]
