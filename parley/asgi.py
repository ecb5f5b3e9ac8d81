"""The one ASGI application (docs/design.md#processes): Django, the A2A and MCP gateways, and the live socket.

``/a2a/…`` goes to the A2A gateway (a Starlette app on a2a-sdk), and so does
every request to an agent's own host name; ``/mcp/…`` to the MCP gateway (the
``mcp`` package's server); every other HTTP path to Django; WebSockets to the
dashboard consumer, behind session auth and an Origin check. The lifespan runs
both gateways' (the MCP server's session manager around the A2A gateway's); in
the embedded default it also starts the in-process Celery worker and binds live
events to the server's event loop.
"""

import asyncio
import os

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "parley.settings.base")
django_asgi = get_asgi_application()

if settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
    # The gateway threads keep their connections for good (parley.gateway_threads): a pool would be
    # lent out to them and leave the next request waiting 30 s, then failing.
    raise ImproperlyConfigured(
        "DATABASE_POOL_SIZE is for worker processes: unset it for the web process, whose gateway "
        "threads keep connections of their own (docs/settings.md)."
    )

# Imported after Django is set up: these import models.
from asgiref.sync import sync_to_async  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path, re_path  # noqa: E402
from starlette.types import ASGIApp, Receive, Scope, Send  # noqa: E402

from a2a_gateway.app import build_app  # noqa: E402
from a2a_gateway.hosts import AgentHosts  # noqa: E402
from mcp_gateway.app import build_app as build_mcp_app  # noqa: E402
from parley import live, telemetry  # noqa: E402
from parley.celery import start_embedded_worker  # noqa: E402
from parley.consumers import LiveConsumer  # noqa: E402
from parley.gateway_threads import GatewayThreads, mend  # noqa: E402

telemetry.setup()
# Production serves collected static files from a middleware (ServeStatic); elsewhere Django's own
# handler serves them from the apps' folders.
django_app = ASGIStaticFilesHandler(django_asgi) if settings.SERVE_STATIC_FROM_APPS else django_asgi
a2a_app = build_app()
mcp_app = build_mcp_app()


async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """Process start-up: in the embedded default, the in-process worker and the live loop; then the
    MCP server's session manager, inside which the A2A gateway's lifespan runs to shutdown."""
    if settings.EMBEDDED:
        start_embedded_worker()
        live.bind_server_loop(asyncio.get_running_loop())
    async with mcp_app.running():
        await a2a_app(scope, receive, send)


class MendConnections:
    """ASGI middleware: before each HTTP request, mend the database connection of asgiref's one
    shared thread (:func:`parley.gateway_threads.mend`), where work outside Django's request cycle
    and outside :class:`~parley.gateway_threads.GatewayThreads` queries (``AgentHosts``' host names).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await sync_to_async(mend)()
        await self.app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        # An agent's own host name is served as its /a2a/ URL before routing (a2a_gateway.hosts).
        "http": MendConnections(
            AgentHosts(
                URLRouter(
                    [
                        # The gateways' database work runs on the web process's gateway threads.
                        re_path(r"^a2a/", GatewayThreads(a2a_app)),  # type: ignore[arg-type]  # Channels routes ASGI apps too
                        re_path(r"^mcp/", GatewayThreads(mcp_app)),  # type: ignore[arg-type]
                        re_path(r"", django_app),  # type: ignore[arg-type]
                    ]
                )
            )
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter([path("ws/live/", LiveConsumer.as_asgi())]))
        ),
        "lifespan": lifespan,
    }
)
