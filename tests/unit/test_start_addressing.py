"""Whom a start is addressed to on PostgreSQL (`durable_postgres.addressing`),
without a server: who counts as a member, turns, refreshes, failures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("asyncpg")  # the driver package imports it

from durable_postgres import addressing
from durable_postgres.addressing import Addressing, members

pytestmark = pytest.mark.anyio


def row(address: str | None, types: Sequence[str] = ("flow",), live: bool = True
        ) -> dict[str, Any]:
    return {"address": address, "workflow_types": json.dumps(list(types)), "live": live}


def test_members_are_the_live_processes_that_run_every_type_of_the_queue() -> None:
    assert members([row("b"), row("a"), row("a")]) == ("a", "b")  # one per process, sorted
    assert members([row("a"), row("gone", live=False)]) == ("a",)  # its connections closed
    # a worker without one of the types would leave a start of it unclaimed
    assert members([row("a", ("flow", "other")), row("b", ("flow",))]) == ("a",)
    # a dead process's types do not count
    assert members([row("a"), row("gone", ("flow", "x"), live=False)]) == ("a",)
    assert members([]) == ()


def test_a_worker_that_cannot_be_addressed_turns_addressing_off_for_its_queue() -> None:
    assert members([row("a"), row(None)]) == ()  # it would only ever get batons


class Reads:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, float]] = []

    async def __call__(self, namespace: str, task_queue: str, now: float) -> Sequence[Any]:
        self.calls.append((namespace, task_queue, now))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []

    def debug(self, event: str, **_: Any) -> None:
        self.events.append(event)


async def test_starts_go_to_the_members_in_turn_read_once_a_refresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(addressing.time, "monotonic", lambda: clock[0])
    reads = Reads([row("a"), row("b")], [row("c")])
    chosen = Addressing(reads, Log())
    assert [await chosen.pick("ns", "q", 5.0) for _ in range(4)] == ["a", "b", "a", "b"]
    assert reads.calls == [("ns", "q", 5.0)]  # once
    clock[0] += addressing.REFRESH  # stale: read again
    assert await chosen.pick("ns", "q", 6.0) == "c"
    assert len(reads.calls) == 2 and chosen.reads == 2


async def test_a_failed_read_leaves_the_queue_told_to_everybody_until_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(addressing.time, "monotonic", lambda: clock[0])
    log = Log()
    chosen = Addressing(Reads(OSError("gone"), [row("a")]), log)
    assert await chosen.pick("ns", "q", 1.0) is None  # the start goes on
    assert log.events == ["start_members_unread"]
    assert await chosen.pick("ns", "q", 1.0) is None  # not read again at once
    clock[0] += addressing.REFRESH
    assert await chosen.pick("ns", "q", 2.0) == "a"


async def test_no_members_means_every_process_is_told() -> None:
    chosen = Addressing(Reads([row(None), row("a")]), Log())
    assert await chosen.pick("ns", "q", 1.0) is None
    chosen.forget()
    chosen._read = Reads([])  # type: ignore[assignment]
    assert await chosen.pick("ns", "q", 1.0) is None


# -- a worker's own commits: `peek`, without a read (`Tx.addressee`) ----------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The monotonic clock `Addressing` ages its members by, set by the test."""
    now = [0.0]
    monkeypatch.setattr(addressing.time, "monotonic", lambda: now[0])
    return now


async def test_peek_never_reads_and_marks_unknown_members_for_the_upkeep(
        clock: list[float]) -> None:
    reads = Reads([row("a"), row("b")])
    chosen = Addressing(reads, Log())
    assert chosen.peek("ns", "q", 7.0) is None  # unknown: every process hears it
    assert reads.calls == []  # no read on a program's path
    await chosen.refresh_due()  # the watching driver's upkeep
    assert reads.calls == [("ns", "q", 7.0)]  # with the peeker's clock
    assert [chosen.peek("ns", "q", 8.0) for _ in range(3)] == ["a", "b", "a"]
    await chosen.refresh_due()
    assert len(reads.calls) == 1  # fresh: nothing due, nothing read


async def test_peek_and_pick_share_the_turns() -> None:
    chosen = Addressing(Reads([row("a"), row("b")]), Log())
    assert await chosen.pick("ns", "q", 1.0) == "a"
    assert chosen.peek("ns", "q", 1.0) == "b"
    assert await chosen.pick("ns", "q", 1.0) == "a"


