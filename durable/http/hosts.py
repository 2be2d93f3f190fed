"""Which ``Host`` a request may name: the control plane's defence against DNS rebinding.

A web page the operator visits can make the browser send requests to
``http://attacker.example:8233`` after pointing that name at 127.0.0.1:
the requests reach a server on loopback, but name the attacker's host. A
token-less development server (every request acts as operator) would
otherwise let that page list, start, cancel and terminate runs. Checking
the ``Host`` header against the names the server is really reached by
stops it: the browser always sends the name it resolved.

`HostCheck` refuses (400 ``host_not_allowed``) a request whose host is not
allowed, before any route, the web UI included. What is allowed:

- given names (`create_app(allowed_hosts=[...])`, ``durable serve
  --allowed-host``): exact names, ``*.example.com`` for subdomains, or
  ``*`` for any (no check);
- by default, for a server without tokens: the loopback names only
  (``localhost``, ``127.0.0.1`` and the rest of 127/8, ``::1``);
- by default, for a server with tokens: any host (the token is what
  protects it; a browser never sends it to a rebinding page).

The port in the header is not compared: proxies rewrite it, and a
rebinding page cannot choose the name it is served under.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

#: the names a loopback-only server is reached by
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without port or IPv6 brackets, lower case."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _loopback_address(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def normalise(names: Iterable[str]) -> tuple[str, ...]:
    """Allowed-host patterns as `HostCheck` compares them (lower case, no port)."""
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"an allowed host must be a non-empty string, got {name!r}")
        stripped = name.strip().lower()
        out.append(stripped if stripped == "*" or stripped.startswith("*.")
                   else host_name(stripped))
    return tuple(out)


def allowed(name: str, patterns: Sequence[str], *, loopback: bool) -> bool:
    """Whether the host `name` matches a pattern (or, with `loopback`, is a
    loopback name or address)."""
    if loopback and (name == "localhost" or _loopback_address(name)):
        return True
    for pattern in patterns:
        if pattern == "*" or pattern == name:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


class HostCheck:
    """ASGI middleware: 400 ``host_not_allowed`` unless the request's ``Host``
    is allowed (see the module docstring); lifespan and other scopes pass."""

    def __init__(self, app: ASGIApp, patterns: Sequence[str], loopback: bool,
                 error: Callable[[int, str, str], Response]) -> None:
        self.app = app
        self.patterns = tuple(patterns)
        self.loopback = loopback
        self.error = error  # (status, code, message): the app's JSON error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = ""
        for key, value in scope.get("headers", []):
            if key == b"host":
                header = value.decode("latin-1")
                break
        name = host_name(header)
        if allowed(name, self.patterns, loopback=self.loopback):
            await self.app(scope, receive, send)
            return
        scope["durable.route"] = "host_not_allowed"
        shown = header[:100] or "(none)"
        message = (f"this server does not answer to the host {shown!r}: a request naming "
                   "another host may come from a web page through DNS rebinding; if this "
                   "is a name the server is really reached by, allow it (durable serve "
                   "--allowed-host NAME, or create_app(allowed_hosts=[...]))")
        await self.error(400, "host_not_allowed", message)(scope, receive, send)


def plan(allowed_hosts: Sequence[str] | None, *, anonymous: bool,
         ) -> tuple[tuple[str, ...], bool] | None:
    """What `HostCheck` is built with for these settings: (patterns, loopback
    names allowed), or None when every host is allowed."""
    if allowed_hosts is None:
        return ((), True) if anonymous else None
    patterns = normalise(allowed_hosts)
    if "*" in patterns:
        return None
    return patterns, anonymous
