"""The core install (`pip install durable-sdk`, no extras) runs workflows on
asyncio. Its dependencies are anyio, cronsim and structlog only, and a recent
anyio (4.16) no longer brings sniffio: the engine must not need it (only trio,
which depends on it, and the PostgreSQL/MariaDB extras, which list it, do)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import sys
    sys.modules["sniffio"] = None          # as on a core install: not importable

    import anyio

    import durable
    from durable import activity, workflow
    from durable.testing import TimeSkippingEnvironment


    @activity.defn
    async def greet(name: str) -> str:
        return f"Hello, {name}!"


    @activity.defn
    def shout(text: str) -> str:           # a sync activity: a worker thread, a heartbeat
        activity.heartbeat()
        return text.upper()


    @workflow.defn
    async def hello(name: str) -> str:
        greeting = await workflow.execute_activity(greet, name)
        await workflow.sleep(3600)
        return await workflow.execute_activity(shout, greeting)


    @workflow.defn
    async def shout_only(name: str) -> str:
        return await workflow.execute_activity(shout, name)


    async def main() -> None:
        async with durable.connect("sqlite://:memory:") as client:
            worker = durable.Worker(client, workflows=[shout_only], activities=[shout])
            async with worker:
                handle = await client.start(shout_only, "embedded", id="h-1")
                print(await handle.result())
        async with TimeSkippingEnvironment() as env:
            async with env.worker(workflows=[hello], activities=[greet, shout]):
                print(await env.client.execute(hello, "virtual", id="h-2"))


    anyio.run(main)
""")


def test_the_engine_runs_without_sniffio() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["EMBEDDED", "HELLO,", "VIRTUAL!"]
