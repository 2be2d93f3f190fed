"""Checking what users pass: one set of rules for durations, names and numbers."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from durable import ConfigurationError, _validate
from durable._validate import MAX_SECONDS, duration, name, optional_duration


@pytest.mark.parametrize(("value", "seconds"), [
    (0, 0.0), (1, 1.0), (2.5, 2.5), (timedelta(minutes=2), 120.0), (MAX_SECONDS, MAX_SECONDS),
])
def test_a_duration_is_seconds_as_a_number_or_a_timedelta(value: Any, seconds: float) -> None:
    result = duration(value, "Worker poll_interval")
    assert result == seconds and type(result) is float


@pytest.mark.parametrize(("value", "message"), [
    ("5", "must be a number of seconds or a datetime.timedelta, got '5' (str)"),
    (True, "must be a number of seconds or a datetime.timedelta, got True (bool)"),
    (None, "must be a number of seconds or a datetime.timedelta, got None"),
    (math.nan, "must be a finite number of seconds, got nan; leave it unset"),
    (math.inf, "must be a finite number of seconds, got inf; leave it unset"),
    (-1, "must be at least 0 seconds and at most 3.15576e+09 seconds (100 years), got -1"),
    (timedelta(days=-1), "must be at least 0 seconds"),
    (MAX_SECONDS * 2, "at most 3.15576e+09 seconds (100 years)"),
])
def test_a_bad_duration_is_refused_naming_the_field_and_the_rule(value: Any,
                                                                  message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        duration(value, "Worker poll_interval")
    assert str(caught.value).startswith("Worker poll_interval must be")
    assert message in str(caught.value)


def test_the_bounds_of_a_duration_are_the_callers() -> None:
    with pytest.raises(ConfigurationError, match="greater than 0 seconds"):
        duration(0.0, "lease_seconds", inclusive=False)
    with pytest.raises(ConfigurationError, match="at least 1 second and"):
        duration(0.5, "execution timeout", minimum=1)
    with pytest.raises(ConfigurationError, match=r"at most 3600 seconds, got 7200"):
        duration(7200, "poll_interval", maximum=3600)  # not "(100 years)": it is not
    assert duration(0.0, "grace") == 0.0


def test_infinity_means_no_limit_only_where_the_caller_says_so() -> None:
    assert duration(math.inf, "phase limit", unbounded=True) == math.inf
    with pytest.raises(ConfigurationError, match="finite"):
        duration(-math.inf, "phase limit", unbounded=True)
    with pytest.raises(ConfigurationError, match="finite"):
        duration(math.nan, "phase limit", unbounded=True)


def test_an_optional_duration_leaves_none_alone() -> None:
    assert optional_duration(None, "timeout") is None
    assert optional_duration(timedelta(seconds=3), "timeout") == 3.0
    with pytest.raises(ConfigurationError, match="timeout must be"):
        optional_duration("3", "timeout")


def test_every_duration_durable_accepts_goes_through_the_same_rules() -> None:
    """The faces that take durations refuse the same values with the same words."""
    from durable import ActivityOptions, Budget, ChildOptions, StartOptions

    cases = [
        lambda: ActivityOptions(start_to_close_timeout=math.nan),
        lambda: ChildOptions(cleanup_timeout=math.nan),
        lambda: StartOptions(execution_timeout=math.nan),
        lambda: Budget(timeout=math.nan),
    ]
    for make in cases:
        with pytest.raises(ConfigurationError, match="must be a finite number of seconds"):
            make()


@pytest.mark.parametrize(("value", "message"), [
    ("", "must not be empty"), ("a\x00b", "control character"), ("x" * 256, "256 characters"),
    ("\ud800", "lone surrogate"), (5, "must be a string"),
])
def test_a_bad_name_is_refused_with_why(value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        name(value, "workflow id")


def test_a_sqlite_path_meant_as_absolute_gets_the_four_slash_fix(tmp_path: Any) -> None:
    from durable._validate import sqlite_path_hint

    relative = str(tmp_path / "app.db").lstrip("/")  # what sqlite:///<abs> reads
    assert f"write sqlite:////{relative} (four slashes)" in sqlite_path_hint(relative)
    assert sqlite_path_hint(str(tmp_path / "app.db")) == ""  # absolute already
    assert sqlite_path_hint("no-such-dir-here/x/app.db") == ""  # no absolute reading either
    assert sqlite_path_hint(":memory:") == ""


# ---------------------------------------------------------------- options and URLs


def test_options_of_another_type_are_refused_at_the_call() -> None:
    from durable import ActivityOptions, StartOptions
    from durable._validate import options
    default = StartOptions()
    assert options(None, default, "options") is default
    given = StartOptions(priority=3)
    assert options(given, default, "options") is given
    with pytest.raises(ConfigurationError,
                       match=r"options must be a durable\.StartOptions, got \{'priority': 3\} "
                             r"\(dict\); build one: options=durable\.StartOptions\(\.\.\.\)"):
        options({"priority": 3}, default, "options")
    with pytest.raises(ConfigurationError, match="got ActivityOptions"):
        options(ActivityOptions(), default, "options")


def test_a_storage_url_is_a_string_and_a_path_gets_its_url() -> None:
    from pathlib import Path

    import durable
    with pytest.raises(ConfigurationError, match=r"got 5 \(int\)$"):
        durable.connect(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"for a SQLite file: 'sqlite:////srv/app\.db'"):
        durable.connect(Path("/srv/app.db"))  # type: ignore[arg-type]


def test_one_of_names_the_words_and_the_one_meant() -> None:
    words = ("pending", "running", "completed")
    assert _validate.one_of("running", words, "status") == "running"
    with pytest.raises(ConfigurationError, match=(
            r"^status must be one of pending, running, completed, got 'runing'; "
            r"did you mean 'running'\?$")):
        _validate.one_of("runing", words, "status")
    with pytest.raises(ConfigurationError, match=r"got 'waiting'$"):
        _validate.one_of("waiting", words, "status")
    with pytest.raises(ConfigurationError, match=r"got 3$"):
        _validate.one_of(3, words, "status")


@pytest.mark.parametrize("value", ["default", "billing-eu", "a", "team.orders:v2_1", "x" * 128])
def test_a_namespace_the_control_plane_can_address_is_taken(value: str) -> None:
    assert _validate.namespace(value) == value


@pytest.mark.parametrize("value", ["orders eu", "-orders", "заказы", "a/b", "x" * 129, ""])
def test_a_namespace_no_operators_tool_could_reach_is_refused(value: str) -> None:
    """An embedded client took any name; the X-Namespace header (the control
    plane, the web UI, the reference client) takes only the reference's
    form, so runs of such a namespace were out of every operator's reach."""
    with pytest.raises(ConfigurationError, match="namespace"):
        _validate.namespace(value)


@pytest.mark.anyio
async def test_a_client_refuses_such_a_namespace_at_the_call(tmp_path: Any) -> None:
    import durable

    with pytest.raises(ConfigurationError, match="namespace 'orders eu' cannot be used: a "
                                                 "namespace is 1 to 128 letters"):
        await durable.connect(f"sqlite:///{tmp_path}/n.db", namespace="orders eu")
    async with durable.connect(f"sqlite:///{tmp_path}/n.db") as client:
        with pytest.raises(ConfigurationError, match="header that takes only these"):
            client.with_namespace("a/b")
        with pytest.raises(ConfigurationError, match="namespace 'a b' cannot be used"):
            await client.set_retention("a b", days=1)
