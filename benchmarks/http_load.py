"""Load on the HTTP control plane (issue [5/8]), loopback only.

A control plane (`durable.http.serve`, uvicorn on asyncio) runs in a child
process with a worker in the same process (`worker="http_load:make_worker"`);
this process runs `--clients` concurrent HTTP clients (each an httpx client
with its own keep-alive connection) for `--duration` seconds. Each client loops:

* 4 times in 5: start a short workflow (``POST /api/workflows``: one local
  activity and a 10 ms durable timer), then long-poll its result
  (``GET .../result?wait=10``) until it is 200 ``completed``;
* 1 time in 5: start a workflow that sleeps 1 h, wait until it is running
  (``GET /api/workflows/{id}``), request cancellation (``POST
  .../request-cancellation``, expecting 202), repeat the request (expecting
  200 with the same request id), then long-poll the result until 200
  ``cancelled``.

Every response is checked: a status other than the expected one, a body that
disagrees (a duplicate with another request id, a result other than the
workflow's), or a transport error counts as an error. Latency is measured per
request, by route template; long-poll requests are reported apart (their
latency includes the workflow's own run time).

Usage::

    python benchmarks/http_load.py [--clients 50] [--duration 30]
        [--db sqlite:///PATH | postgresql://...] [--out FILE]

Prints a table; ``--out`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import httpx

import durable
from durable import activity, workflow

TOKEN = "load-operator"
HEADERS = {"X-Durable-Workflow-Control-Plane-Version": "2",
           "Authorization": f"Bearer {TOKEN}"}


@activity.defn
async def load_price(n: int) -> int:
    return n * 2


@workflow.defn
async def load_order(n: int) -> int:
    doubled: int = await workflow.execute_local_activity(load_price, n)
    await workflow.sleep(0.01)
    return doubled


@workflow.defn
async def load_sleeper() -> None:
    await workflow.sleep(3600)


def make_worker(client: durable.Client) -> durable.Worker:
    """What the server process runs (``worker="http_load:make_worker"``)."""
    return durable.Worker(client, workflows=[load_order, load_sleeper],
                          activities=[load_price])


class Stats:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.workflows = 0
        self.cancellations = 0

    async def call(self, http: httpx.AsyncClient, route: str, method: str, path: str,
                   expect: tuple[int, ...], **kwargs: Any) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = await http.request(method, path, headers=HEADERS, **kwargs)
        except httpx.HTTPError as exc:
            self.errors.append(f"{route}: {exc!r}")
            return None
        self.latency[route].append(time.perf_counter() - started)
        if response.status_code not in expect:
            self.errors.append(f"{route}: HTTP {response.status_code} {response.text[:200]}")
            return None
        return response


async def result_of(stats: Stats, http: httpx.AsyncClient, workflow_id: str,
                    deadline: float) -> dict[str, Any] | None:
    while time.monotonic() < deadline + 60:
        response = await stats.call(http, "GET result?wait (long poll)", "GET",
                                    f"/api/workflows/{workflow_id}/result",
                                    (200, 202), params={"wait": 10}, timeout=40)
        if response is None:
            return None
        if response.status_code == 200:
            body: dict[str, Any] = response.json()
            return body
    stats.errors.append(f"{workflow_id}: no result in time")
    return None


async def short_workflow(stats: Stats, http: httpx.AsyncClient, deadline: float) -> None:
    workflow_id = f"order-{uuid.uuid4().hex[:12]}"
    n = int.from_bytes(os.urandom(2), "big")
    started = await stats.call(http, "POST /api/workflows", "POST", "/api/workflows", (201,),
                               json={"workflow_type": "load_order", "workflow_id": workflow_id,
                                     "input": [n]})
    if started is None:
        return
    body = await result_of(stats, http, workflow_id, deadline)
    if body is None:
        return
    if body.get("status") != "completed" or body.get("result") != n * 2:
        stats.errors.append(f"{workflow_id}: unexpected outcome {body}")
        return
    stats.workflows += 1


async def cancelled_workflow(stats: Stats, http: httpx.AsyncClient, deadline: float) -> None:
    workflow_id = f"sleeper-{uuid.uuid4().hex[:12]}"
    started = await stats.call(http, "POST /api/workflows", "POST", "/api/workflows", (201,),
                               json={"workflow_type": "load_sleeper",
                                     "workflow_id": workflow_id})
    if started is None:
        return
    while True:  # the worker must hold the run (and its timer) before the request
        described = await stats.call(http, "GET /api/workflows/{workflowId}", "GET",
                                     f"/api/workflows/{workflow_id}", (200,))
        if described is None:
            return
        if described.json()["status"] == "running" and described.json()["pending_operations"]:
            break
        await anyio.sleep(0.02)
    path = f"/api/workflows/{workflow_id}/request-cancellation"
    first = await stats.call(http, "POST .../request-cancellation", "POST", path, (202,),
                             json={"reason": "load test", "cleanup_timeout_seconds": 30})
    repeat = await stats.call(http, "POST .../request-cancellation", "POST", path, (200,),
                              json={"reason": "again", "cleanup_timeout_seconds": 300})
    if first is None or repeat is None:
        return
    if repeat.json()["request"]["request_id"] != first.json()["request"]["request_id"]:
        stats.errors.append(f"{workflow_id}: the duplicate named another request")
    body = await result_of(stats, http, workflow_id, deadline)
    if body is None:
        return
    if body.get("status") != "cancelled":
        stats.errors.append(f"{workflow_id}: unexpected outcome {body}")
        return
    stats.cancellations += 1


async def client_loop(stats: Stats, base_url: str, index: int, deadline: float) -> None:
    """One client: its own httpx client and keep-alive connection (one shared pool of
    50 connections costs httpcore O(connections) per request, which saturated the
    load generator's core before the server)."""
    turn = index
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        while time.monotonic() < deadline:
            if turn % 5 == 4:
                await cancelled_workflow(stats, http, deadline)
            else:
                await short_workflow(stats, http, deadline)
            turn += 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_server(db: str) -> tuple[subprocess.Popen[str], int]:
    script = textwrap.dedent(f"""
        import logging
        import durable.http
        logging.basicConfig(level=logging.WARNING)  # no access log lines: they cost time
        durable.http.serve({db!r}, port=0, tokens={{{TOKEN!r}: "operator"}},
                           worker="http_load:make_worker",
                           on_ready=lambda port: print(port, flush=True))
    """)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    env.pop("DURABLE_TOKENS", None)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.isdigit():
        process.kill()
        raise SystemExit("the control plane did not start")
    return process, int(line)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    process, port = start_server(args.db)
    stats = Stats()
    try:
        began = time.monotonic()
        deadline = began + args.duration
        async with anyio.create_task_group() as tg:
            for i in range(args.clients):
                tg.start_soon(client_loop, stats, f"http://127.0.0.1:{port}", i, deadline)
        elapsed = time.monotonic() - began
    finally:
        process.terminate()
        process.wait(timeout=30)
    requests = sum(len(v) for v in stats.latency.values())
    return {
        "clients": args.clients, "duration_s": round(elapsed, 1), "db": args.db.split(":")[0],
        "requests": requests, "requests_per_s": round(requests / elapsed, 1),
        "workflows_completed": stats.workflows, "cancellations_completed": stats.cancellations,
        "errors": len(stats.errors), "error_samples": stats.errors[:5],
        "routes": {
            route: {"count": len(v), "p50_ms": round(statistics.median(v) * 1000, 1),
                    "p99_ms": round(percentile(v, 0.99) * 1000, 1)}
            for route, v in sorted(stats.latency.items())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--db", default=None, help="storage URL (default: a new SQLite file)")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.db is None:
            args.db = f"sqlite:///{Path(tmp) / 'load.db'}"
        report = anyio.run(run, args)
    print(f"{report['clients']} clients, {report['duration_s']} s, {report['db']}: "
          f"{report['requests']} requests, {report['requests_per_s']} req/s, "
          f"{report['workflows_completed']} workflows and {report['cancellations_completed']} "
          f"cancellations completed, {report['errors']} errors")
    print(f"{'route':40} {'count':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for route, figures in report["routes"].items():
        print(f"{route:40} {figures['count']:>7} {figures['p50_ms']:>8} {figures['p99_ms']:>8}")
    for sample in report["error_samples"]:
        print("error:", sample)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
