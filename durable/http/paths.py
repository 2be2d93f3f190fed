"""Ids in URL paths: every id addresses exactly its own run, whatever it holds.

A workflow id may hold ``/``, ``%``, ``?``, ``#``, spaces, dots or any
Unicode (`durable._validate.name`). Clients put it in one path segment,
percent-encoded (``victim/runs/r1`` as ``victim%2Fruns%2Fr1``). ASGI servers
hand the application the *decoded* path, in which that id reads as three
segments: routed on it, ``/api/workflows/victim%2Fruns%2Fr1/terminate``
became "terminate run r1 of workflow victim", someone else's run.

`SegmentPaths` (ASGI middleware) routes on the path as the client wrote it:
it splits the raw path at its ``/`` characters, decodes each segment on its
own, and gives the router a path in which each segment's own ``/`` and
``%`` are escaped again (``%2F``, ``%25``), so a segment stays one segment.
`segment_value` reverses that for a path parameter. A path without such
characters is left exactly as it was.

`quote_segment` is the client side: every character but the unreserved
ones percent-encoded, and dots too, because HTTP clients (httpx included)
resolve ``.`` and ``..`` segments before sending a request.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from starlette.types import ASGIApp, Receive, Scope, Send

#: set in the scope when the router's path was rewritten (path parameters are escaped)
ESCAPED = "durable.escaped_path"


def quote_segment(value: str) -> str:
    """`value` as one path segment: percent-encoded, dots included."""
    return quote(value, safe="").replace(".", "%2E")


def _escape(segment: str) -> str:
    return segment.replace("%", "%25").replace("/", "%2F")


def routed_path(raw_path: bytes) -> str | None:
    """The path to route on for `raw_path` (its query string cut), or None
    when it is the plain decoded path (no segment holds ``/`` or ``%``)."""
    raw = raw_path.split(b"?", 1)[0].decode("latin-1")
    segments = [unquote(part, errors="surrogateescape") for part in raw.split("/")]
    if not any("/" in s or "%" in s for s in segments):
        return None
    return "/".join(_escape(s) for s in segments)


def segment_value(scope: Scope, value: str) -> str:
    """A path parameter's value: the segment as the client sent it, decoded."""
    return unquote(value) if scope.get(ESCAPED) else value


class SegmentPaths:
    """ASGI middleware: route on the path's segments as the client encoded them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if isinstance(raw, bytes):
            path = routed_path(raw)
            if path is not None and unquote(path) == scope.get("path"):
                scope = {**scope, "path": path, ESCAPED: True}
        await self.app(scope, receive, send)
