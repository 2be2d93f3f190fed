"""A limit on failed authentications per client, for the API and the UI's login.

Without one, a client can try tokens as fast as the server answers (300
wrong tokens took half a second). `AuthThrottle` counts each client's
failures (an unknown bearer token, a refused login) in a sliding window;
once a client has `max_failures` in `window` seconds, every request of it
that presents a token, or posts the login form, is refused with 429 and
``Retry-After`` until the oldest failure leaves the window. It is refused
*before* its token is looked at, so a locked-out client learns nothing about
which tokens are valid, not even from a right one.

A client is the peer address the ASGI server reports (``scope["client"]``):
behind a reverse proxy every request seems to come from the proxy, so
limit there too, or give the proxy's address room (docs/control-plane.md).
Forwarded headers are not trusted: any client can write them. At most
`max_clients` addresses are remembered (the oldest forgotten first), so a
flood of addresses cannot grow memory without bound.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from starlette.types import Scope


def client_of(scope: Scope) -> str:
    """The peer address of a request ("unknown" when the server gives none)."""
    client = scope.get("client")
    if client:
        return str(client[0])
    return "unknown"


class AuthThrottle:
    """Failed authentications per client in a sliding window (see the module docstring)."""

    def __init__(self, max_failures: int = 10, window: float = 60.0, *,
                 max_clients: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window = window
        self.max_clients = max_clients
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.max_failures > 0

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def retry_after(self, client: str) -> int | None:
        """Seconds until `client` may try again, or None when it may now."""
        if not self.enabled:
            return None
        now = self.clock()
        times = self._recent(client, now)
        if times is None or len(times) < self.max_failures:
            return None
        # allowed again once enough failures have left the window
        oldest_that_counts = times[len(times) - self.max_failures]
        return max(1, math.ceil(oldest_that_counts + self.window - now))

    def failed(self, client: str) -> None:
        """Record one failed authentication of `client`."""
        if not self.enabled:
            return
        now = self.clock()
        times = self._recent(client, now)
        if times is None:
            times = self._failures[client] = deque(maxlen=self.max_failures)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(client)
        times.append(now)
