"""A run's history: numbered by the run's counter, stored as compact JSON."""

from __future__ import annotations

import json
import re

import pytest

from durable.driver import Tx
from durable.failure import Failure
from durable.store import Store
from durable.store.events import (
    _as_written,
    _plain,
    append_events,
    event_text,
    local_step_events,
    record_failure,
)
from durable.store.fastpath import append_events_of_runs
from durable.store.writes import RecordLocalActivity

from ._support import NS, T0, rows, started_and_claimed

pytestmark = pytest.mark.anyio


async def events(store: Store, run_id: str) -> list[tuple[int, str, str]]:
    found = await rows(store, "SELECT seq, type, data FROM events WHERE run_id = ? "
                       "ORDER BY seq", run_id)
    return [(r["seq"], r["type"], r["data"]) for r in found]


async def test_events_are_numbered_by_the_runs_own_counter_across_transactions(
        store: Store) -> None:
    run = await started_and_claimed(store, "numbered")
    before = await events(store, run.run_id)
    await store.driver.run(lambda tx: append_events(
        tx, run.run_id, [("Marked", {"n": 1}), ("Marked", {"n": 2})], T0))
    await store.driver.run(lambda tx: append_events(tx, run.run_id, [("Marked", {"n": 3})], T0))
    after = (await events(store, run.run_id))[len(before):]
    last = before[-1][0]
    assert [(seq, data) for seq, _, data in after] == [
        (last + 1, '{"n":1}'), (last + 2, '{"n":2}'), (last + 3, '{"n":3}')]  # compact


async def test_events_for_a_run_that_does_not_exist_are_not_written(store: Store) -> None:
    await store.driver.run(lambda tx: append_events(tx, "no-such-run", [("Marked", {})], T0))
    assert await rows(store, "SELECT * FROM events WHERE run_id = 'no-such-run'") == []


async def test_several_runs_events_keep_their_order_per_run(store: Store) -> None:
    a = await started_and_claimed(store, "a")
    b = await started_and_claimed(store, "b")
    start_a, start_b = len(await events(store, a.run_id)), len(await events(store, b.run_id))

    def program(tx: Tx):  # type: ignore[no-untyped-def]
        return append_events_of_runs(tx, [(b.run_id, ("X", {"i": 1})),
                                          (a.run_id, ("X", {"i": 2})),
                                          (b.run_id, ("X", {"i": 3}))], T0)

    await store.driver.run(program)
    assert [d for _, _, d in (await events(store, b.run_id))[start_b:]] == ['{"i":1}',
                                                                          '{"i":3}']
    assert [d for _, _, d in (await events(store, a.run_id))[start_a:]] == ['{"i":2}']


def test_a_local_steps_events_are_the_text_the_general_path_would_store() -> None:
    write = RecordLocalActivity(op_id="0:3", name="double", started_at=T0, attempts=2,
                                result='{"total":4}')
    (t1, scheduled), (t2, completed) = local_step_events(write)
    assert (t1, t2) == ("ActivityScheduled", "ActivityCompleted")
    assert scheduled == event_text({"op_id": "0:3", "activity_type": "double", "local": True})
    assert json.loads(str(completed)) == {"op_id": "0:3", "activity_type": "double",
                                          "local": True, "attempt": 2, "result": {"total": 4}}
    assert completed == event_text(json.loads(str(completed)))


async def test_a_recorded_failure_is_listed_by_describe(store: Store) -> None:
    run = await started_and_claimed(store, "failing")
    await store.driver.run(lambda tx: record_failure(
        run.run_id, Failure("application", "card declined"), T0))
    info = await store.describe(NS, "failing", None)
    assert [f["message"] for f in info["failures"]] == ["card declined"]


#: what `_plain` and `_as_written` replaced (issue 26), for comparison
_PLAIN_TEXT = re.compile(r'[ !#-\[\]-~]*')
_AS_WRITTEN = re.compile(r'null|true|false|0|-?[1-9][0-9]{0,17}|"[ !#-\[\]-~]*"')


@pytest.mark.parametrize("text", [
    "", "0", "00", "-0", "-", "7", "-7", "10", "-10", "123456789012345678",
    "1234567890123456789", "-123456789012345678", "-1234567890123456789", "01", "1.5",
    "1e3", "٣", "-٣", "²", "null", "true", "false", "nul", "None", "True", '""', '"',
    '"a"', '"a b~!#[]"', '"a\\"b"', '"a\\\\b"', '"\x7f"', '"\x1f"', '"é"', '"a"b"',
    "0:3", "bench_step", "a\\b", 'a"b', "\t", "\x7f", "é", " ", "~", "[]", "{}", "-a",
    '"-1"', " 1", "1 ",
])
def test_the_text_a_local_step_keeps_as_written_is_what_the_expressions_matched(
        text: str) -> None:
    assert _plain(text) == bool(_PLAIN_TEXT.fullmatch(text))
    assert _as_written(text) == bool(_AS_WRITTEN.fullmatch(text))
