"""The scheduler's pass writes a batch of fires together, and that changes
nothing but the statement count (no timing: counts and stored rows).

`benchmarks/schedules.py --statements` counts the statements a pass spends,
BEGIN and COMMIT included: 13 per fire before 0.3.0, 9 per fire when each
pass fired one schedule, and now 9 per pass however many schedules are due
together (one multi-row insert per table, one UPDATE of the schedules,
`durable.store.schedule_pass`); a pass that trims its schedules' records
costs two more, for all of them at once. A change that adds a round trip
shows here, not only in a loaded benchmark.

The batched pass must fire exactly as one schedule a transaction did: the
same scenario (every overlap policy, a taken workflow id, max runs,
a catch-up of several fires per schedule in one pass, waiting fires started
when their runs close, trims) is played in two namespaces of one database,
once as before batching (one schedule a pass, every statement sent as it
comes) and once batched, and every stored row is compared.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

import durable
from durable import Overlap, ScheduleSpec, workflow
from durable.clock import VirtualClock
from durable.driver import Program, Tx, q
from durable.schedules import fire_workflow_id
from durable.store import schedule_pass, schedules
from durable.store.schedules import Firing

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "schedules.py"
START = dt.datetime(2026, 1, 1, 0, 0, 30, tzinfo=dt.UTC).timestamp()
F1 = START + 30  # every schedule's first fire: 00:01:00

pytestmark = pytest.mark.anyio
RANDOM_ID = re.compile(r"\b[0-9a-f]{32}\b")


@workflow.defn(name="sched_pass_noop")
async def noop() -> None:
    return None


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_schedules", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_pass_costs_nine_statements_however_many_schedules_fire(
        tmp_path: Path) -> None:
    bench = _bench()
    one = await bench.statements_per_fire(f"sqlite:///{tmp_path / 'one.db'}",
                                          schedules=10, minutes=1, together=1)
    assert one == (9.0, 9.0)  # one due schedule a pass: 9 a fire, as before batching
    # ten due together: one pass of 9; over ten minutes one pass trims (two more)
    ten = await bench.statements_per_fire(f"sqlite:///{tmp_path / 'ten.db'}",
                                          schedules=10, minutes=10, together=10)
    assert ten == (0.92, 9.2)


# ---------------------------------------------------------------- same rows either way

SCHEDULES: dict[str, dict[str, Any]] = {
    "allow": {"overlap": Overlap.ALLOW_ALL},
    "skip": {"overlap": Overlap.SKIP},
    "one": {"overlap": Overlap.BUFFER_ONE},
    "all": {"overlap": Overlap.BUFFER_ALL},
    "cancel": {"overlap": Overlap.CANCEL_OTHER},
    "term": {"overlap": Overlap.TERMINATE_OTHER},
    "max": {"overlap": Overlap.ALLOW_ALL, "max_runs": 2},
    "taken": {"overlap": Overlap.ALLOW_ALL},
}


async def _fire(client: durable.Client, now: float, limit: int) -> None:
    """What the scheduler does at `now`: passes until nothing more is due."""
    while (await client.store.fire_schedules(client.namespace, now, limit, False)).more:
        pass


async def _close(client: durable.Client, *schedules: str) -> None:
    """Terminate the open runs of these schedules (all when none is named), and
    start the fires that waited for them, one second later (nothing is due then:
    the pass only starts waiting fires, the same way in both namespaces)."""
    for run in await client.list(status="pending", limit=1000):
        if not schedules or run["workflow_id"].rsplit("-", 1)[0] in schedules:
            await client.get_handle(run["workflow_id"]).terminate("test")
    await client.store.fire_schedules(client.namespace, client.clock.now(), 100, True)


async def _play(client: durable.Client, limit: int) -> None:
    assert isinstance(client.clock, VirtualClock)
    for sid, options in SCHEDULES.items():
        await client.create_schedule(sid, ScheduleSpec(every=60), noop, **options)
    await client.start(noop, id=fire_workflow_id("taken", F1))  # the fire's id, by hand
    client.clock.advance_to(F1 + 0.5)
    await _fire(client, F1 + 0.5, limit)
    await _fire(client, F1 + 60.5, limit)  # every policy meets an open run
    client.clock.advance_to(F1 + 61)
    await _close(client, "one", "all", "cancel")
    # no scheduler for four minutes: each schedule catches up four fires in one pass,
    # each fire meeting the run its previous fire started in the same pass
    await _fire(client, F1 + 5 * 60 + 0.5, limit)
    for minute in range(6, 17):  # the records are trimmed (every 10 fires)
        client.clock.advance_to(F1 + minute * 60 - 1)
        if minute % 3 == 1:
            await _close(client, "one", "all", "cancel")
        elif minute % 3 == 2:
            await _close(client)
        await _fire(client, F1 + minute * 60 + 0.5, limit)


async def _rows(client: durable.Client) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the scenario stored in the client's namespace, minus the
    namespace and random ids (runs', cancellation requests')."""
    namespace = client.namespace

    def read(tx: Tx) -> Program[dict[str, list[tuple[Any, ...]]]]:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for name, sql in {
            "schedules": "SELECT * FROM schedules WHERE namespace = ?",
            "fires": "SELECT * FROM schedule_fires WHERE namespace = ?",
            "workflows": "SELECT * FROM workflows WHERE namespace = ?",
            "runs": "SELECT * FROM runs WHERE namespace = ?",
            "events": "SELECT r.workflow_id, e.seq, e.type, e.recorded_at, e.data FROM "
                      "events e JOIN runs r ON r.run_id = e.run_id WHERE r.namespace = ?",
        }.items():
            rows = yield q(sql, namespace)
            out[name] = sorted(
                (tuple((k, RANDOM_ID.sub("<id>", v) if isinstance(v, str) else v)
                       for k, v in dict(row).items()
                       if k not in ("namespace", "run_id", "current_run_id", "id"))
                 for row in rows), key=repr)
        return out

    return await client.store.driver.run(read, write=False)


