"""The control plane over HTTP: a server (`create_app`, `serve`) and a remote client.

``durable.http.create_app(client, tokens=...)`` is an ASGI app (Starlette)
for any ASGI server or FastAPI app; ``durable.http.serve(db_url, ...)`` runs
it (uvicorn on asyncio, hypercorn on trio); ``durable.connect("http://...")``
returns a `durable.Client` speaking to it (`RemoteControl`, httpx only).

The names are imported lazily, so a process that only talks to a server
(the ``remote`` extra: httpx) never imports the server's packages, and
``import durable`` imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .errors import AuthenticationFailed, ControlPlaneError, PermissionDenied
    from .remote import RemoteControl
    from .serve import serve

__all__ = [
    "AuthenticationFailed",
    "ControlPlaneError",
    "PermissionDenied",
    "RemoteControl",
    "create_app",
    "serve",
]

_WHERE = {
    "create_app": "app",
    "serve": "serve",
    "RemoteControl": "remote",
    "AuthenticationFailed": "errors",
    "ControlPlaneError": "errors",
    "PermissionDenied": "errors",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'durable.http' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
