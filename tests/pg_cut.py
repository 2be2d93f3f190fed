"""A TCP proxy to PostgreSQL that cuts a connection at a chosen statement.

Tests of lost connections need the loss at an exact point of the protocol,
which killing backends from another session cannot give: here the proxy
reads the frontend/backend protocol's message framing on every connection it
carries, remembers each prepared statement's text (Parse), and when a Bind
of a statement whose text contains the armed fragment goes by (or a simple
Query containing it), cuts that connection, either

- ``"before"``: the Bind (with its Execute and Sync) is never forwarded: the
  server never runs the statement, but the client has sent it; or
- ``"after"``: the statement is forwarded, the server's whole answer up to
  ReadyForQuery is withheld, then the connection is cut. For a statement
  sent without BEGIN (it commits at the Sync, before ReadyForQuery) the
  server has committed it; the client never hears so.

No sleeps: `arm()` returns an event set once the cut happened.
"""

from __future__ import annotations

import struct
from typing import Literal

import anyio
import anyio.abc

Mode = Literal["before", "after"]
_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


#: a side of the proxied connection went away
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


def _message(buf: bytes) -> tuple[bytes, bytes, bytes] | None:
    """The first whole typed message in `buf` (kind, the message, what follows
    it), or None while it has not all arrived."""
    if len(buf) < 5:
        return None
    (length,) = struct.unpack("!i", buf[1:5])
    if len(buf) < 1 + length:
        return None
    return buf[:1], buf[:1 + length], buf[1 + length:]


class _Armed:
    def __init__(self, fragment: str, mode: Mode) -> None:
        self.fragment = fragment
        self.mode = mode
        self.cut = anyio.Event()


class CuttingProxy:
    """Forwards 127.0.0.1:`port` to `host`:`target_port` (see the module docstring)."""

    def __init__(self, host: str, target_port: int) -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self._armed: _Armed | None = None
        #: connections cut so far
        self.cuts = 0

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(listener.serve, self._handle)

    def url(self, url: str) -> str:
        """`url` (a postgresql:// URL to `host`:`target_port`) through the proxy,
        without TLS (the proxy reads the messages)."""
        netloc_end = url.index("/", len("postgresql://"))
        prefix, rest = url[:netloc_end], url[netloc_end:]
        at = prefix.rfind("@")
        user = prefix[: at + 1] if at >= 0 else "postgresql://"
        sep = "&" if "?" in rest else "?"
        return f"{user}127.0.0.1:{self.port}{rest}{sep}sslmode=disable"

    def arm(self, fragment: str, mode: Mode) -> anyio.Event:
        """Cut the next connection that binds a statement containing `fragment`
        (once); the event is set when it was cut."""
        self._armed = _Armed(fragment, mode)
        return self._armed.cut

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        try:
            server = await anyio.connect_tcp(self.host, self.target_port)
        except OSError:
            await client.aclose()
            return
        conn = _Connection(self, client, server)
        async with anyio.create_task_group() as tg:
            conn.scope = tg.cancel_scope
            tg.start_soon(conn.frontend)
            tg.start_soon(conn.backend)
        with anyio.CancelScope(shield=True):
            await client.aclose()
            await server.aclose()


class _Connection:
    def __init__(self, proxy: CuttingProxy, client: anyio.abc.SocketStream,
                 server: anyio.abc.SocketStream) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.scope: anyio.CancelScope | None = None
        self.statements: dict[str, str] = {}
        self.raw_reply = 0  # bytes the server answers an SSL/GSS request with, untyped
        self.withholding: _Armed | None = None  # "after": the answer is held back

    def _cut(self, armed: _Armed) -> None:
        self.proxy.cuts += 1
        armed.cut.set()
        assert self.scope is not None
        self.scope.cancel()

    async def frontend(self) -> None:
        """Client to server, message by message."""
        buf = b""
        startup = True
        try:
            async for chunk in self.client:
                buf += chunk
                out = b""
                while True:
                    if startup:
                        if len(buf) < 8:
                            break
                        (length,) = struct.unpack("!i", buf[:4])
                        if len(buf) < length:
                            break
                        (code,) = struct.unpack("!i", buf[4:8])
                        message, buf = buf[:length], buf[length:]
                        if code in (_SSL_REQUEST, _GSS_REQUEST):
                            self.raw_reply += 1  # another startup message follows
                        else:
                            startup = False
                        out += message
                        continue
                    whole = _message(buf)
                    if whole is None:
                        break
                    kind, message, buf = whole
                    body = message[5:]
                    if kind == b"P":
                        name, _, rest = body.partition(b"\0")
                        query = rest.partition(b"\0")[0]
                        self.statements[name.decode()] = query.decode()
                    elif kind in (b"B", b"Q"):
                        if kind == b"B":  # a prepared statement's run
                            _portal, _, rest = body.partition(b"\0")
                            name = rest.partition(b"\0")[0].decode()
                            text = self.statements.get(name, "")
                        else:  # a simple query (a statement sent without arguments)
                            text = body.partition(b"\0")[0].decode()
                        armed = self.proxy._armed
                        if armed is not None and armed.fragment in text:
                            self.proxy._armed = None
                            if armed.mode == "before":
                                if out:
                                    await self.server.send(out)
                                self._cut(armed)
                                return
                            self.withholding = armed
                    out += message
                if out:
                    await self.server.send(out)
        except _GONE:
            pass
        assert self.scope is not None
        self.scope.cancel()

    async def backend(self) -> None:
        """Server to client, message by message; held back after an "after" cut."""
        buf = b""
        try:
            async for chunk in self.server:
                buf += chunk
                out = b""
                while True:
                    if self.raw_reply and buf:
                        self.raw_reply -= 1
                        out += buf[:1]
                        buf = buf[1:]
                        continue
                    whole = _message(buf)
                    if whole is None:
                        break
                    kind, message, buf = whole
                    if self.withholding is not None:
                        if kind == b"Z":  # the statement ended (committed, on its own)
                            if out:
                                await self.client.send(out)
                            self._cut(self.withholding)
                            return
                        continue  # its answer never reaches the client
                    out += message
                if out:
                    await self.client.send(out)
        except _GONE:
            pass
        assert self.scope is not None
        self.scope.cancel()
