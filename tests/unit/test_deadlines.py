"""The Deadlines value: which deadline binds, which expired, what is left."""

from __future__ import annotations

import math

from durable import Deadlines


def test_an_unbounded_run_has_no_earliest_and_infinite_time() -> None:
    d = Deadlines()
    assert d.earliest is None
    assert d.expired(1e12) is None
    assert d.remaining(0.0) == math.inf


def test_earliest_is_the_smallest_set_deadline() -> None:
    assert Deadlines(execution=300.0, run=200.0).earliest == 200.0
    assert Deadlines(execution=300.0, run=200.0, cleanup=250.0).earliest == 200.0
    assert Deadlines(run=200.0, cleanup=150.0).earliest == 150.0
    assert Deadlines(execution=10.0).earliest == 10.0


def test_expired_names_the_earliest_due_deadline_and_its_instant() -> None:
    d = Deadlines(execution=300.0, run=200.0, cleanup=250.0)
    assert d.expired(199.9) is None
    assert d.expired(200.0) == ("run_timeout", 200.0)  # due at the instant itself
    assert d.expired(260.0) == ("run_timeout", 200.0)
    assert Deadlines(execution=100.0, run=200.0).expired(500.0) == ("execution_timeout", 100.0)
    assert Deadlines(cleanup=5.0).expired(5.0) == ("cleanup_deadline", 5.0)


def test_expired_ties_are_broken_by_kind_name() -> None:
    assert Deadlines(execution=100.0, run=100.0, cleanup=100.0).expired(100.0) == (
        "cleanup_deadline", 100.0)
    assert Deadlines(execution=100.0, run=100.0).expired(100.0) == ("execution_timeout", 100.0)


def test_remaining_counts_down_to_the_binding_deadline_never_below_zero() -> None:
    d = Deadlines(execution=300.0, run=200.0)
    assert d.remaining(150.0) == 50.0
    assert d.remaining(200.0) == 0.0
    assert d.remaining(1000.0) == 0.0


def test_with_and_without_cleanup_return_new_values() -> None:
    d = Deadlines(execution=300.0, run=200.0)
    cleaning = d.with_cleanup(120.0)
    assert cleaning == Deadlines(300.0, 200.0, 120.0)
    assert cleaning.earliest == 120.0
    assert d.cleanup is None  # frozen: the original is unchanged
    assert cleaning.without_cleanup() == d
    assert cleaning.with_cleanup(None).earliest == 200.0
