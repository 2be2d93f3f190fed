"""A nightly import under one time budget, on the embedded SQLite default.

    python examples/nightly_import.py [--trio]

(needs httpx: ``pip install 'durable-sdk[remote]'``.) The import reads the
day's rows from an HTTP service (here a local one, started by this script),
normalises them in a child process, and loads them into a "warehouse" (a
SQLite file) one idempotent unit per row. Three nights are played:

1. **an ordinary night**: every phase completes; the status says so;
2. **a cancellation mid-import**: an operator stops the load half way; the
   workflow's cleanup (shielded, bounded in time) records what was loaded;
   the status is ``cancelled`` with the operator's reason;
3. **a crash mid-unit**: the warehouse loader dies right after writing a row
   and before reporting it; nobody can know from the records alone whether
   that row was written, so the run is not retried blindly: it waits with
   status ``unknown`` until an operator looks at the warehouse and confirms.

Everything the article on time limits asks for is here: one deadline for the
run (`execution_timeout`) shared by phases (`workflow.phase`, each with a
limit and never longer than what is left), every dependency given min(its
own timeout, the time left) with connect and read limits apart
(`activity.budget().httpx_timeout`), a child process stopped and confirmed
stopped on time-out (`durable.subprocess.run`), units recorded by a stable
key, and a final status that tells completed, cancelled and unknown apart,
with the reason and the phase.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx

import durable
import durable.subprocess
from durable import activity, workflow
from durable.testing import crash_at, crashed, declare_dead

#: the warehouse the units write to; beside the run's SQLite database when one
#: is given (`warehouse_beside`), so two imports at once never share one
WAREHOUSE = Path(tempfile.gettempdir()) / "durable-example" / "warehouse.db"
ROWS_PER_NIGHT = 8

# ---------------------------------------------------------------- activities


@activity.defn(name="fetch-rows")
async def fetch_rows(url: str) -> list[dict[str, Any]]:
    """Read the day's rows: 2 s to connect, 10 s to read, never past the attempt's
    deadline (its start-to-close timeout, the run's deadline, a cancellation)."""
    budget = activity.budget()
    async with httpx.AsyncClient(timeout=budget.httpx_timeout(connect=2, read=10)) as http:
        response = await http.get(url)
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()
        return rows


NORMALISE = """
import json, sys
rows = json.load(sys.stdin)
print(json.dumps([{"id": r["id"], "customer": r["customer"].strip().title(),
                   "cents": round(float(r["amount"]) * 100)} for r in rows]))
"""


@activity.defn(name="normalise")
async def normalise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A transformation in a child process, bounded by the attempt's budget: on
    time-out it is sent SIGTERM, then SIGKILL, and confirmed gone."""
    done = await durable.subprocess.run([sys.executable, "-c", NORMALISE],
                                        input=json.dumps(rows).encode(), grace=1.0, check=True)
    result: list[dict[str, Any]] = json.loads(done.stdout or b"[]")
    return result


@activity.defn(name="load-row")
def load_row(row: dict[str, Any]) -> str:
    """Write one row into the warehouse: the external effect of a unit."""
    time.sleep(row.get("pause", 0.0))
    with sqlite3.connect(WAREHOUSE) as db:
        db.execute("INSERT INTO sales (night, id, customer, cents) VALUES (?, ?, ?, ?)",
                   (row["night"], row["id"], row["customer"], row["cents"]))
    return f"loaded {row['id']}"


@activity.defn(name="record-partial-load")
def record_partial_load(night: str, reason: str) -> int:
    """Cleanup after a cancellation: note what this night loaded, for the morning."""
    with sqlite3.connect(WAREHOUSE) as db:
        (loaded,) = db.execute("SELECT COUNT(*) FROM sales WHERE night = ?", (night,)).fetchone()
        db.execute("INSERT INTO notes (night, note) VALUES (?, ?)",
                   (night, f"partial load: {loaded} rows, stopped: {reason}"))
    return int(loaded)


# ---------------------------------------------------------------- the workflow


@workflow.defn(name="nightly-import")
async def nightly_import(night: str, source: str, pause: float) -> dict[str, Any]:
    quick = durable.ActivityOptions(start_to_close_timeout=30, max_attempts=3)
    try:
        async with workflow.phase("read", limit=120):
            rows = await workflow.execute_activity(fetch_rows, f"{source}/rows?night={night}",
                                                   options=quick)
        async with workflow.phase("transform", limit=120):
            rows = await workflow.execute_activity(normalise, rows, options=quick)
        async with workflow.phase("load", limit=1800):
            # a cancellation waits for the row in flight (the units' default,
            # WAIT_CANCELLATION_COMPLETED): the cleanup below counts every row
            # written, and a row that finished is recorded completed
            loaded = await workflow.units(
                [{**row, "night": night, "pause": pause} for row in rows],
                key=lambda row: row["id"], handler=load_row,
                options=durable.ActivityOptions(start_to_close_timeout=10, max_attempts=3,
                                                task_queue="warehouse"))
        return {"night": night, "loaded": len(loaded.done)}
    finally:
        cancellation = workflow.cancellation()
        if cancellation is not None:
            with workflow.cancellation_shield():  # bounded by the cleanup deadline
                await workflow.execute_activity(record_partial_load, night,
                                                cancellation.reason, options=quick)


# ---------------------------------------------------------------- the source service


@contextmanager
def source_service() -> Iterator[str]:
    """The upstream HTTP service: the night's rows as JSON, on a loopback port."""

    class Rows(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            night = self.path.rsplit("=", 1)[-1]
            body = json.dumps([{"id": f"{night}-{n:03d}", "customer": f"  customer {n} ",
                                "amount": f"{10 + n}.50"} for n in range(ROWS_PER_NIGHT)])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Rows)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


# ---------------------------------------------------------------- the three nights


async def report(handle: durable.WorkflowHandle) -> None:
    info = await handle.describe()
    print(f"   status: {info['status']}  reason: {info['reason']}")
    if info["phase"]:
        print(f"   in phase: {info['phase']['name']}")
    if info["progress"]:
        print(f"   progress: {info['progress']['done']}/{info['progress']['total']} units")
    ends = [e for e in await handle.history() if e.type.startswith("Phase")
            and e.type != "PhaseStarted"]
    print("   phases: " + ", ".join(f"{e.data['phase']} {e.data['outcome']}" for e in ends))


async def wait_for(handle: durable.WorkflowHandle, status: str | None = None,
                   loaded: int | None = None) -> None:
    with anyio.fail_after(60):
        while True:
            info = await handle.describe()
            if status is not None and info["status"] == status:
                return
            progress = info["progress"] or {}
            if loaded is not None and progress.get("done", 0) >= loaded:
                return
            await anyio.sleep(0.05)


def warehouse_rows(night: str) -> int:
    with sqlite3.connect(WAREHOUSE) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM sales WHERE night = ?", (night,)).fetchone()
    return int(count)


async def main(db_url: str) -> None:
    WAREHOUSE.parent.mkdir(parents=True, exist_ok=True)
    WAREHOUSE.unlink(missing_ok=True)
    with sqlite3.connect(WAREHOUSE) as db:
        db.execute("CREATE TABLE sales (night TEXT, id TEXT PRIMARY KEY, customer TEXT, "
                   "cents INTEGER)")
        db.execute("CREATE TABLE notes (night TEXT, note TEXT)")
    budget = durable.StartOptions(execution_timeout=3600)  # the night's one deadline
    stamp = time.strftime("%H%M%S")
    with source_service() as source:
        async with durable.connect(db_url) as client:
            importer = durable.Worker(client, workflows=[nightly_import],
                                      activities=[fetch_rows, normalise, record_partial_load])
            async with importer:
                print("1. an ordinary night")
                async with durable.Worker(client, activities=[load_row],
                                          task_queue="warehouse"):
                    handle = await client.start(nightly_import, "n1", source, 0.0,
                                                id=f"import-n1-{stamp}", options=budget)
                    print(f"   result: {await handle.result()}")
                await report(handle)

                print("2. an operator cancels the load half way")
                async with durable.Worker(client, activities=[load_row],
                                          task_queue="warehouse"):
                    handle = await client.start(nightly_import, "n2", source, 0.2,
                                                id=f"import-n2-{stamp}", options=budget)
                    await wait_for(handle, loaded=3)
                    await handle.request_cancellation("operator: the source sent yesterday's "
                                                      "file", cleanup_timeout=30)
                    try:
                        await handle.result()
                    except durable.WorkflowCancelled as exc:
                        print(f"   result: cancelled ({exc})")
                await report(handle)
                with sqlite3.connect(WAREHOUSE) as db:
                    (note,) = db.execute("SELECT note FROM notes WHERE night = 'n2'").fetchone()
                print(f"   cleanup noted: {note}")
                # the row in flight when the stop came was waited for (the units'
                # default policy): the cleanup's count, the history and the
                # warehouse agree
                completed = sum(e.type == "ActivityCompleted"
                                and str(e.data.get("activity_type")) == "load-row"
                                for e in await handle.history())
                print(f"   units completed in history: {completed}, rows in the warehouse: "
                      f"{warehouse_rows('n2')}")

                print("3. the warehouse loader dies after writing a row, before reporting it")
                loader = crash_at(durable.Worker(client, activities=[load_row],
                                                 task_queue="warehouse"), "after_effect")
                handle = await client.start(nightly_import, "n3", source, 0.0,
                                            id=f"import-n3-{stamp}", options=budget)
                async with loader:
                    await crashed(loader)  # the block ends here, as with SIGKILL
                await declare_dead(client, loader)  # or wait for its lease to run out
                async with durable.Worker(client, activities=[load_row],
                                          task_queue="warehouse"):  # the loader restarted
                    # the other rows load; the one in flight is not retried blindly
                    await wait_for(handle, status="unknown")
                    await report(handle)
                    print(f"   the operator looks: the warehouse has {warehouse_rows('n3')} "
                          f"of {ROWS_PER_NIGHT} rows of night n3, so the unconfirmed one was "
                          "written; confirm it")
                    await handle.retry_after_review(units="confirm")
                    print(f"   result: {await handle.result()}")
                await report(handle)
                print(f"   warehouse rows of n3: {warehouse_rows('n3')} (each exactly once)")


def warehouse_beside(db_url: str) -> Path:
    """The warehouse file next to a ``sqlite:///path`` database; the default
    otherwise (a server database names no directory)."""
    if db_url.startswith("sqlite:///") and ":memory:" not in db_url:
        database = Path(db_url.removeprefix("sqlite:///").split("?", 1)[0])
        return database.with_name(f"{database.stem}-warehouse.db")
    return WAREHOUSE


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--trio"]
    default = Path(tempfile.gettempdir()) / "durable-example" / "nightly.db"
    default.parent.mkdir(parents=True, exist_ok=True)
    if not args:  # each showing starts from an empty database
        for leftover in default.parent.glob("nightly.db*"):
            leftover.unlink()
    url = args[0] if args else f"sqlite:///{default}"
    WAREHOUSE = warehouse_beside(url)
    anyio.run(main, url, backend="trio" if "--trio" in sys.argv else "asyncio")
