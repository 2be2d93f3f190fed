"""Two small ASGI pieces the web UI's routes need: a server-sent event stream
that ends as soon as its client goes away, and a label naming a route for the
access log and the metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EventStream(StreamingResponse):
    """``text/event-stream`` fed by an async iterator, ended as soon as the client
    goes away (watched on `receive`, whichever ASGI version the server speaks)."""

    def __init__(self, body: Callable[[], AsyncIterator[str]], headers: Mapping[str, str]):
        self.source: AsyncIterator[str] = body()
        super().__init__(self.source, status_code=200, headers=dict(headers),
                         media_type="text/event-stream")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            async def produce() -> None:
                try:
                    async for chunk in self.source:
                        await send({"type": "http.response.body", "body": chunk.encode(),
                                    "more_body": True})
                    await send({"type": "http.response.body", "body": b"",
                                "more_body": False})
                except OSError:
                    pass  # the client went away mid-write
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(produce)


class Labelled:
    """An ASGI app that names its route for the access log and metrics."""

    def __init__(self, label: str, app: Callable[[Scope, Receive, Send], Awaitable[None]]):
        self.label = label
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["durable.route"] = self.label
        await self.app(scope, receive, send)
