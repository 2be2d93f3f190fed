"""The web UI for operators, served by the control plane at ``/ui``.

`create_app(client, ui=True)` mounts it (``ui=False`` leaves it out). It
needs Jinja2 (the ``ui`` extra, also in ``server``); its templates, style
sheet and script ship in this package, so it needs no CDN and no build step.
See docs/ui.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ...errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from .plane import Plane

__all__ = ["ui_routes"]


def ui_routes(plane: Plane, secret: str | bytes | None = None,
              environ: Mapping[str, str] | None = None) -> list[BaseRoute]:
    """The UI's routes for `plane` (all under /ui), signing sessions with `secret`
    (else ``DURABLE_UI_SECRET``, else a random key for this process)."""
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "the web UI needs Jinja2: pip install 'durable-sdk[ui]' (or the server extra), "
            "or pass ui=False to create_app"
        ) from None
    from .dashboard import DashboardPage
    from .pages import WebUI
    from .queues import QueuePages
    from .run_actions import RunActionPages
    from .schedules import SchedulePages
    from .session import session_key

    web = WebUI(plane, session_key(secret, environ))
    routes = web.routes()
    # before the last route, the catch-all "/ui/{rest:path}" (a 404 page)
    return (routes[:-1] + RunActionPages(web).routes() + SchedulePages(web).routes()
            + QueuePages(web).routes()
            + DashboardPage(web).routes()
            + routes[-1:])
