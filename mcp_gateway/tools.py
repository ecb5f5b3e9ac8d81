"""The MCP server and its three tools, thin over :mod:`mcp_gateway.services`.

One :class:`~mcp.server.mcpserver.MCPServer` serves every tenant: the tenant is
resolved from the URL by the edge (:mod:`mcp_gateway.app`) and read here from
the HTTP request each tool call came with (:func:`tenant_of`). A tool's
docstring is its description for the MCP client and its model, so it says what
goes in, what comes out and how it fails. A :class:`~mcp_gateway.services.BridgeError`
becomes the tool's error result (``isError``) with its message.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, WithJsonSchema
from starlette.requests import Request
from typing_extensions import TypedDict

from mcp_gateway import services
from mcp_gateway.services import Bridge, BridgeError
from parley.models import Tenant

# The key in the request's ASGI state under which the edge leaves the tenant.
TENANT = "tenant"
INSTRUCTIONS = (
    "The agents of one Parley tenant, each reachable over A2A. list_bridges names them; "
    "get_bridge_card gives an agent's AgentCard (its skills say what it understands); "
    "ask_bridge sends it one A2A message and returns its answer."
)

AgentSlug = Annotated[str, Field(description="The agent's slug, as list_bridges gives it.")]
# Typed Any so that a wrong value reaches the service, whose error says what a message must be;
# the schema still tells the client it is an object.
A2AMessage = Annotated[
    Any,
    WithJsonSchema(
        {
            "type": "object",
            "description": "An A2A 1.0 Message as JSON, sent unchanged: messageId, role (ROLE_USER), "
            'parts (e.g. [{"text": "…"}] or [{"data": {…}}]), and taskId/contextId to continue a task.',
        }
    ),
]


class Bridges(TypedDict):
    """What list_bridges returns."""

    bridges: list[Bridge]


def tenant_of(ctx: Context) -> Tenant:
    """The tenant of the MCP request ``ctx`` belongs to, as the edge resolved it."""
    tenant: Tenant = request_of(ctx).scope["state"][TENANT]
    return tenant


def request_of(ctx: Context) -> Request:
    """The HTTP request an MCP message came with (the streamable HTTP transport keeps it)."""
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise TypeError("the MCP gateway serves streamable HTTP only")
    return request


async def list_bridges(ctx: Context) -> Bridges:
    """List this tenant's agents: {"bridges": [{slug, name, description, card_url, endpoint_url}]},
    by slug. card_url serves the agent's AgentCard; endpoint_url is its A2A JSON-RPC endpoint."""
    return Bridges(bridges=await services.bridges_list(tenant=tenant_of(ctx)))


async def get_bridge_card(agent: AgentSlug, ctx: Context) -> dict[str, Any]:
    """Get one agent's AgentCard (A2A), exactly the JSON its card_url serves, signatures included.

    Fails (as a tool error saying why) for an agent this tenant does not have, or a card that
    cannot be fetched."""
    try:
        return await services.bridge_card_fetch(tenant=tenant_of(ctx), slug=agent)
    except BridgeError as exc:
        raise ToolError(str(exc)) from exc


async def ask_bridge(agent: AgentSlug, message: A2AMessage, ctx: Context) -> dict[str, Any]:
    """Send one A2A message to an agent and return its answer: the JSON-RPC result of A2A 1.0
    SendMessage, {"task": {...}} whose history ends with the agent's reply (or {"message": {...}}).

    A negotiation move is one data part {"action", "message", "terms"?, "offerId"?,
    "acceptsOfferId"?} (the card's negotiate skill lists the actions); plain text is a visitor's
    question. To continue a task, send its taskId and contextId. The agent's endpoint is called
    like any client: its auth and limits apply. If it requires a key, send it with this MCP
    request (header X-API-Key, or Authorization: Bearer); it is passed on, nothing else is.

    Fails (as a tool error saying why) for an agent this tenant does not have, a message that is
    not a JSON object or is too large, or the endpoint's refusal: "A2A error <code>: <message>",
    with the HTTP status after the code when it is not 200 and the error's data after the message."""
    try:
        return await services.bridge_ask(
            tenant=tenant_of(ctx),
            slug=agent,
            message=message,
            caller=services.caller_headers(request_of(ctx).scope),
        )
    except BridgeError as exc:
        raise ToolError(str(exc)) from exc


def build_server() -> MCPServer:
    """The MCP server with the three tools; the edge serves it over streamable HTTP."""
    server: MCPServer = MCPServer("Parley", instructions=INSTRUCTIONS, subscriptions=False)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(list_bridges, annotations=reads)
    server.add_tool(get_bridge_card, annotations=reads)
    server.add_tool(ask_bridge, annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False))
    return server
