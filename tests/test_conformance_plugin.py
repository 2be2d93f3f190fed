"""The conformance suite as shipped: an outside project runs it with the plugin
`durable.testing.conformance` alone (none of durable's tests/ directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SELECTED = "test_duplicate_id_is_rejected"


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DURABLE_CONFORMANCE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", SELECTED,
         *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_an_outside_project_runs_the_suite_with_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["durable.testing.conformance"]\n')
    (tmp_path / "test_my_driver.py").write_text(
        "from durable.testing.conformance.engine import *  # noqa: F403\n")
    done = _run(tmp_path, "--durable-url", "sqlite:///{tmp}/durable.db")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout  # on asyncio and trio


def test_without_storage_the_suite_says_how_to_give_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["durable.testing.conformance"]\n')
    (tmp_path / "test_my_driver.py").write_text(
        "from durable.testing.conformance.engine import *  # noqa: F403\n")
    done = _run(tmp_path)
    assert done.returncode != 0
    assert "define a `durable_url` fixture, pass --durable-url" in done.stdout + done.stderr
