"""What the web UI needs of its control plane, as a protocol.

The app (`durable.http.app`) mounts the UI; the UI calls back into the app's
`ControlPlaneServer`. Naming that class would make the two import each other
(to read one you must read the other), so the UI names what it uses instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..auth import TokenSet
    from ..throttle import AuthThrottle


class Plane(Protocol):
    """What the UI needs of its control plane (`durable.http.app.ControlPlaneServer`):
    the tokens a browser signs in with, the sign-in throttle, and `perform`,
    an API operation run with an authenticated role. Named by this protocol,
    not the class, so that the app (which mounts the UI) and the UI do not
    import each other."""

    @property
    def tokens(self) -> TokenSet: ...

    @property
    def throttle(self) -> AuthThrottle: ...

    @property
    def anonymous_role(self) -> str | None: ...

    def check_throttle(self, client: str) -> None: ...

    async def perform(self, operation_id: str, *, role: str, namespace: str,
                      params: Mapping[str, Any], body: Any = None, request_id: str = "",
                      namespaces: frozenset[str] | None = None) -> tuple[int, Any]: ...
