"""Smoke tests of the like-for-like benchmark harness (`benchmarks/run.py`).

They prove the harness runs end to end on this build (real SQLite files, real
child processes) and writes what docs/benchmarks.md is made from; they assert
no timings (machines are noisy).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


def _run(tmp_path: Path, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUN), "--quick", "--db", "sqlite", "--sqlite-dir", str(tmp_path),
         "--out", str(tmp_path / "out.json"), *argv],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )


def test_quick_run_of_ours_measures_every_workload_against_the_floor(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--variants", "ours,ours-batched,floor", "--floor-seconds", "0.05")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / "out.json").read_text())

    per_step = [c for c in report["cells"] if c["variant"] == "ours"]
    assert sorted(c["workload"] for c in per_step) == sorted(
        ["sequential", "concurrent", "concurrent_remote", "taskgroup"])
    for cell in per_step:
        assert cell["errors"] == [], cell["errors"]
        assert cell["steps_per_s"]["median"] > 0
        assert cell["x_floor"]["median"] > 0  # related to the floor of the same round
        (result,) = cell["rounds"].values()
        assert result["storage"]["synchronous"] == "NORMAL"

    floor = report["floor"][0]["figures"]
    assert {"wal-normal/inline/us", "wal-normal/to_thread/us", "wal-full/queue_thread/us",
            "delete-full/inline/us", "hop_to_thread/us", "wal-normal/step_inline/us",
            "wal-full/step_queue_thread/us"} <= set(floor)
    assert "delete-full/step_inline/us" not in floor  # DBOS's mode: ours never runs in it

    # the batched variant is measured when the build has it, else said to be skipped
    batched = [c for c in report["cells"] if c["variant"] == "ours-batched"]
    if batched:
        assert {c["workload"] for c in batched} == {"sequential", "concurrent", "taskgroup"}
    else:
        assert any("batched recording not available in this build" in n
                   for n in report["notes"])
        assert "skipped: batched recording not available in this build" in proc.stdout

    md = (tmp_path / "out.md").read_text()
    assert "| workload | storage | variant | settings | figure | x floor |" in md
    assert "benchmarks/run.py --quick" in md
    assert md == report["markdown"]


@pytest.mark.skipif(importlib.util.find_spec("dbos") is None,
                    reason="dbos is not installed (pip install -e '.[bench]')")
def test_quick_run_forces_our_sqlite_settings_on_dbos(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--variants", "dbos-wal-full,ours-full", "--workloads", "a",
                "--timed-runs", "2")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    report = json.loads((tmp_path / "out.json").read_text())
    (dbos,) = [c for c in report["cells"] if c["variant"] == "dbos-wal-full"]
    (result,) = dbos["rounds"].values()
    assert result["sqlite_pragmas"]["observed"] == [{"journal_mode": "wal",
                                                     "synchronous": "FULL"}]
    # --timed-runs: both sides time that many runs in their process (the median counts)
    (ours,) = [c for c in report["cells"] if c["variant"] == "ours-full"]
    assert [len(r["runs"]) for c in (dbos, ours) for r in c["rounds"].values()] == [2, 2]
    assert "timed runs per measurement: 2" in report["markdown"]
    (pair,) = [c for c in report["comparisons"] if c["dbos"] == "dbos-wal-full"]
    assert pair["ours"] == "ours-full" and pair["factor"]["median"] > 0


def test_unknown_workload_is_rejected_with_the_valid_names(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--workloads", "a,e")
    assert proc.returncode != 0
    assert "--workloads: unknown 'e'" in proc.stderr
    assert "taskgroup" in proc.stderr and not (tmp_path / "out.json").exists()
