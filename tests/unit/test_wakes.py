"""Wake-ups: one constructor per kind, matchers, and the hub's waits."""

from __future__ import annotations

import anyio
import pytest

from durable import wakes
from durable.wakes import Wake, WakeHub, WakeKind, address

pytestmark = pytest.mark.anyio


def test_each_kind_has_a_constructor_giving_its_documented_key() -> None:
    built = [
        (Wake.any(), ("any",)),
        (Wake.run("r1"), ("run", "r1")),
        (Wake.runs("ns", "q"), ("runs", "ns", "q")),
        (Wake.activities("ns", "q"), ("activities", "ns", "q")),
        (Wake.activity_stop("t1"), ("activity_stop", "t1")),
        (Wake.requests("ns", "q"), ("requests", "ns", "q")),
        (Wake.request("req-1"), ("request", "req-1")),
        (Wake.delivered("r1"), ("delivered", "r1")),
        (Wake.update("r1", "u1"), ("update", "r1", "u1")),
        (Wake.stopped("r1", {"status": "completed"}), ("stopped", "r1")),
        (Wake.attempt_ended("t1", {"outcome": "completed"}), ("attempt_ended", "t1")),
        (Wake.schedules("ns"), ("schedules", "ns")),
        (Wake.schedule_run_closed("ns"), ("schedules", "ns", "closed")),
        (Wake.retention("ns"), ("retention", "ns")),
    ]
    assert [w.key for w, _ in built] == [key for _, key in built]
    assert {w.kind for w, _ in built} == set(WakeKind), "a kind without a constructor"
    # plain string keys (what another process sends) are the same wake-ups
    assert Wake(("run", "r1")) == Wake.run("r1")
    assert Wake(("run", "r1"), remote=True) == Wake.run("r1")


def test_notices_stay_in_process_and_carry_their_record() -> None:
    notice = {"status": "completed"}
    stopped = Wake.stopped("r1", notice)
    assert stopped.local and stopped.data is notice
    assert Wake.attempt_ended("t1", notice).local
    assert not any(w.local for w in (Wake.run("r1", "op"), Wake.runs("ns", "q"), Wake.any()))


def test_matchers_name_the_kind_and_the_subject() -> None:
    wake = Wake.update("r1", "u1")
    assert wake.kind is WakeKind.UPDATE and wake.subject == "r1"
    assert Wake.any().subject == ""
    assert wake.matches({("update", "r1", "u1")})
    assert not wake.matches({("update", "r1", "u2"), ("run", "r1")})
    assert Wake.any().matches({("run", "r1")}), "another process's commit: look again"


def test_a_key_from_a_newer_process_has_no_kind_and_matches_nothing() -> None:
    wake = Wake(("archived", "r1"))
    assert wake.kind is None
    assert not wake.matches({("run", "r1")})


def test_a_run_or_a_queue_is_the_address_of_what_names_it_the_rest_goes_to_all() -> None:
    assert address(Wake.run("r1").key) == ("run", "r1")
    assert address(Wake.delivered("r1").key) == ("run", "r1")
    assert address(Wake.update("r1", "u1").key) == ("run", "r1")
    for wake in (Wake.runs("ns", "q"), Wake.activities("ns", "q"), Wake.requests("ns", "q")):
        assert address(wake.key) == wake.key
    for wake in (Wake.any(), Wake.schedules("ns"), Wake.retention("ns"),
                 Wake.activity_stop("t1"), Wake.request("req-1"), Wake(("archived", "r1"))):
        assert address(wake.key) is None, wake


def test_the_hub_counts_wanted_addresses_and_says_when_they_change() -> None:
    hub = WakeHub()
    changes: list[set[tuple[str, ...]]] = []
    hub.on_wanted = lambda: changes.append(set(hub.wanted))
    owner = hub.want([Wake.run("r1").key, Wake.any().key])  # "any" needs no address
    waiter = hub.want([Wake.update("r1", "u1").key])  # the same address: no change
    assert changes == [{("run", "r1")}]
    owner()
    owner()  # a second call does nothing
    assert changes == [{("run", "r1")}] and hub.wanted == {("run", "r1"): {
        ("update", "r1", "u1"): 1}}
    with hub.listen({Wake.runs("ns", "q").key}):
        assert ("runs", "ns", "q") in hub.wanted
    waiter()
    assert hub.wanted == {} and changes[-1] == set()


async def test_wait_returns_on_a_wake_up_for_its_keys_only() -> None:
    hub = WakeHub()
    heard: list[bool] = []
    async with anyio.create_task_group() as tg:
        async def waiter() -> None:
            heard.append(await hub.wait({Wake.run("r1").key}, 60))

        tg.start_soon(waiter)
        await until_waiting(hub, 1)
        hub.publish([Wake.run("r2"), Wake.runs("ns", "q")])  # not its keys
        await anyio.wait_all_tasks_blocked()
        assert heard == [] and hub.waiting == 1
        hub.publish([Wake.run("r1")])
    assert heard == [True] and hub.waiting == 0


async def test_wait_gives_up_after_its_timeout() -> None:
    hub = WakeHub()
    assert await hub.wait({Wake.run("r1").key}, 0.01) is False
    assert hub.waiting == 0


