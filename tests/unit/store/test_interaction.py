"""Signals, queries and update requests as storage sees them (no worker involved)."""

from __future__ import annotations

import pytest

from durable import RunAlreadyClosed, WorkflowNotFound
from durable.store import Store
from durable.store.records import ClientRequest, InboxItem, RunStatus
from durable.store.writes import CloseRun
from durable.wakes import Wake, WakeKind

from ._support import NS, T0, WF, Wakes, commit, current, request, started_and_claimed

pytestmark = pytest.mark.anyio


async def test_a_signal_is_durable_and_numbered_before_any_worker_sees_it(store: Store) -> None:
    run = await started_and_claimed(store, "signalled")
    wakes = Wakes(store)
    first = (await store.send_signal(NS, "signalled", None, "add", '["a"]', T0)).item
    second = (await store.send_signal(NS, "signalled", None, "add", '["b"]', T0 + 1)).item
    assert (first.seq, second.seq) == (1, 2) and first.status == "received"
    # its owner is woken with the item itself: no read needed
    assert Wake.run(run.run_id, first) in wakes.seen
    assert isinstance(wakes.seen[0].data, InboxItem)
    items, requests = await store.load_inbox(run.run_id)
    assert [i.input for i in items] == ['["a"]', '["b"]'] and requests == []
    assert (await current(store, "signalled")).inbox_seq == 2


async def test_signals_reach_open_runs_of_known_workflows_only(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await store.send_signal(NS, "nobody", None, "add", "[]", T0)
    run = await started_and_claimed(store, "closed")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    with pytest.raises(RunAlreadyClosed):
        await store.send_signal(NS, "closed", None, "add", "[]", T0)


async def test_signal_with_start_starts_the_instance_and_gives_it_the_signal(
        store: Store) -> None:
    result = await store.signal_with_start(request("fresh"), "add", '["x"]', T0)
    assert result.created
    items, _ = await store.load_inbox(result.run_id)
    assert [(i.name, i.input) for i in items] == [("add", '["x"]')]


async def test_a_query_to_an_owned_run_wakes_its_owner_only(store: Store) -> None:
    run = await started_and_claimed(store, "owned")
    wakes = Wakes(store)
    ticket = await store.submit_request(NS, "owned", None, "query", "count", "[]", None, T0)
    assert ticket.request_id is not None and ticket.run_id == run.run_id
    [wake] = wakes.seen
    assert wake.kind is WakeKind.RUN and isinstance(wake.data, ClientRequest)
    assert await store.take_answer(ticket.request_id) is None  # unanswered yet
    assert await store.answer_request(ticket.request_id, {"result": "3"}, T0 + 1)
    assert not await store.answer_request(ticket.request_id, {"result": "4"}, T0 + 1)
    assert await store.take_answer(ticket.request_id) == {"result": "3"}  # the first counts


async def test_a_query_nobody_holds_is_taken_by_one_worker_only(store: Store) -> None:
    run = await started_and_claimed(store, "idle")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    wakes = Wakes(store)
    ticket = await store.submit_request(NS, "idle", None, "query", "count", "[]", None, T0)
    assert Wake.requests(NS, run.task_queue) in wakes.seen  # any worker of the type may
    waiting = await store.idle_requests(NS, run.task_queue, (WF,), 10, T0)
    assert waiting == [ticket.request_id]
    taken = await store.take_requests(waiting, "w1")
    assert [r.request_id for r in taken] == waiting
    assert await store.take_requests(waiting, "w2") == []  # taken once
    assert await store.idle_requests(NS, run.task_queue, (WF,), 10, T0) == []


async def test_a_withdrawn_request_leaves_nothing_behind_unless_it_was_answered(
        store: Store) -> None:
    await started_and_claimed(store, "asked")
    unanswered = await store.submit_request(NS, "asked", None, "query", "q", "[]", None, T0)
    assert unanswered.request_id is not None
    assert await store.withdraw_request(unanswered.request_id) is None
    assert "withdrawn" in (await store.take_answer(unanswered.request_id) or {})["error"][
        "message"]
    answered = await store.submit_request(NS, "asked", None, "query", "q", "[]", None, T0)
    assert answered.request_id is not None
    await store.answer_request(answered.request_id, {"result": "1"}, T0)
    assert await store.withdraw_request(answered.request_id) == {"result": "1"}


async def test_old_requests_are_purged(store: Store) -> None:
    await started_and_claimed(store, "old")
    await store.submit_request(NS, "old", None, "query", "q", "[]", None, T0)
    await store.submit_request(NS, "old", None, "query", "q", "[]", None, T0 + 100)
    assert await store.purge_requests(T0 + 50) == 1


async def test_an_update_already_recorded_returns_its_record_not_a_new_request(
        store: Store) -> None:
    run = await started_and_claimed(store, "updated")
    first = await store.submit_request(NS, "updated", None, "update", "rename", '["n"]',
                                       "u-1", T0)
    again = await store.submit_request(NS, "updated", None, "update", "rename", '["n"]',
                                       "u-1", T0)
    assert again.request_id == first.request_id  # callers of one update wait together
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    with pytest.raises(RunAlreadyClosed, match="updates reach open runs only"):
        await store.submit_request(NS, "updated", None, "update", "rename", "[]", "u-2", T0)