def _as_before_batching(patch: pytest.MonkeyPatch) -> None:
    """The scheduler's pass as it was before batching: every statement sent as it
    comes, each schedule read and saved by itself (`Firing.load`, `Firing.finish`)."""

    def run(self: schedule_pass.Held, program: Program[Any]) -> Program[Any]:
        return (yield from program)

    def load_all(namespace: str, firings: list[Firing]) -> Program[None]:
        for firing in firings:
            yield from firing.load(firing.s.next_fire_at)

    def trim_all(namespace: str, firings: list[Firing], max_params: int) -> Program[None]:
        return (yield from ())  # (finish trims)

    def save_all(namespace: str, firings: list[Firing], now: float,
                 max_params: int) -> Program[None]:
        for firing in firings:
            yield from firing.finish()

    patch.setattr(schedule_pass.Held, "run", run)
    for replaced in (load_all, trim_all, save_all):
        patch.setattr(schedule_pass, replaced.__name__, replaced)


async def test_a_batched_pass_stores_what_one_schedule_a_pass_stored(db_url: str) -> None:
    stored = {}
    for namespace, limit in (("before", 1), ("batch", 100)):
        with pytest.MonkeyPatch.context() as patch:
            for module in (schedules, schedule_pass):  # trims that delete, in fewer minutes
                patch.setattr(module, "RECENT_KEPT", 5)
            if namespace == "before":
                _as_before_batching(patch)
            async with durable.connect(db_url, namespace=namespace,
                                       clock=VirtualClock(START)) as client:
                await _play(client, limit)
                stored[namespace] = await _rows(client)
    expected, got = stored["before"], stored["batch"]
    for table in expected:
        assert got[table] == expected[table], table
    started = {dict(r)["workflow_id"] for r in got["fires"] if dict(r)["outcome"] == "started"}
    runs = [dict(r)["workflow_id"] for r in got["runs"] if dict(r)["schedule_id"]]
    # one run per started fire (the record keeps the recent ones), no other
    assert started <= set(runs)
    assert len(runs) == sum(int(dict(r)["fires_count"]) for r in got["schedules"])
    outcomes = {(dict(r)["schedule_id"], dict(r)["outcome"], dict(r)["reason"])
                for r in got["fires"]}
    closed = {dict(r)["closed_reason"] for r in got["runs"]}
    # the scenario reached the paths it means to compare
    assert {("skip", "skipped", "overlap"), ("one", "skipped", "buffer_full"),
            ("all", "buffered", None)} <= outcomes
    assert any("terminate_other" in (reason or "") for reason in closed)
    assert any("cancel_other" in dict(r)["cancellation"] or "" for r in got["runs"]
               if dict(r)["cancellation"])
    assert len(got["fires"]) < 8 * 17  # trimmed
