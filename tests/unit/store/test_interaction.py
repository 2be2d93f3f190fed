"""Signals, queries and update requests as storage sees them (no worker involved)."""

from __future__ import annotations

import pytest

from durable import RunAlreadyClosed, WorkflowNotFound
from durable.store import Store
from durable.store.records import ClientRequest, InboxItem, RunStatus, WorkerRegistration
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
    await register(store, "w1", run.task_queue, until=T0 + 10)
    taken = await store.take_requests(waiting, "w1", T0)
    assert [r.request_id for r in taken] == waiting
    assert await store.take_requests(waiting, "w2", T0) == []  # taken once
    assert await store.idle_requests(NS, run.task_queue, (WF,), 10, T0) == []


async def register(store: Store, worker_id: str, queue: str, *, until: float) -> None:
    await store.register_worker(WorkerRegistration(worker_id, NS, queue, (WF,), (), ()),
                                until - T0, T0)


async def test_a_query_whose_taker_is_gone_is_offered_again_and_its_late_answer_refused(
        store: Store) -> None:
    run = await started_and_claimed(store, "taker-gone")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    ticket = await store.submit_request(NS, "taker-gone", None, "query", "q", "[]", None, T0)
    assert ticket.request_id is not None
    await register(store, "w1", run.task_queue, until=T0 + 10)
    await register(store, "w2", run.task_queue, until=T0 + 100)
    assert len(await store.take_requests([ticket.request_id], "w1", T0)) == 1
    # while its taker lives, nobody else is offered it
    assert await store.idle_requests(NS, run.task_queue, (WF,), 10, T0 + 9) == []
    assert await store.take_requests([ticket.request_id], "w2", T0 + 9) == []
    # w1 died: its registration lapsed, and the query is offered again
    later = T0 + 11
    assert await store.idle_requests(NS, run.task_queue, (WF,), 10, later) == [
        ticket.request_id]
    assert len(await store.take_requests([ticket.request_id], "w2", later)) == 1
    assert await store.idle_requests(NS, run.task_queue, (WF,), 10, later) == []
    # w1's late answer (it was only paused) is refused; w2's counts
    assert not await store.answer_request(ticket.request_id, {"result": "stale"}, later, "w1")
    assert await store.answer_request(ticket.request_id, {"result": "2"}, later, "w2")
    assert await store.take_answer(ticket.request_id) == {"result": "2"}


async def test_the_answerers_read_when_another_live_taker_lapses(store: Store) -> None:
    """`queries_due`: the offered queries, and when the first other live taker's
    registration runs out (the answerers look again just after it)."""
    run = await started_and_claimed(store, "taker-lapse")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    ticket = await store.submit_request(NS, "taker-lapse", None, "query", "q", "[]", None, T0)
    assert ticket.request_id is not None
    queue = run.task_queue
    assert await store.queries_due(NS, queue, (WF,), 10, T0, "w2") == (
        [ticket.request_id], None)
    await register(store, "w1", queue, until=T0 + 10)
    assert len(await store.take_requests([ticket.request_id], "w1", T0)) == 1
    assert await store.queries_due(NS, queue, (WF,), 10, T0 + 1, "w2") == ([], T0 + 10)
    assert await store.queries_due(NS, queue, (WF,), 10, T0 + 1, "w1") == ([], None)  # its own
    assert await store.queries_due(NS, queue, (WF,), 10, T0 + 10, "w2") == ([], T0 + 10)
    assert await store.queries_due(NS, queue, (WF,), 10, T0 + 11, "w2") == (
        [ticket.request_id], None)  # lapsed: offered again


async def test_a_query_taken_while_nobody_held_the_run_is_its_next_owners(store: Store) -> None:
    run = await started_and_claimed(store, "owner-next")
    ticket = await store.submit_request(NS, "owner-next", None, "query", "q", "[]", None, T0)
    assert ticket.request_id is not None
    assert len(await store.take_requests([ticket.request_id], "gone", T0)) == 1
    # the run's (next) owner loads it with the run's inbox, and answers it
    _, requests = await store.load_inbox(run.run_id)
    assert [r.request_id for r in requests] == [ticket.request_id]
    _, requests = await store.pending_interactions(run.run_id, 0)
    assert [r.request_id for r in requests] == [ticket.request_id]
    assert await store.answer_request(ticket.request_id, {"result": "3"}, T0)
    _, requests = await store.load_inbox(run.run_id)
    assert requests == []


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
