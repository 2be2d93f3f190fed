"""The remote control plane: a `Client`'s requests as HTTP calls to `durable serve`.

``durable.connect("http://host:8233", token=..., namespace=...)`` builds
``Client(control=RemoteControl(...))``: the same `Client` and
`WorkflowHandle` as an embedded connection, with the same return types and
the same error classes (rebuilt from the server's JSON errors by
`errors.error_from_wire`). httpx runs on asyncio and trio alike.

Only httpx is needed here (the ``remote`` extra), not the server's packages.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx

from .._embedded import decode_cursor
from .._log import mask_password_in, mask_url
from .._registry import workflow_defn_of
from .._visibility_query import check_text
from ..control import Page, RunState
from ..errors import (
    ConfigurationError,
    RunAlreadyClosed,
    StorageUnavailable,
    UpdateFailed,
    WorkflowNotFound,
)
from ..store.records import HistoryEvent, StartRequest, StartResult
from .errors import VERSION, VERSION_HEADER, error_from_wire
from .model import (
    LIST_PAGE_MAX,
    describe_from_wire,
    encode_token,
    event_from_wire,
    summary_from_wire,
)
from .paths import quote_segment
from .remote_queues import RemoteQueues
from .remote_schedules import RemoteRetention, RemoteSchedules
from .wire import encode_payload, record_from_wire, state_from_wire

# Longest wait one result request asks for (the server may cap it lower).
_MAX_WAIT = 30.0
# Events per history request when the caller wants all of them.
_HISTORY_PAGE = 1000


def _segment(value: str) -> str:
    return quote_segment(value)


class RemoteControl:
    """A `ControlPlane` over HTTP (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        namespace: str = "default",
        timeout: float = 30.0,
        verify: bool | str = True,
        transport: httpx.AsyncBaseTransport | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigurationError("namespace must be a non-empty string")
        self.base_url = base_url.rstrip("/")
        # what messages and repr show: the URL without its password
        self.shown_url = mask_url(self.base_url)
        self.namespace = namespace
        self.timeout = timeout
        self._owns_http = http is None
        if http is None:
            headers = {VERSION_HEADER: VERSION, "Accept": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            http = httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                     timeout=httpx.Timeout(timeout), verify=verify,
                                     transport=transport)
        self._http = http

    def __repr__(self) -> str:  # never shows the token
        return f"RemoteControl({self.shown_url!r}, namespace={self.namespace!r})"

    @property
    def schedules(self) -> RemoteSchedules:
        """This namespace's schedules (`durable.schedules.ScheduleControl`)."""
        return RemoteSchedules(self)

    @property
    def queues(self) -> RemoteQueues:
        """Workers and task queues (`durable._queues.QueueControl`)."""
        return RemoteQueues(self)

    @property
    def retention(self) -> RemoteRetention:
        """Retention settings and pruning (`durable._retention.RetentionControl`)."""
        return RemoteRetention(self)

    def for_namespace(self, namespace: str) -> RemoteControl:
        return RemoteControl(self.base_url, namespace=namespace, timeout=self.timeout,
                             http=self._http)

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # ------------------------------------------------------------ plumbing

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: dict[str, Any] | None = None,
                    read_timeout: float | None = None) -> tuple[int, Any]:
        headers = {"X-Namespace": self.namespace}
        content = None
        if body is not None:
            content = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        timeout = httpx.Timeout(self.timeout, read=read_timeout or self.timeout)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = await self._http.request(
                method, path, params=query, content=content, headers=headers, timeout=timeout,
            )
        except httpx.ConnectError as exc:
            raise StorageUnavailable(mask_password_in(
                f"cannot reach the control plane at {self.shown_url}: {exc}", self.base_url)
            ) from exc
        except httpx.TransportError as exc:
            # The request may have arrived: only the server knows whether it acted.
            raise StorageUnavailable(mask_password_in(
                f"the connection to the control plane at {self.shown_url} failed during "
                f"{method} {path}: {exc!r}; the request may or may not have been carried out",
                self.base_url), outcome_unknown=method != "GET",
            ) from exc
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = None
        if response.status_code >= 400:
            raise error_from_wire(response.status_code, data)
        return response.status_code, data

    @staticmethod
    def _run_path(workflow_id: str, run_id: str | None, action: str = "") -> str:
        path = f"/api/workflows/{_segment(workflow_id)}"
        if run_id is not None:
            path += f"/runs/{_segment(run_id)}"
        return path + (f"/{action}" if action else "")

    # ------------------------------------------------------------ the protocol

    async def start(self, request: StartRequest) -> StartResult:
        _, data = await self._call("POST", "/api/workflows", body=self._start_body(request))
        return StartResult(run_id=str(data["run_id"]), created=bool(data["created"]),
                           status=str(data.get("durable_status") or data["status"]))

    @staticmethod
    def _start_body(request: StartRequest) -> dict[str, Any]:
        return {
            "workflow_type": request.workflow_type,
            "workflow_id": request.workflow_id,
            "input": json.loads(request.input),
            "execution_timeout_seconds": request.execution_timeout,
            "run_timeout_seconds": request.run_timeout,
            "id_reuse_policy": request.id_reuse,
            "task_queue": request.task_queue,
            "memo": json.loads(request.memo) if request.memo else None,
            "priority": request.priority,
            "concurrency_key": request.concurrency_key,
            # The client checked a workflow function it imports (as an embedded
            # one does: it needs no live worker); a name it does not import the
            # plane checks, arguments included, against its live workers'
            # definitions, which a remote client cannot read
            "require_registered": workflow_defn_of(request.workflow_type) is None,
            # any id the SDK takes, not only the reference engine's (the client
            # checked it already, as an embedded one does)
            "rules": "durable",
        }

    async def run_state(self, workflow_id: str, run_id: str | None) -> RunState | None:
        try:
            _, data = await self._call("GET", self._run_path(workflow_id, run_id, "result"))
        except WorkflowNotFound:
            return None
        return state_from_wire(data)

    async def await_run(self, workflow_id: str, run_id: str, wait: float, *,
                        until_review: bool = False) -> RunState:
        wait = max(0.0, min(wait, _MAX_WAIT))
        params: dict[str, Any] = {"wait": wait}
        if until_review:  # sent only when asked: an older server refuses names it lacks
            params["until_review"] = "true"
        _, data = await self._call("GET", self._run_path(workflow_id, run_id, "result"),
                                   params=params, read_timeout=wait + self.timeout)
        return state_from_wire(data)

    async def not_found(self, workflow_id: str, run_id: str | None) -> WorkflowNotFound:
        """The server's own answer for the id (it says when retention deleted
        the run), or a plain one should the run be there after all."""
        try:
            await self._call("GET", self._run_path(workflow_id, run_id))
        except WorkflowNotFound as exc:
            return exc
        run = f" run {run_id!r}" if run_id else ""
        return WorkflowNotFound(f"no workflow {workflow_id!r}{run} in namespace "
                                f"{self.namespace!r}")

    async def describe(self, workflow_id: str, run_id: str | None) -> dict[str, Any] | None:
        try:
            _, data = await self._call("GET", self._run_path(workflow_id, run_id))
        except WorkflowNotFound:
            return None
        return describe_from_wire(data)

    async def history(
        self, workflow_id: str, run_id: str | None, *, after_sequence: int = 0,
        limit: int | None = None,
    ) -> list[HistoryEvent]:
        events: list[HistoryEvent] = []
        token = encode_token(after_sequence) if after_sequence else None
        while limit is None or len(events) < limit:
            page = _HISTORY_PAGE if limit is None else min(_HISTORY_PAGE, limit - len(events))
            _, data = await self._call(
                "GET", self._run_path(workflow_id, run_id, "history"),
                params={"next_page_token": token, "page_size": page})
            events.extend(event_from_wire(item) for item in data["events"])
            if run_id is None:  # keep paging the run the first page came from
                run_id = str(data["run_id"])
            token = data.get("next_page_token")
            if not token:
                break
        return events

    async def request_cancellation(
        self, workflow_id: str, run_id: str | None, *, reason: str, cleanup_timeout: float,
        requester: dict[str, Any] | None, source: str,
    ) -> tuple[bool, dict[str, Any]]:
        _, data = await self._call(
            "POST", self._run_path(workflow_id, run_id, "request-cancellation"),
            body={"reason": reason, "cleanup_timeout_seconds": cleanup_timeout,
                  "requester": requester, "source": source, "rules": "durable"})
        return not data["duplicate"], record_from_wire(data["request"])

    async def close_run(self, workflow_id: str, run_id: str | None, *, status: str,
                        reason: str) -> None:
        action = {"cancelled": "cancel", "terminated": "terminate"}.get(status)
        if action is None:
            raise ConfigurationError(f"a run is closed from outside as cancelled or terminated, "
                                     f"not {status!r}")
        try:
            await self._call("POST", self._run_path(workflow_id, run_id, action),
                             body={"reason": reason})
        except RunAlreadyClosed:
            # the server's 409 run_not_active (closed otherwise before): a no-op,
            # as the embedded client's close of a closed run is
            return

    async def cancellation_cascade(self, workflow_id: str, run_id: str | None) -> dict[str, Any]:
        _, data = await self._call(
            "GET", self._run_path(workflow_id, run_id, "cancellation-cascade"))
        return dict(data)

    async def clear_review(self, workflow_id: str, *, units: str | None = None) -> bool:
        _, data = await self._call(
            "POST", f"/api/workflows/{_segment(workflow_id)}/retry-after-review",
            body={"units": units} if units is not None else {})
        return bool(data["cleared"])

    async def reset(self, workflow_id: str, run_id: str | None, *, to_op: str,
                    reason: str) -> dict[str, Any]:
        body: dict[str, Any] = {"to_op": to_op, "reason": reason}
        if run_id is not None:
            body["run_id"] = run_id
        _, data = await self._call("POST", f"/api/workflows/{_segment(workflow_id)}/reset",
                                   body=body)
        return dict(data)

    async def list_runs(self, *, status: str | None, workflow_type: str | None, limit: int,
                        cursor: str | None, query: str | None = None) -> Page:
        check_text(query)  # the server reads the grammar (as the schedule list's)
        if cursor:  # refused here in the Python API's words (`cursor`, `next_cursor`)
            decode_cursor(cursor)
        # The server pages by at most LIST_PAGE_MAX (the reference's bound); a
        # larger `limit` (the Python API takes up to 1000) is read page after page
        # (the token is where the last run read left off: the same page).
        items: list[dict[str, Any]] = []
        while True:
            _, data = await self._call("GET", "/api/workflows", params={
                "durable_status": status, "workflow_type": workflow_type, "query": query,
                "page_size": min(LIST_PAGE_MAX, limit - len(items)), "next_page_token": cursor})
            items += [summary_from_wire(item) for item in data["workflows"]]
            cursor = data["next_page_token"]
            if not cursor or len(items) >= limit:
                return Page(items, cursor)

    async def repair_pass(self) -> dict[str, int]:
        _, data = await self._call("POST", "/api/repair-pass")
        return {str(k): int(v) for k, v in data["counts"].items()}

    async def overdue(self) -> dict[str, Any]:
        _, data = await self._call("GET", "/api/deadlines/overdue")
        return dict(data)

    async def signal(self, workflow_id: str, run_id: str | None, name: str, args: str, *,
                     sender: dict[str, Any] | None = None,
                     request_id: str | None = None) -> bool:
        body: dict[str, Any] = {"input": json.loads(args), "request_id": request_id,
                                "rules": "durable"}
        if sender is not None:  # the server records who its caller says asked
            body.update(requester=sender.get("requester"), source=sender.get("source"))
        _, data = await self._call("POST", self._run_path(workflow_id, run_id,
                                                          f"signal/{_segment(name)}"), body=body)
        return not data.get("duplicate", False)

    async def signal_with_start(self, request: StartRequest, name: str,
                                args: str) -> StartResult:
        body = self._start_body(request)
        body.update(signal=name, signal_input=json.loads(args))
        _, data = await self._call("POST", "/api/signal-with-start", body=body)
        return StartResult(run_id=str(data["run_id"]), created=bool(data["created"]),
                           status=str(data.get("durable_status") or data["status"]))

    async def query(self, workflow_id: str, run_id: str | None, name: str, args: str,
                    wait: float) -> str:
        _, data = await self._call(
            "POST", self._run_path(workflow_id, run_id, f"query/{_segment(name)}"),
            body={"input": json.loads(args), "timeout_seconds": wait, "rules": "durable"},
            read_timeout=wait + self.timeout)
        return encode_payload(data["result"])

    async def update(self, workflow_id: str, run_id: str | None, name: str, args: str,
                     update_id: str, wait: float | None, *,
                     sender: dict[str, Any] | None = None) -> str:
        # The server bounds each wait by its max_wait: an update that outlasts one
        # request is waited for again by its update_id (it runs once either way).
        deadline = None if wait is None else anyio.current_time() + wait
        while True:
            step = _MAX_WAIT if deadline is None else max(
                0.001, min(_MAX_WAIT, deadline - anyio.current_time()))
            try:
                _, data = await self._call(
                    "POST", self._run_path(workflow_id, run_id, f"update/{_segment(name)}"),
                    body={"input": json.loads(args), "request_id": update_id,
                          "wait_for": "completed", "wait_timeout_seconds": step,
                          "rules": "durable",
                          **({} if sender is None else {
                              "requester": sender.get("requester"),
                              "source": sender.get("source")})},
                    read_timeout=step + self.timeout)
            except UpdateFailed as exc:
                if exc.failure.get("timeout_kind") == "update_wait" and (
                    deadline is None or anyio.current_time() < deadline
                ):
                    continue
                raise
            return encode_payload(data["result"])

    async def update_accepted(self, workflow_id: str, run_id: str | None, name: str,
                              args: str, update_id: str, wait: float | None, *,
                              sender: dict[str, Any] | None = None) -> str | None:
        step = _MAX_WAIT if wait is None else max(0.001, min(_MAX_WAIT, wait))
        _, data = await self._call(
            "POST", self._run_path(workflow_id, run_id, f"update/{_segment(name)}"),
            body={"input": json.loads(args), "request_id": update_id,
                  "wait_for": "accepted", "wait_timeout_seconds": step, "rules": "durable",
                  **({} if sender is None else {"requester": sender.get("requester"),
                                                "source": sender.get("source")})},
            read_timeout=step + self.timeout)
        if data.get("update_status") != "completed":
            return None
        return encode_payload(data["result"])

    async def registered_types(self) -> set[str]:
        _, data = await self._call("GET", "/api/workflow-types")
        return {str(t) for t in data["workflow_types"]}