async def test_a_wake_up_heard_between_two_waits_is_kept() -> None:
    hub = WakeHub()
    with hub.listen({Wake.request("q1").key}) as listening:
        hub.publish([Wake.request("q1")])  # while the listener was busy reading
        assert await listening.wait(60) is True  # at once
        assert await listening.wait(0.01) is False  # consumed


async def test_until_rereads_on_each_wake_up_and_returns_the_first_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No poll at all, so that the wake-ups alone drive the reads: the first
    # poll comes after FIRST_POLL (5 ms), and on a loaded box a read it made
    # skipped the state this test waits for (the loop below spun for ever in
    # one of three CI runs side by side).
    monkeypatch.setattr(wakes, "FIRST_POLL", 60.0)
    hub = WakeHub()
    answers: list[str | None] = [None, None, "done"]
    reads = 0

    async def read() -> str | None:
        nonlocal reads
        reads += 1
        return answers[reads - 1]

    result: list[str | None] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            async def waiter() -> None:
                result.append(await hub.until({Wake.run("r1").key}, read, 60, poll=60))

            tg.start_soon(waiter)
            for done in (1, 2):
                while reads != done or hub.waiting != 1:  # read, then waiting again
                    await anyio.lowlevel.checkpoint()
                hub.publish([Wake.run("r1")])
    assert result == ["done"] and reads == 3


async def test_until_finds_an_unannounced_change_by_polling() -> None:
    hub = WakeHub()
    changed = anyio.Event()

    async def read() -> str | None:
        return "seen" if changed.is_set() else None

    async with anyio.create_task_group() as tg:
        async def change() -> None:
            await until_waiting(hub, 1)
            changed.set()  # nobody publishes a wake-up for it

        tg.start_soon(change)
        assert await hub.until({Wake.run("r1").key}, read, 60, poll=0.02) == "seen"


async def test_until_returns_none_after_its_timeout_and_passes_errors_on() -> None:
    hub = WakeHub()

    async def never() -> str | None:
        return None

    assert await hub.until({Wake.run("r1").key}, never, 0.03) is None

    async def broken() -> str | None:
        raise LookupError("no such run")

    with pytest.raises(LookupError, match="no such run"):
        await hub.until({Wake.run("r1").key}, broken, 60)
    assert hub.waiting == 0


async def until_waiting(hub: WakeHub, n: int) -> None:
    """Until exactly `n` waits are in progress (the hub counts them)."""
    with anyio.fail_after(30):  # a test that fails, never one that spins for ever
        while hub.waiting != n:
            await anyio.lowlevel.checkpoint()


def test_a_runs_wake_up_says_whether_it_brings_a_deadline() -> None:
    assert Wake.runs("ns", "q").brings_deadline
    quiet = Wake.runs("ns", "q", deadline=False)
    assert quiet.key == ("runs", "ns", "q") and not quiet.brings_deadline
    assert Wake.run("r1", {"not": "a marker"}).brings_deadline


def test_heard_wake_ups_bring_no_deadline_only_if_every_notification_said_so() -> None:
    runs, other = ("runs", "ns", "q"), ("runs", "ns", "q2")
    got = wakes.heard([(runs, True, False), (other, True, False), (runs, False, False),
                       (("any",), True, False)])
    assert [w.key for w in got] == [runs, other, ("any",)]  # one each, first heard first
    assert [w.brings_deadline for w in got] == [True, False, True]
    assert all(w.remote for w in got)
    assert all(w.to is None for w in got)


def test_a_start_heard_on_this_process_s_own_channel_is_addressed_here() -> None:
    """A ``RUNS`` key heard once on the process's own channel is addressed to it
    (its workers claim at once), whatever else said it; others never are."""
    runs, other = ("runs", "ns", "q"), ("runs", "ns", "q2")
    got = wakes.heard([(runs, False, False), (runs, True, True), (other, True, False),
                       (("run", "r1"), False, True)], "me")
    assert [(w.key, w.to) for w in got] == [(runs, "me"), (other, None), (("run", "r1"), None)]
    assert got[0].remote and got[0].brings_deadline  # one of its notifications brings one
    assert Wake.runs("ns", "q", to="a") == Wake.runs("ns", "q")  # the same news either way


def test_a_runs_news_is_not_for_other_processes_while_its_executor_is_here() -> None:
    hub = WakeHub()
    outcome = Wake.run("r1", "an op's record")
    assert hub.for_others(outcome) and hub.for_others(Wake.run("r1"))
    done = hub.execute_here("r1")
    also = hub.execute_here("r1")  # counted: two say so
    assert not hub.for_others(outcome)  # for the executor, which heard it here
    assert hub.for_others(Wake.run("r1"))  # changed or closed: waiters elsewhere re-read
    assert hub.for_others(Wake.run("r2", "an op's record"))  # executed elsewhere
    assert not hub.for_others(Wake.stopped("r1", {}))  # local notices never travel
    done()
    done()  # a second call changes nothing
    assert not hub.for_others(outcome)
    also()
    assert hub.for_others(outcome)
