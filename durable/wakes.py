"""Wake-ups: the one way the storage layer tells the engine that something changed.

A committed transaction names what it changed with `Wake` values (built by
the constructors below, one per `WakeKind`); once it has committed, the
driver publishes them on its `WakeHub`, and every subscriber in the process
(workers, waiting clients, the observers) hears them. A driver that tells
other processes about commits (PostgreSQL's NOTIFY) sends the keys of the
non-`local` ones, each only to the processes that want its `address` (a
run's to whoever holds or waits on the run, a task queue's to its workers:
`WakeHub.want`); a driver that only knows *that* another process committed
publishes `Wake.any()` ("look at everything"). A wake-up is a hint, never
the news itself: whoever hears one re-reads what it cares about, so a lost
or duplicated wake-up costs latency, never correctness (every waiter also
polls, slowly).

This is the only upward path from the driver to the engine (the data
otherwise flows one way: engine -> store -> driver).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

T = TypeVar("T")

#: How often a waiter re-reads at first when no wake-up comes; the interval
#: doubles up to the waiter's `poll` (a commit nobody announced here, such as
#: another process's while no worker watches the driver, is found that way).
FIRST_POLL = 0.005


class WakeKind(enum.StrEnum):
    """What a wake-up is about: the first element of its key.

    - ``ANY`` ``("any",)``: another process committed something; look at all.
    - ``RUN`` ``("run", run_id)``: one run changed: an op closed (data: its
      `OpRecord`), a signal, query or update arrived (data: the item), or its
      state did (no data: re-read the run).
    - ``RUNS`` ``("runs", namespace, task_queue)``: runs may be ready to claim.
    - ``ACTIVITIES`` ``("activities", namespace, task_queue)``: attempts may be.
    - ``ACTIVITY_STOP`` ``("activity_stop", task_id)``: a running attempt was
      fenced or asked to stop.
    - ``REQUESTS`` ``("requests", namespace, task_queue)``: a query waits for
      a run that no live worker holds.
    - ``REQUEST`` ``("request", request_id)``: a request was answered.
    - ``DELIVERED`` ``("delivered", run_id)``: a signal reached the run's code.
    - ``UPDATE`` ``("update", run_id, update_id)``: an update was accepted or
      completed.
    - ``SCHEDULES`` ``("schedules", namespace)``: a schedule was created or
      changed, or a fire was buffered: its next fire may have moved;
      ``("schedules", namespace, "closed")``: a run a schedule started closed
      (a fire buffered behind it may start now).
    - ``RETENTION`` ``("retention", namespace)``: the namespace's retention
      setting changed.
    - ``STOPPED`` ``("stopped", run_id)`` and ``ATTEMPT_ENDED``
      ``("attempt_ended", task_id)``: local only, carrying the notice that
      `durable.observe` logs.
    """

    ANY = "any"
    RUN = "run"
    RUNS = "runs"
    ACTIVITIES = "activities"
    ACTIVITY_STOP = "activity_stop"
    REQUESTS = "requests"
    REQUEST = "request"
    DELIVERED = "delivered"
    UPDATE = "update"
    STOPPED = "stopped"
    ATTEMPT_ENDED = "attempt_ended"
    SCHEDULES = "schedules"
    RETENTION = "retention"


_KINDS: dict[str, WakeKind] = {kind.value: kind for kind in WakeKind}

#: The `data` of a ``RUNS`` wake-up whose commit made runs ready without giving
#: any of them a deadline (starts without an execution, run or cleanup
#: timeout). Why: every worker's watchdog re-read the namespace's next deadline
#: on every ``RUNS`` wake-up, in case the new work brought an earlier one; on
#: PostgreSQL every process of the queue hears every start, so N processes
#: made N reads per start (0.2 -> 0.8 reads per step from 1 to 4 processes,
#: docs/benchmarks.md). Other processes learn it from the notification
#: (`"n"`, see `durable_postgres`); a wake-up without it still re-reads.
NO_DEADLINE = "no_deadline"


@dataclass(frozen=True)
class Wake:
    """A hint that something changed; build one with the constructors below.

    `key` is the kind and what it names (see `WakeKind`). `data` may carry the
    changed record (an op's new outcome), so that its owner needs no extra
    read; records are only ever set in-process. The one exception crosses
    processes: `NO_DEADLINE` on a ``RUNS`` wake-up (`heard`).
    """

    key: tuple[str, ...]
    data: Any = None
    #: meaningful in this process only (a notice carrying its record, such as a
    #: run's stop for the logs): drivers never send it to other processes
    local: bool = False
    #: heard from another process (a driver's `watch()`), not committed here:
    #: every worker of every process hears it, so a worker may gather such
    #: wake-ups before acting on them (see `durable.worker`); not part of
    #: equality: the same key from here or from elsewhere is the same news
    remote: bool = field(default=False, compare=False)
    #: the process (its driver's `WakeHub.address`) chosen to act on it: a
    #: start's ``RUNS`` wake-up addressed to one process of the queue
    #: (`WakeHub.addressing`), which claims it at once and passes the baton
    #: if it cannot; the other processes' workers leave it to that one. None:
    #: whoever hears it may act (every other wake-up)
    to: str | None = field(default=None, compare=False)

    # -- constructors: one per kind --------------------------------------------

    @classmethod
    def any(cls) -> Wake:
        """Another process committed something: look at everything."""
        return cls((WakeKind.ANY,))

    @classmethod
    def run(cls, run_id: str, data: Any = None) -> Wake:
        """Run `run_id` changed; `data` is the op record or inbox item, if any."""
        return cls((WakeKind.RUN, run_id), data)

    @classmethod
    def runs(cls, namespace: str, task_queue: str, *, deadline: bool = True,
             to: str | None = None) -> Wake:
        """Runs of this queue may be ready to claim. `deadline=False`: what the
        commit made ready brings no deadline (a start without timeouts), so a
        watchdog need not look for an earlier one (`NO_DEADLINE`). `to`: the
        process that claims it (a start addressed to one, see `Wake.to`)."""
        return cls((WakeKind.RUNS, namespace, task_queue), None if deadline else NO_DEADLINE,
                   to=to)

    @classmethod
    def activities(cls, namespace: str, task_queue: str, task_id: str | None = None) -> Wake:
        """Activity attempts of this queue may be ready to claim; `task_id`
        names the one a commit of this process scheduled (in process only)."""
        return cls((WakeKind.ACTIVITIES, namespace, task_queue), task_id)

    @classmethod
    def activity_stop(cls, task_id: str) -> Wake:
        """The running attempt of task `task_id` was fenced or asked to stop."""
        return cls((WakeKind.ACTIVITY_STOP, task_id))

    @classmethod
    def requests(cls, namespace: str, task_queue: str) -> Wake:
        """A query waits on this queue for a run no live worker holds."""
        return cls((WakeKind.REQUESTS, namespace, task_queue))

    @classmethod
    def request(cls, request_id: str) -> Wake:
        """Request `request_id` (a query, an update's acceptance) was answered."""
        return cls((WakeKind.REQUEST, request_id))

    @classmethod
    def delivered(cls, run_id: str) -> Wake:
        """A signal was delivered to run `run_id`'s code."""
        return cls((WakeKind.DELIVERED, run_id))

    @classmethod
    def update(cls, run_id: str, update_id: str) -> Wake:
        """Update `update_id` of run `run_id` was accepted or completed."""
        return cls((WakeKind.UPDATE, run_id, update_id))

    @classmethod
    def schedules(cls, namespace: str) -> Wake:
        """A schedule of `namespace` was created or changed, or a fire was buffered."""
        return cls((WakeKind.SCHEDULES, namespace))

    @classmethod
    def schedule_run_closed(cls, namespace: str) -> Wake:
        """A run that a schedule of `namespace` started closed."""
        return cls((WakeKind.SCHEDULES, namespace, "closed"))

    @classmethod
    def retention(cls, namespace: str) -> Wake:
        """The retention setting of `namespace` changed."""
        return cls((WakeKind.RETENTION, namespace))

    @classmethod
    def stopped(cls, run_id: str, notice: dict[str, Any]) -> Wake:
        """Run `run_id` closed; `notice` says how (this process only)."""
        return cls((WakeKind.STOPPED, run_id), notice, local=True)

    @classmethod
    def attempt_ended(cls, task_id: str, notice: dict[str, Any]) -> Wake:
        """An attempt of task `task_id` ended; `notice` says how (this process only)."""
        return cls((WakeKind.ATTEMPT_ENDED, task_id), notice, local=True)

    # -- matchers --------------------------------------------------------------

    @property
    def kind(self) -> WakeKind | None:
        """The kind, or None for a key this version does not know (sent by a
        newer process): a consumer ignores it, or treats it as `ANY`."""
        return _KINDS.get(self.key[0]) if self.key else None

    @property
    def subject(self) -> str:
        """What the wake-up names first: the run id, task id or request id
        (the namespace for ``RUNS``, ``ACTIVITIES``, ``REQUESTS``); "" for ``ANY``."""
        return self.key[1] if len(self.key) > 1 else ""

    @property
    def brings_deadline(self) -> bool:
        """Whether a watchdog should look for an earlier deadline after this
        wake-up: False only for a ``RUNS`` one marked `NO_DEADLINE`."""
        return self.data is not NO_DEADLINE

    def matches(self, keys: Collection[tuple[str, ...]]) -> bool:
        """Whether a waiter for `keys` should look again: one of them is named,
        or another process committed something (`ANY`)."""
        return self.key in keys or self.kind is WakeKind.ANY


#: The kinds whose wake-ups concern only the processes that asked for them
#: (`address`); every other kind concerns every process.
_BY_RUN = frozenset({WakeKind.RUN, WakeKind.DELIVERED, WakeKind.UPDATE})
_BY_QUEUE = frozenset({WakeKind.RUNS, WakeKind.ACTIVITIES, WakeKind.REQUESTS})


def address(key: tuple[str, ...]) -> tuple[str, ...] | None:
    """Who in other processes a wake-up with this key concerns, or None: every process.

    A driver that tells other processes about commits (PostgreSQL's NOTIFY)
    may send a wake-up only to the processes that asked for its address
    (`WakeHub.want`), instead of to all: ``("run", run_id)`` for what names
    one run (an op closed, a signal, a query, an update, the run's state: its
    owner and whoever waits on it), the key itself for what names a task
    queue (``RUNS``, ``ACTIVITIES``, ``REQUESTS``: the workers of that queue).
    The rest (``ANY``, schedules, retention, an attempt's stop, a request's
    answer, kinds this version does not know) goes to every process: rare,
    or wanted by whoever runs the namespace.
    """
    kind = _KINDS.get(key[0]) if key else None
    if kind in _BY_RUN and len(key) > 1:
        return (WakeKind.RUN.value, key[1])
    if kind in _BY_QUEUE and len(key) == 3:
        return key
    return None


def heard(keys: Iterable[tuple[tuple[str, ...], bool, bool]],
          here: str | None = None) -> list[Wake]:
    """Remote wake-ups from (key, no deadline, addressed here) triples heard
    from other processes, one per key in the order first heard; a key is
    `NO_DEADLINE` only if every notification of it said so (one that did not
    may bring a deadline), and addressed to this process (`here`, its
    `WakeHub.address`) if one notification was (a start addressed here: a
    worker here claims it at once)."""
    quiet: dict[tuple[str, ...], bool] = {}
    addressed: set[tuple[str, ...]] = set()
    for key, no_deadline, to_here in keys:
        quiet[key] = quiet.get(key, True) and no_deadline
        if to_here:
            addressed.add(key)
    runs = (WakeKind.RUNS.value,)
    return [Wake(key, NO_DEADLINE if q and key[:1] == runs else None, remote=True,
                 to=here if key in addressed and key[:1] == runs else None)
            for key, q in quiet.items()]


WakeCallback = Callable[[Wake], None]


class Listening:
    """Wake-ups naming some keys, heard since `WakeHub.listen` began: a
    wake-up that arrives while its listener is busy (reading) is kept for the
    next `wait`, so a read-then-wait loop loses none."""

    def __init__(self, hub: WakeHub, keys: Collection[tuple[str, ...]]) -> None:
        self._hub = hub
        self._keys = keys
        self._event = anyio.Event()

    def on_wake(self, wake: Wake) -> None:
        if wake.matches(self._keys):
            self._event.set()

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Until a wake-up for the keys (True; one kept since the last wait
        counts) or `timeout` seconds (False)."""
        self._hub.waiting += 1
        try:
            with anyio.move_on_after(timeout):
                await self._event.wait()
        finally:
            self._hub.waiting -= 1
        heard = self._event.is_set()
        if heard:
            self._event = anyio.Event()
        return heard


class WakeHub:
    """In-process fan-out of wake-ups; callbacks run on the host event loop.

    `waiting` counts the waits in progress (`Listening.wait`): a test can
    wait until a long poll really waits before it makes the change the poll
    should notice, instead of sleeping.

    `wanted` counts, by `address`, who here waits for wake-ups from other
    processes (`want`; `listen` says it for its keys): a driver that can
    address its notifications listens for those addresses only, and after it
    starts listening for one publishes a remote wake-up for each wanted key
    of it, so that a waiter re-reads whatever was committed before (no
    wake-up is lost between the read and the start of listening). A driver
    sets `on_wanted`, called whenever the set of addresses changes.

    `claim_here` registers who takes a task queue's activity attempts in this
    process: while one of them can (`claimed_here`), such a driver does not
    send that queue's ``ACTIVITIES`` wake-up of a commit made here to the
    other processes (docs/design/postgres-driver.md#wake-ups): the work is
    this process's to claim, and every other process of the queue would
    otherwise claim on it too, and find it taken.

    `execute_here` registers the runs a worker of this process executes: a
    ``RUN`` wake-up carrying its news (an op's outcome, a signal, a query) is
    for the run's executor, so a driver does not send it to other processes
    while that executor is here (`for_others`).

    `address` is this process's address for wake-ups addressed to one process
    (`Wake.to`), set by a driver that can send them (PostgreSQL; None
    elsewhere): a worker claims at once on a ``RUNS`` wake-up addressed to
    it, and leaves one addressed to another process to that process.

    `slot_limited` holds the task queues, as (namespace, name), whose runs
    this process's claims last found limited by a count of slots
    (``max_running`` or ``max_running_per_key``; `limit_slots`, kept by
    `durable.store.Store.claim_runs`). A driver hands it to each transaction
    (`durable.driver.Tx.slot_limited`): a close or a release of a run of such
    a queue wakes the queue's claimers in every process in the same commit
    (`durable.store.runs.slot_freed`, decision (at)), and a run of any other
    queue costs nothing more.
    """

    def __init__(self) -> None:
        self._callbacks: list[WakeCallback] = []
        self.address: str | None = None
        self.waiting = 0
        self.wanted: dict[tuple[str, ...], dict[tuple[str, ...], int]] = {}
        self.on_wanted: Callable[[], None] | None = None
        # replaced whole, never changed in place: a driver reads it on its own thread
        self._claimers: dict[tuple[str, ...], tuple[Callable[[], bool], ...]] = {}
        # the ``RUN`` keys of the runs executed here, with how many say so
        # (replaced whole, never changed in place, as `_claimers`)
        self._executing: dict[tuple[str, ...], int] = {}
        # replaced whole, never changed in place: a driver's thread reads it
        self.slot_limited: frozenset[tuple[str, str]] = frozenset()
        # the same for ``max_running_activities`` (`limit_activity_slots`)
        self.activity_slot_limited: frozenset[tuple[str, str]] = frozenset()

    def subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        """Call `callback` for every wake-up; returns the unsubscribe function."""
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def publish(self, wakes: Iterable[Wake]) -> None:
        """Deliver wake-ups to every subscriber (on the calling thread)."""
        wakes = list(wakes)
        if not wakes:
            return
        for callback in list(self._callbacks):
            for wake in wakes:
                callback(wake)

    def want(self, keys: Iterable[tuple[str, ...]]) -> Callable[[], None]:
        """Say that someone here waits for wake-ups naming `keys` from other
        processes too (see the class); returns the function that says it no more."""
        added: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        changed = False
        for key in keys:
            where = address(key)
            if where is None:
                continue  # sent to every process anyway
            counts = self.wanted.get(where)
            if counts is None:
                counts = self.wanted[where] = {}
                changed = True
            counts[key] = counts.get(key, 0) + 1
            added.append((where, key))
        if changed and self.on_wanted is not None:
            self.on_wanted()
        released = False

        def unwant() -> None:
            nonlocal released
            if released:
                return
            released = True
            gone = False
            for where, key in added:
                counts = self.wanted.get(where)
                if counts is None:
                    continue
                left = counts.get(key, 0) - 1
                if left > 0:
                    counts[key] = left
                else:
                    counts.pop(key, None)
                if not counts:
                    del self.wanted[where]
                    gone = True
            if gone and self.on_wanted is not None:
                self.on_wanted()

        return unwant

    def claim_here(self, key: tuple[str, ...], takes: Callable[[], bool]) -> Callable[[], None]:
        """Say that a claimer here takes the work a wake-up with `key` announces
        whenever `takes()` is true (it runs, has room, and claims everything
        such a wake-up may name); returns the function that says it no more.
        `takes` may be called on the driver's thread: it must only read."""
        self._claimers = {**self._claimers, key: (*self._claimers.get(key, ()), takes)}
        released = False

        def unclaim() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = tuple(t for t in self._claimers.get(key, ()) if t is not takes)
            claimers = dict(self._claimers)
            if left:
                claimers[key] = left
            else:
                claimers.pop(key, None)
            self._claimers = claimers

        return unclaim

    def claimed_here(self, key: tuple[str, ...]) -> bool:
        """Whether a claimer of this process takes the work that a wake-up with
        `key` announces now (`claim_here`)."""
        return any(takes() for takes in self._claimers.get(key, ()))

    def limit_slots(self, namespace: str, task_queue: str, limited: bool) -> None:
        """Say whether a claim here found the runs of this task queue limited by
        a count of slots (`slot_limited`)."""
        queue = (namespace, task_queue)
        if (queue in self.slot_limited) != limited:
            self.slot_limited = (self.slot_limited | {queue} if limited
                                 else self.slot_limited - {queue})

    def limit_activity_slots(self, namespace: str, task_queue: str, limited: bool) -> None:
        """Say whether a claim here found the activity attempts of this task
        queue limited by a count (``max_running_activities``:
        `activity_slot_limited`)."""
        queue = (namespace, task_queue)
        if (queue in self.activity_slot_limited) != limited:
            self.activity_slot_limited = (self.activity_slot_limited | {queue} if limited
                                          else self.activity_slot_limited - {queue})

    def execute_here(self, run_id: str) -> Callable[[], None]:
        """Say that a worker of this process executes run `run_id`; returns the
        function that says it no more."""
        key = Wake.run(run_id).key
        self._executing = {**self._executing, key: self._executing.get(key, 0) + 1}
        released = False

        def done() -> None:
            nonlocal released
            if released:
                return
            released = True
            executing = dict(self._executing)
            left = executing.pop(key, 1) - 1
            if left > 0:
                executing[key] = left
            self._executing = executing

        return done

    def for_others(self, wake: Wake) -> bool:
        """Whether other processes need to hear of this wake-up, committed here.

        Not a `local` one; not a ``RUN`` one that carries its news (an op's
        outcome, a signal, a query: `data`) for a run executed here
        (`execute_here`): the news is for the run's executor, which heard it
        in process. Why: a remote activity's outcome sent a NOTIFY per step
        on PostgreSQL, which nobody else read, while every listening backend
        of the database was woken to filter it, and the notifying commits of
        all processes queued on the server's one notification lock
        (docs/design/postgres-driver.md). A run closed, or changed without
        data, is still sent: whoever waits on it elsewhere re-reads it. If
        the run moved to another process meanwhile (its lease expired here),
        that process's resync at its fallback poll reads the outcome.
        """
        if wake.local:
            return False
        return not (wake.data is not None and wake.kind is WakeKind.RUN
                    and wake.key in self._executing)

    @contextmanager
    def listen(self, keys: Collection[tuple[str, ...]]) -> Iterator[Listening]:
        """Hear wake-ups naming `keys` (or `ANY`) for the duration of the block."""
        listening = Listening(self, keys)
        unsubscribe = self.subscribe(listening.on_wake)
        unwant = self.want(keys)
        try:
            yield listening
        finally:
            unwant()
            unsubscribe()

    async def wait(self, keys: Collection[tuple[str, ...]], timeout: float) -> bool:  # noqa: ASYNC109
        """Until a wake-up names one of `keys` (or `ANY`): True; or `timeout`
        seconds: False. Only wake-ups published after the call count; to
        miss none between reads, use `until`."""
        with self.listen(keys) as listening:
            return await listening.wait(timeout)

    async def until(self, keys: Collection[tuple[str, ...]],
                    read: Callable[[], Awaitable[T | None]], timeout: float,  # noqa: ASYNC109
                    *, poll: float = 0.5) -> T | None:
        """Call `read` until it returns something other than None, and return that.

        The one "wait until this changes" loop: `read` is called at once, then
        again after each wake-up naming one of `keys` (or another process's
        commit; one heard during a read is not lost), and at the latest every
        `poll` seconds (starting at `FIRST_POLL`, doubling), because a commit
        of another process is only announced while something watches the
        driver. None when `timeout` seconds pass first. `read` may raise to
        end the wait with an error.
        """
        deadline = anyio.current_time() + timeout
        interval = min(FIRST_POLL, poll)
        with self.listen(keys) as listening:
            while True:
                found = await read()
                if found is not None:
                    return found
                left = deadline - anyio.current_time()
                if left <= 0:
                    return None
                await listening.wait(min(interval, left))
                interval = min(interval * 2, poll)
