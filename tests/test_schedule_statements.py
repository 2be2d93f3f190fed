"""What one scheduled fire costs in round trips, pinned (no timing: a count).

`benchmarks/schedules.py --statements` counts the statements the scheduler's
pass spends per fire when each transaction fires one due schedule, BEGIN and
COMMIT included: 13 before 0.3.0's batching, 9 since (the due select also
reads the next due time; the open-fires read also answers the fire's
checks; closed fires are flagged at the record's trim; a new run's first
event goes in with its counter). PostgreSQL pays each as a round trip, so a
change that adds one shows here, not only in a loaded benchmark.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "schedules.py"

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_a_scheduled_fire_costs_nine_statements(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_schedules", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    per_fire = await bench.statements_per_fire(f"sqlite:///{tmp_path / 's.db'}",
                                               schedules=10, minutes=1)
    assert per_fire == 9.0
