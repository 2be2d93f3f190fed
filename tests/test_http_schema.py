"""Property-based conformance of the control plane to its own OpenAPI document.

schemathesis (4.x) reads /api/openapi.json from a real server on a loopback
port (`durable.http.serve` in a child process) and sends generated requests
to every route, valid and invalid, with an operator token, with a viewer
token and with none; every check runs except `positive_data_acceptance`
(a schema-valid request may still be refused, with a documented 4xx, for
what no schema can say: an unknown workflow type, a cursor this server never
issued). It must find no server error and no response that breaks the spec.

The example count is kept small so the suite stays fast (the two runs go in
parallel). ``DURABLE_SCHEMATHESIS_FULL=1`` adds the examples and coverage
phases and more examples per route (a few minutes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable.http.routes import operations

FULL = os.environ.get("DURABLE_SCHEMATHESIS_FULL") == "1"
TOKENS = {"schema-operator": "operator", "schema-viewer": "viewer"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A control plane (SQLite, long polls capped at 1 s) in a child process; the
    fuzzer sends unknown tokens on purpose, so failed authentications are not
    throttled (else most of its requests would only meet the 429)."""
    script = textwrap.dedent(f"""
        import sys
        import durable.http
        durable.http.serve({f"sqlite:///{tmp_path / 'schema.db'}"!r}, port=0,
                           tokens={TOKENS!r}, max_wait=1, max_auth_failures=0,
                           on_ready=lambda port: print(port, flush=True))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_TOKEN")}
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port.isdigit():
        process.kill()
        pytest.fail("the control plane did not start")
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


def schemathesis(url: str, workdir: Path, *, token: str | None, seed: int,
                 ) -> subprocess.Popen[str]:
    executable = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert executable, "schemathesis is not installed (pip install -e '.[dev]')"
    phases = "examples,coverage,fuzzing,stateful" if FULL else "fuzzing,stateful"
    args = [executable, "run", f"{url}/api/openapi.json", "--checks", "all",
            "--exclude-checks", "positive_data_acceptance", "--phases", phases,
            "--max-examples", "25" if FULL else "5", "--seed", str(seed),
            "--request-timeout", "10", "--no-color"]
    if token is not None:
        args += ["-H", f"Authorization: Bearer {token}"]
    workdir.mkdir(exist_ok=True)
    return subprocess.Popen(args, cwd=workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_every_route_conforms_to_the_spec_with_and_without_auth(
    server: str, tmp_path: Path
) -> None:
    runs = {
        "operator": schemathesis(server, tmp_path / "operator", token="schema-operator", seed=1),
        "no token": schemathesis(server, tmp_path / "anonymous", token=None, seed=2),
    }
    if FULL:
        runs["viewer"] = schemathesis(server, tmp_path / "viewer", token="schema-viewer",
                                      seed=3)
    for who, process in runs.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"schemathesis ({who}) found problems:\n{output}"
        selected = re.search(r"Selected: (\d+)/(\d+)", output)
        tested = re.search(r"Tested: (\d+)", output)
        assert selected and tested, output
        # every operation of the document was exercised (none filtered or skipped)
        assert selected[1] == selected[2] == tested[1], output
        assert int(tested[1]) >= len(operations()), output
        assert " failed" not in output.split("Test cases:")[-1], output
