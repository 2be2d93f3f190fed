"""The examples run as a user runs them (a fresh process, the embedded SQLite
default) and say what their docstrings promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_nightly_import_shows_completed_cancelled_and_unknown(tmp_path: Path,
                                                             backend: str) -> None:
    args = [f"sqlite:///{tmp_path / 'nightly.db'}"] + (["--trio"] if backend == "trio" else [])
    out = run_example("nightly_import.py", *args)
    first, second, third = out.split("\n1. ")[-1].split("\n2. ")[0], \
        out.split("\n2. ")[1].split("\n3. ")[0], out.split("\n3. ")[1]
    assert "result: {'night': 'n1', 'loaded': 8}" in first
    assert "phases: read completed, transform completed, load completed" in first
    assert "status: cancelled  reason: cancelled: operator: the source sent" in second
    assert "load cancelled" in second
    # the cleanup counted what was written: the unit in flight was waited for
    noted = int(second.split("cleanup noted: partial load: ")[1].split(" rows")[0])
    assert noted >= 3, second
    assert f"units completed in history: {noted}, rows in the warehouse: {noted}" in second
    assert "status: unknown" in third and "could not be confirmed" in third
    assert "in phase: load" in third and "progress: 7/8 units" in third
    assert "result: {'night': 'n3', 'loaded': 8}" in third
    assert third.rstrip().endswith("warehouse rows of n3: 8 (each exactly once)")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_approval_example_runs_approved_and_timed_out(tmp_path: Path, backend: str) -> None:
    env = {"DURABLE_BACKEND": backend}
    approved = run_example("approval.py", f"sqlite:///{tmp_path / 'a.db'}", env=env)
    timed_out = run_example("approval.py", f"sqlite:///{tmp_path / 'b.db'}", "--no-one",
                            env=env)
    assert "update rejected: a limit must be between 1 and 100000" in approved
    assert "'outcome': 'paid hold-p-7-2500 (approved by ann)'" in approved
    assert "'refused': ['ann: 2500 is over the limit of 1000']" in approved
    assert "UpdateCompleted" in approved and "ConditionSatisfied" in approved
    assert "'outcome': 'no approval in time, money released'" in timed_out
    assert "ConditionTimedOut" in timed_out


def test_order_example_prints_where_its_database_is(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'orders.db'}"
    out = run_example("order.py", url)
    assert f"database: {url}" in out and f'durable --db "{url}" describe order-o-1' in out
    assert "status: completed" in out
