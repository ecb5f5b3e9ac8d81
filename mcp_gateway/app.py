"""The MCP gateway's ASGI face: one MCP server, streamable HTTP and stateless, at ``/mcp/<tenant>``.

An MCP client connects to ``/mcp/<tenant-slug>`` and gets three tools over the
tenant's agents (:mod:`mcp_gateway.tools`): ``list_bridges``,
``get_bridge_card`` and ``ask_bridge``. The gateway adds reach, not privilege:
its tools call each agent's public card URL and A2A endpoint over HTTP like any
client, so that endpoint's auth and caps apply unchanged (:mod:`mcp_gateway.services`).

The tenant is resolved once, at the edge (:class:`Gateway`): an unknown one,
a segment that is no slug (no query is made) or any other path under ``/mcp/``
is a 404 before the MCP server sees the request; the tenant rides in the
request's ASGI state to the tools. The server is the official ``mcp``
package's, one for every tenant:

* **stateless** — no ``Mcp-Session-Id``: every POST stands alone, so any web
  process can answer any request and nothing is kept between them;
* **JSON responses** — one JSON-RPC answer per POST, no event stream; any
  other method is a 405 (a GET would open an idle stream nothing is ever sent on);
* **Origin** — a request that carries one must come from ``PUBLIC_BASE_URL``'s
  origin, else 403 (the MCP transport's guard against DNS rebinding); clients
  outside a browser send none. The SDK's own Host check is off: behind a proxy
  the Host header is the proxy's business, as it is for the A2A endpoint.

The server's session manager runs tool calls in its own task group, which
must be running: :meth:`Gateway.running` is entered in the lifespan of the one
ASGI application (:mod:`parley.asgi`).
"""

from __future__ import annotations

import re
from contextlib import AbstractAsyncContextManager

from django.conf import settings
from django.core.validators import slug_re
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_gateway.tools import TENANT, build_server
from negotiations.client import origin_of
from parley.edge import rpc_error
from parley.models import Tenant

MCP_PATH = "/mcp/{tenant}"
_TENANT_PATH = re.compile(r"^/mcp/(?P<tenant>[^/]+)$")
# An MCP request carries the A2A message in its own JSON spelling (escapes can lengthen it) inside
# its envelope: it may be this many times the A2A body cap, which services checks exactly.
BODY_FACTOR = 4


class Gateway:
    """ASGI app: resolve the tenant of ``/mcp/<tenant>`` (404 if none), take POST only (405), check
    the Origin (403), then serve the MCP request with ``server`` over streamable HTTP."""

    def __init__(self, server: MCPServer) -> None:
        self._http: ASGIApp = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            max_request_body_size=BODY_FACTOR * settings.A2A_MAX_BODY_BYTES,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._sessions: StreamableHTTPSessionManager = server.session_manager

    def running(self) -> AbstractAsyncContextManager[None]:
        """The MCP server's session manager, for the process's lifespan; it runs once per process."""
        return self._sessions.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._http(scope, receive, send)
            return
        match = _TENANT_PATH.match(scope["path"])
        if match is None:
            await rpc_error(404, f"Nothing is served at {scope['path'][:100]!r}.")(scope, receive, send)
            return
        slug = match["tenant"]
        tenant = await Tenant.objects.filter(slug=slug).afirst() if slug_re.match(slug) else None
        if tenant is None:
            await rpc_error(404, f"There is no tenant {slug[:100]!r}.")(scope, receive, send)
            return
        if scope["method"] != "POST":
            # Stateless: no stream to open with GET (MCP transport: answer 405), no session to DELETE.
            refused = "Use POST: this MCP server is stateless, with no event stream and no session."
            await rpc_error(405, refused, headers={"Allow": "POST"})(scope, receive, send)
            return
        origin = Headers(scope=scope).get("origin")
        if origin is not None and not _own_origin(origin):
            refused = f"Requests from the origin {origin[:100]!r} are not accepted here."
            await rpc_error(403, refused)(scope, receive, send)
            return
        scope.setdefault("state", {})[TENANT] = tenant
        await self._http(scope, receive, send)


def _own_origin(origin: str) -> bool:
    """Whether ``origin`` (an Origin header) is ``PUBLIC_BASE_URL``'s."""
    return origin_of(origin.strip()) == origin_of(settings.PUBLIC_BASE_URL)


def build_app() -> Gateway:
    """The gateway application: one MCP server for every tenant, behind the tenant edge."""
    return Gateway(build_server())
