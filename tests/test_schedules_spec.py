"""`ScheduleSpec`: fire times, daylight-saving changes, bounds and bad input.

The instants below are worked out by hand from each zone's 2026 rules, so a
change of cron library (or of how we call it) that moves a fire shows here
first. The engine tests (tests/test_schedules.py) run the same transitions
through real workers on the virtual clock.
"""

from __future__ import annotations

import datetime as dt

import pytest

import durable
from durable import ScheduleSpec
from durable.schedules import fire_workflow_id, jitter_delay

UTC = dt.UTC


def z(text: str) -> float:
    """A UTC instant written as ``2026-03-29T01:00``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def fires(spec: ScheduleSpec, start: str, count: int) -> list[str]:
    out: list[str] = []
    at: float | None = z(start)
    while len(out) < count:
        assert at is not None
        at = spec.next_after(at)
        if at is None:
            break
        out.append(dt.datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M"))
    return out


# ---------------------------------------------------------------- daylight saving


def test_amsterdam_spring_forward_fires_a_skipped_time_once_right_after_the_gap() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone="Europe/Amsterdam")
    # 03-29: 02:30 does not exist (02:00 CET -> 03:00 CEST): fires at 03:00 CEST
    assert fires(spec, "2026-03-27T12:00", 3) == [
        "2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"]


def test_amsterdam_fall_back_fires_a_repeated_time_once() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone="Europe/Amsterdam")
    # 10-25: 02:30 happens twice (CEST, then CET): the first one only
    assert fires(spec, "2026-10-23T12:00", 3) == [
        "2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"]


def test_amsterdam_hourly_fires_every_real_hour_across_both_changes() -> None:
    spec = ScheduleSpec(cron="0 * * * *", timezone="Europe/Amsterdam")
    assert fires(spec, "2026-03-28T22:30", 4) == [
        "2026-03-28T23:00", "2026-03-29T00:00", "2026-03-29T01:00", "2026-03-29T02:00"]
    assert fires(spec, "2026-10-24T23:30", 4) == [
        "2026-10-25T00:00", "2026-10-25T01:00", "2026-10-25T02:00", "2026-10-25T03:00"]


def test_new_york_both_changes() -> None:
    spring = ScheduleSpec(cron="30 2 * * *", timezone="America/New_York")
    assert fires(spring, "2026-03-06T12:00", 3) == [
        "2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"]
    autumn = ScheduleSpec(cron="30 1 * * *", timezone="America/New_York")
    assert fires(autumn, "2026-10-30T12:00", 3) == [
        "2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"]


def test_lord_howe_half_hour_changes() -> None:
    # 10-04: 02:00 LHST (+10:30) -> 02:30 LHDT (+11): 02:15 does not exist
    spring = ScheduleSpec(cron="15 2 * * *", timezone="Australia/Lord_Howe")
    assert fires(spring, "2026-10-02T00:00", 3) == [
        "2026-10-02T15:45", "2026-10-03T15:30", "2026-10-04T15:15"]
    # 04-05: 02:00 LHDT (+11) -> 01:30 LHST (+10:30): 01:45 happens twice
    autumn = ScheduleSpec(cron="45 1 * * *", timezone="Australia/Lord_Howe")
    assert fires(autumn, "2026-04-03T00:00", 3) == [
        "2026-04-03T14:45", "2026-04-04T14:45", "2026-04-05T15:15"]


def test_a_seconds_field_follows_the_same_rule_at_daylight_saving_changes() -> None:
    # cronsim applies Debian's rule to five fields only: "0 30 2 * * *" skipped
    # Berlin's spring-forward day and fired twice on its fall-back day
    def seconds(spec: ScheduleSpec, start: str, count: int) -> list[str]:
        out, at = [], z(start)
        for _ in range(count):
            at = spec.next_after(at)
            out.append(dt.datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        return out

    for cron, second in (("0 30 2 * * *", "00"), ("15 30 2 * * *", "15")):
        spec = ScheduleSpec(cron=cron, timezone="Europe/Berlin")
        assert seconds(spec, "2026-03-28T00:00", 3) == [
            f"2026-03-28T01:30:{second}", f"2026-03-29T01:00:{second}",
            f"2026-03-30T00:30:{second}"]
        assert seconds(spec, "2026-10-24T00:00", 3) == [
            f"2026-10-24T00:30:{second}", f"2026-10-25T00:30:{second}",
            f"2026-10-26T01:30:{second}"]
        five = ScheduleSpec(cron=cron.split(" ", 1)[1], timezone="Europe/Berlin")
        assert [t[:16] for t in seconds(spec, "2026-03-28T00:00", 3)] == fires(
            five, "2026-03-28T00:00", 3)
    # several seconds in a fixed minute, and a wildcard minute, still fire as written
    spec = ScheduleSpec(cron="*/20 30 2 * * *", timezone="Europe/Berlin")
    assert seconds(spec, "2026-03-29T00:59:59", 4) == [
        "2026-03-29T01:00:00", "2026-03-29T01:00:20", "2026-03-29T01:00:40",
        "2026-03-30T00:30:00"]
    spec = ScheduleSpec(cron="0 0 * * * *", timezone="Europe/Berlin")
    assert seconds(spec, "2026-10-24T23:30", 4) == [
        "2026-10-25T00:00:00", "2026-10-25T01:00:00", "2026-10-25T02:00:00",
        "2026-10-25T03:00:00"]


def test_an_interval_is_real_time_whatever_the_zone() -> None:
    spec = ScheduleSpec(every=3600, offset=900)
    assert fires(spec, "2026-03-29T00:20", 3) == [
        "2026-03-29T01:15", "2026-03-29T02:15", "2026-03-29T03:15"]


# ---------------------------------------------------------------- composition and bounds


def test_several_crons_and_an_interval_fire_once_per_instant() -> None:
    spec = ScheduleSpec(cron=["0 * * * *", "30 * * * *", "0 */2 * * *"], every=1800)
    assert fires(spec, "2026-01-01T00:00", 4) == [
        "2026-01-01T00:30", "2026-01-01T01:00", "2026-01-01T01:30", "2026-01-01T02:00"]


def test_a_seconds_field_fires_every_second() -> None:
    spec = ScheduleSpec(cron="*/20 * * * * *")
    first = spec.next_after(z("2026-01-01T00:00"))
    assert first == z("2026-01-01T00:00") + 20


def test_start_and_end_bound_the_fire_times() -> None:
    start = dt.datetime(2026, 1, 1, 3, tzinfo=UTC)
    end = dt.datetime(2026, 1, 1, 6, tzinfo=UTC)
    spec = ScheduleSpec(every=3600, start_at=start, end_at=end)
    # from long before: the first fire is start_at itself; end_at is excluded
    assert fires(spec, "2025-12-31T00:00", 10) == [
        "2026-01-01T03:00", "2026-01-01T04:00", "2026-01-01T05:00"]
    assert list(spec.fire_times(z("2026-01-01T04:00"), z("2026-01-02T00:00"))) == [
        z("2026-01-01T04:00"), z("2026-01-01T05:00")]


def test_cron_nicknames_fire_as_their_fields_in_the_zone() -> None:
    """``@daily`` and its kin (the reference engine's cron library, Debian cron
    and Temporal take them) fire as the fields they stand for, in the spec's
    zone; the spec keeps them as written."""
    daily = ScheduleSpec(cron="@daily", timezone="Europe/Amsterdam")
    assert fires(daily, "2026-03-28T00:00", 2) == ["2026-03-28T23:00", "2026-03-29T22:00"]
    assert daily.to_dict()["cron"] == ["@daily"]
    assert fires(ScheduleSpec.from_dict(daily.to_dict()), "2026-03-28T00:00", 1) == [
        "2026-03-28T23:00"]
    for nickname, first in (("@hourly", "2026-01-01T01:00"), ("@weekly", "2026-01-04T00:00"),
                            ("@monthly", "2026-02-01T00:00"), ("@yearly", "2027-01-01T00:00"),
                            ("@annually", "2027-01-01T00:00"), ("@midnight", "2026-01-02T00:00"),
                            ("@DAILY", "2026-01-02T00:00")):
        assert fires(ScheduleSpec(cron=nickname), "2026-01-01T00:00", 1) == [first], nickname
    with pytest.raises(durable.ConfigurationError, match=r"or a nickname .*@daily"):
        ScheduleSpec(cron="@fortnightly")


def test_a_spec_survives_storage() -> None:
    spec = ScheduleSpec(cron=["0 2 * * *"], every=600, offset=60, timezone="Europe/Amsterdam",
                        start_at=dt.datetime(2026, 1, 1, tzinfo=UTC))
    again = ScheduleSpec.from_dict(spec.to_dict())
    assert again.to_dict() == spec.to_dict()
    assert fires(again, "2026-02-01T00:00", 5) == fires(spec, "2026-02-01T00:00", 5)


def test_fire_ids_and_jitter_are_fixed_by_the_fire() -> None:
    at = z("2026-04-12T02:00")
    assert fire_workflow_id("nightly-import", at) == "nightly-import-20260412T020000Z"
    delays = {jitter_delay("default", "s", at, 60, at + 3600) for _ in range(3)}
    assert len(delays) == 1 and 0 <= delays.pop() < 60
    # jitter never pushes a fire past the next one
    assert 0 <= jitter_delay("default", "s", at, 3600, at + 10) < 10
    others = {jitter_delay("default", "s", at + 3600 * k, 60, None) for k in range(20)}
    assert len(others) > 10  # spread, not one fixed delay


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "needs cron="),
    ({"cron": "61 * * * *"}, "not a valid cron expression"),
    ({"cron": "0 0 30 2 *"}, "not a valid cron expression"),
    ({"cron": 5}, "must be a cron expression or a list"),
    ({"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "not a known IANA time zone"),
    # names are case-sensitive here: the one meant is named
    ({"cron": "0 2 * * *", "timezone": "europe/amsterdam"},
     r"'europe/amsterdam' is not a known IANA .*; did you mean 'Europe/Amsterdam'\?"),
    ({"cron": "0 2 * * *", "timezone": "utc"}, r"did you mean 'UTC'\?"),
    ({"every": 0}, "ScheduleSpec.every must be at least 1"),
    ({"every": 1.5}, "whole number of seconds"),
    ({"every": 60, "offset": 60}, "offset must be less than every"),
    ({"cron": "* * * * *", "offset": 5}, "give every= too"),
    ({"every": 60, "start_at": dt.datetime(2026, 1, 1)}, "timezone-aware"),
    ({"every": 60, "start_at": dt.datetime(2026, 1, 2, tzinfo=UTC),
      "end_at": dt.datetime(2026, 1, 1, tzinfo=UTC)}, "must be after start_at"),
])
def test_bad_specs_are_refused_naming_the_fix(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(durable.ConfigurationError, match=message):
        ScheduleSpec(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["start_at", "end_at"])
@pytest.mark.parametrize("value", ["l\u00d1", 17, ["2026-01-01"]])
def test_a_spec_from_the_wire_with_a_bad_instant_is_refused_naming_the_field(
        field: str, value: object) -> None:
    # schemathesis sent {"end_at": "lÑ"} to POST /api/schedules: a 500 before this
    with pytest.raises(durable.ConfigurationError, match=f"{field} must be an ISO 8601"):
        ScheduleSpec.from_dict({"every": 60, field: value})
