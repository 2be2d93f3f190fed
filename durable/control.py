"""How a `Client` reaches workflows: through storage (embedded) or over HTTP (remote).

`Client` and `WorkflowHandle` hold everything users see: validation, payload
encoding, following continue-as-new, typed errors. A *control plane* only
carries their requests to where the runs are. The embedded one runs the
store's domain transactions in this process; the remote one
(`durable.http`) sends the same requests to a `durable serve` control plane.
Because both sit behind this one interface, a client has the same methods,
return types and errors whichever way it is connected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ._log import get_logger
from ._statuses import is_terminal
from .errors import WorkflowNotFound
from .store.records import REVIEW_STATUSES, HistoryEvent, StartRequest, StartResult

__all__ = ["ControlPlane", "Page", "RunState"]

_LOG = get_logger("durable.client")


@dataclass(frozen=True)
class RunState:
    """What `WorkflowHandle.result()` needs to know about one run.

    `status` is ours as describe() shows it (`durable._statuses`): an open run
    marked for review is ``needs_review`` or ``unknown``, not its stored
    ``running``, whichever plane read it (the remote one reads the result
    route's ``durable_status``). Open is every status that is not terminal:
    the review statuses too (the run goes on once retried after review), and
    a status this engine does not know (a newer server's open run), so that
    no client takes a run it must wait for for a finished one."""

    run_id: str
    status: str
    result: str | None = None  # the encoded result, when completed
    failure: dict[str, Any] | None = None
    continued_run_id: str | None = None
    #: why a closed run closed as describe() says it (``closed_reason``): for
    #: a timed-out run which deadline (``run_timeout``, ``execution_timeout``),
    #: for a cancelled or terminated one the reason given; None while open
    closed_reason: str | None = None

    @property
    def is_open(self) -> bool:
        return not is_terminal(self.status)

    @property
    def in_review(self) -> bool:
        """Open and waiting for a person (needs_review, unknown)."""
        return self.status in REVIEW_STATUSES


def say_review_wait(workflow_id: str, state: RunState, told: set[tuple[str, str]]) -> None:
    """Say why `WorkflowHandle.result()` goes on waiting for a run in review:
    it is open (a person retries it after a fix, or closes it), so the wait is
    right, but silent it looks like a hang. Once per call (`told`) for each
    run and status, embedded or remote alike (both read the status as
    describe() shows it)."""
    if not state.in_review or (state.run_id, state.status) in told:
        return
    told.add((state.run_id, state.status))
    hint = f"durable retry-after-review {workflow_id}" + (
        " --units rerun|confirm" if state.status == "unknown" else "")
    _LOG.warning("result_waits_for_review", workflow_id=workflow_id, run_id=state.run_id,
                 status=state.status,
                 hint=f"the run waits for a person: describe() says why; {hint} (or "
                      "handle.retry_after_review()) lets it go on, cancel or terminate "
                      "closes it; result() waits until then")


@dataclass(frozen=True)
class Page:
    """One page of summaries (runs newest first, schedules by id); `next_cursor`
    is None on the last."""

    items: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: str | None = None


class ControlPlane(Protocol):
    """The requests a client makes; every method acts in the plane's namespace.

    Methods raise the same `durable` errors whichever plane carries them:
    `WorkflowNotFound`, `WorkflowAlreadyStarted`, `RunNotCurrent`,
    `RunAlreadyClosed`, `CapabilityUnsupported`, `StorageUnavailable`.
    """

    namespace: str

    async def start(self, request: StartRequest) -> StartResult:
        """Record a start (the request's namespace is this plane's); the run id."""
        ...

    async def run_state(self, workflow_id: str, run_id: str | None) -> RunState | None:
        """The run (the current one when `run_id` is None), or None if unknown."""
        ...

    async def not_found(self, workflow_id: str, run_id: str | None) -> WorkflowNotFound:
        """The error to raise for an id with no run: it says when retention
        may have deleted the run (`durable.store.retention.missing_note`)."""
        ...

    async def await_run(self, workflow_id: str, run_id: str, wait: float, *,
                        until_review: bool = False) -> RunState:
        """The run's state once it has closed, or after `wait` seconds if it
        is still open (`wait`); with `until_review`, also as soon as it is
        seen waiting for a person, so that a caller can say so at once rather
        than after a silent wait. Raises `WorkflowNotFound` for an unknown run."""
        ...

    async def describe(self, workflow_id: str, run_id: str | None) -> dict[str, Any] | None:
        """The instance and the run as `WorkflowHandle.describe()` documents it."""
        ...

    async def history(
        self, workflow_id: str, run_id: str | None, *, after_sequence: int = 0,
        limit: int | None = None,
    ) -> list[HistoryEvent]:
        """The run's events with a sequence above `after_sequence`, oldest first."""
        ...

    async def request_cancellation(
        self, workflow_id: str, run_id: str | None, *, reason: str, cleanup_timeout: float,
        requester: dict[str, Any] | None, source: str,
    ) -> tuple[bool, dict[str, Any]]:
        """Record a cooperative request once: (accepted, the request as stored)."""
        ...

    async def close_run(self, workflow_id: str, run_id: str | None, *, status: str,
                        reason: str) -> None:
        """Close the run now as `cancelled` or `terminated` (no-op when closed)."""
        ...

    async def cancellation_cascade(self, workflow_id: str, run_id: str | None) -> dict[str, Any]:
        """The cancellation tree rooted at the run, read from records alone."""
        ...

    async def clear_review(self, workflow_id: str, *, units: str | None = None) -> bool:
        """Let a run marked for review be replayed; False if it was not marked."""
        ...

    async def reset(self, workflow_id: str, run_id: str | None, *, to_op: str,
                    reason: str) -> dict[str, Any]:
        """Continue the run as a new run from `to_op`, keeping the results
        recorded before it; what was done (the new run's id, ops kept)."""
        ...

    async def list_runs(self, *, status: str | None, workflow_type: str | None, limit: int,
                        cursor: str | None, query: str | None = None) -> Page:
        """Run summaries, newest first, one page at a time; `query` is the
        workflow list's (`durable._visibility_query.run_filter`): raises
        `InvalidVisibilityQuery` for one that does not fit."""
        ...

    async def repair_pass(self) -> dict[str, int]:
        """Enforce every deadline due now, once; counts by kind."""
        ...

    async def overdue(self) -> dict[str, Any]:
        """The deadlines passed and not enforced yet (`durable.store.deadlines.overdue`)."""
        ...

    async def signal(self, workflow_id: str, run_id: str | None, name: str, args: str, *,
                     sender: dict[str, Any] | None = None,
                     request_id: str | None = None) -> bool:
        """Record a signal for the run (the current one when `run_id` is None);
        `args` is the encoded argument list, `sender` who sent it
        (``{"requester": {...}, "source": "..."}``, recorded with it).
        `request_id` is the sender's idempotency key: a retry with the same key
        is recorded once. True when recorded now, False for such a retry.
        Raises `WorkflowNotFound`, `RunAlreadyClosed` (nothing recorded),
        `ConfigurationError` (the key names another message of the run)."""
        ...

    async def signal_with_start(self, request: StartRequest, name: str,
                                args: str) -> StartResult:
        """Signal the instance's open run, or start one (`request`) and signal it."""
        ...

    async def query(self, workflow_id: str, run_id: str | None, name: str, args: str,
                    wait: float) -> str:
        """Ask a query; the encoded result. Raises `QueryFailed` (the handler
        raised or tried to record, no such handler, or no worker answered
        within `wait` seconds: the request is then withdrawn), `WorkflowNotFound`."""
        ...

    async def update(self, workflow_id: str, run_id: str | None, name: str, args: str,
                     update_id: str, wait: float | None, *,
                     sender: dict[str, Any] | None = None) -> str:
        """Ask an update and wait (at most `wait` seconds, None: as long as it
        takes) for its outcome; the encoded result. The same `update_id` again
        returns the recorded outcome (the update runs once). `sender` (who
        asks) is recorded with it once accepted.
        Raises `UpdateRejected` (nothing recorded), `UpdateFailed`,
        `RunAlreadyClosed`, `WorkflowNotFound`."""
        ...

    async def update_accepted(self, workflow_id: str, run_id: str | None, name: str,
                              args: str, update_id: str, wait: float | None, *,
                              sender: dict[str, Any] | None = None) -> str | None:
        """As `update`, but wait only until the update is accepted (validated
        by the worker that holds the run and recorded, ``UpdateAccepted``):
        the encoded result when it has completed by then, else None (it goes
        on; `update` with the same `update_id` waits for its result). Raises
        as `update` does; `UpdateFailed` when no worker accepted it within
        `wait` (nothing recorded)."""
        ...

    async def registered_types(self) -> set[str]:
        """Workflow types that live workers have registered."""
        ...

    def for_namespace(self, namespace: str) -> ControlPlane:
        """The same connection acting in `namespace` (a view: closing it
        releases nothing; the plane that opened the connection owns it)."""
        ...

    async def close(self) -> None:
        """Release the connection(s) (a view from `for_namespace`: nothing)."""
        ...