async def test_stale_members_are_refreshed_off_the_path_and_dropped_past_the_bound(
        clock: list[float]) -> None:
    reads = Reads([row("a"), row("b")], [row("b")])
    chosen = Addressing(reads, Log())
    assert await chosen.pick("ns", "q", 1.0) == "a"
    clock[0] += addressing.REFRESH  # stale, not past the bound: still addressed
    assert chosen.peek("ns", "q", 2.0) == "b"
    assert len(reads.calls) == 1
    await chosen.refresh_due()  # "a" was killed: it drops out
    assert reads.calls[-1] == ("ns", "q", 2.0)
    assert [chosen.peek("ns", "q", 3.0) for _ in range(2)] == ["b", "b"]
    clock[0] += addressing.STALE  # nobody refreshed them since: not trusted
    assert chosen.peek("ns", "q", 4.0) is None
    assert chosen.peek("ns", "q", 4.0) is None  # (marked again, read once)


async def test_the_members_of_a_queue_asked_about_are_kept_fresh_for_a_while(
        clock: list[float]) -> None:
    """A process committing new work now and then (a child every few seconds)
    still finds its members known: the upkeep reads them once a `REFRESH`
    for `KEEP_FOR` after the last ask, on the asker's clock; then no more."""
    reads = Reads(*[[row("a")]] * 4)
    chosen = Addressing(reads, Log())
    assert chosen.peek("ns", "q", 1000.0) is None
    await chosen.refresh_due()
    clock[0] += addressing.REFRESH / 2
    await chosen.refresh_due()  # fresh: not read
    assert len(reads.calls) == 1
    clock[0] += addressing.REFRESH * 5  # nobody asked meanwhile
    await chosen.refresh_due()
    assert reads.calls[-1] == ("ns", "q", 1000.0 + addressing.REFRESH * 5.5)  # its clock
    assert chosen.peek("ns", "q", 1.0) == "a"  # known when asked again
    clock[0] += addressing.KEEP_FOR
    await chosen.refresh_due()  # asked too long ago: forgotten, not read
    assert len(reads.calls) == 2


async def test_a_failed_refresh_leaves_the_queue_told_to_everybody() -> None:
    log = Log()
    chosen = Addressing(Reads(OSError("gone")), log)
    assert chosen.peek("ns", "q", 1.0) is None
    await chosen.refresh_due()  # logged, not raised: the upkeep goes on
    assert log.events == ["start_members_unread"]
    assert chosen.peek("ns", "q", 1.0) is None


def test_a_commit_addresses_new_work_only_through_a_driver_that_can() -> None:
    from durable.driver import Dialect, Tx
    from durable.store.runs import addressee

    dialect: Any = Dialect
    assert addressee(Tx(dialect), "ns", "q", 1.0) is None  # SQLite, MariaDB
    asked: list[tuple[str, str, float]] = []
    tx = Tx(dialect, addressee=lambda ns, q, now: asked.append((ns, q, now)) or "b")
    assert addressee(tx, "ns", "q", 1.0) == "b"
    assert asked == [("ns", "q", 1.0)]


def test_a_run_a_build_refused_is_told_to_every_process() -> None:
    """A signal or a query for a run nobody holds is one run's worth of work,
    addressed to one member; not one that a build refused, which only a
    worker of another build takes (the members do not say which)."""
    from durable.driver import Dialect, Tx
    from durable.store.runs import unheld_wake

    dialect: Any = Dialect
    tx = Tx(dialect, addressee=lambda ns, q, now: "b")
    free = {"namespace": "ns", "task_queue": "q", "blocked_build": None}
    assert unheld_wake(tx, free, 1.0).to == "b"
    assert unheld_wake(tx, {**free, "blocked_build": "v1"}, 1.0).to is None


async def test_new_work_stays_with_a_member_that_takes_it_else_goes_in_turn() -> None:
    """`here`: a worker of the committing process takes the queue's runs."""
    chosen = Addressing(Reads([row("a"), row("b")]), Log())
    assert chosen.peek("ns", "q", 1.0, here="b") is None  # unknown: everybody
    await chosen.refresh_due()
    assert [chosen.peek("ns", "q", 1.0, here="b") for _ in range(3)] == ["b", "b", "b"]
    # not a member (its worker lacks a type of the queue's): in turn
    assert [chosen.peek("ns", "q", 1.0, here="c") for _ in range(2)] == ["a", "b"]
    assert chosen.peek("ns", "q", 1.0) == "a"  # (the turns went on)
