"""The gateway's edge on the live stack: the tenant from the URL (404 before the MCP server), the
Origin, and the MCP server behind it answering ``mcp``'s own client with the three tools."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agents.models import Agent
from parley.models import Tenant
from tests.conftest import LiveStack
from tests.mcp_gateway.conftest import in_session, mcp_url, structured

pytestmark = pytest.mark.django_db(transaction=True)

INVALID_REQUEST = -32600
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test-client", "version": "1.0"},
    },
}


def post(url: str, body: dict[str, Any], *, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST one raw JSON-RPC message as a streamable HTTP client would."""
    sent = {"Accept": "application/json, text/event-stream", **(headers or {})}
    return httpx.post(url, json=body, headers=sent, timeout=30)


def error_body(message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/mcp/nobody", "There is no tenant 'nobody'."),
        ("/mcp/not.a.slug", "There is no tenant 'not.a.slug'."),
        ("/mcp/acme/more", "Nothing is served at '/mcp/acme/more'."),
        ("/mcp/", "Nothing is served at '/mcp/'."),
    ],
)
def test_a_path_naming_no_tenant_is_a_404_before_the_mcp_server(
    live_stack: LiveStack, tenant: Tenant, path: str, message: str
) -> None:
    response = post(f"{live_stack.url}{path}", INITIALIZE)

    assert response.status_code == 404
    assert response.json() == error_body(message)
    # Not the MCP server's answer: it would have opened the exchange with its own headers.
    assert "mcp-session-id" not in response.headers


def test_mcps_client_is_refused_on_an_unknown_tenant(live_stack: LiveStack, tenant: Tenant) -> None:
    with pytest.raises(BaseExceptionGroup) as raised:  # the client's task groups
        in_session(mcp_url(live_stack, "nobody"), lambda session: session.list_tools())

    assert raised.group_contains(MCPError, match=r"^There is no tenant 'nobody'\.$")


def test_a_known_tenant_is_served_by_the_mcp_server(live_stack: LiveStack, tenant: Tenant) -> None:
    response = post(mcp_url(live_stack, tenant), INITIALIZE)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert "mcp-session-id" not in response.headers  # stateless
    result = response.json()["result"]
    assert result["serverInfo"]["name"] == "Parley"
    assert result["capabilities"]["tools"] == {"listChanged": False}


def test_a_request_from_another_origin_is_refused(live_stack: LiveStack, tenant: Tenant) -> None:
    refused = post(mcp_url(live_stack, tenant), INITIALIZE, headers={"Origin": "http://evil.example"})

    assert refused.status_code == 403
    assert refused.json() == error_body(
        "Requests from the origin 'http://evil.example' are not accepted here."
    )
    own = post(mcp_url(live_stack, tenant), INITIALIZE, headers={"Origin": live_stack.url})
    assert own.status_code == 200, own.text


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "OPTIONS"])
def test_only_post_is_served(live_stack: LiveStack, tenant: Tenant, method: str) -> None:
    response = httpx.request(
        method, mcp_url(live_stack, tenant), headers={"Accept": "text/event-stream"}, timeout=30
    )

    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert response.json() == error_body(
        "Use POST: this MCP server is stateless, with no event stream and no session."
    )


def test_the_three_tools_are_listed_with_their_inputs(live_stack: LiveStack, tenant: Tenant) -> None:
    listed = in_session(mcp_url(live_stack, tenant), lambda session: session.list_tools())

    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["ask_bridge", "get_bridge_card", "list_bridges"]
    assert tools["list_bridges"].input_schema["properties"] == {}
    assert tools["get_bridge_card"].input_schema["required"] == ["agent"]
    ask = tools["ask_bridge"].input_schema
    assert ask["required"] == ["agent", "message"]
    assert ask["properties"]["agent"]["type"] == "string"
    assert ask["properties"]["message"]["type"] == "object"
    assert all(tools[name].description for name in tools)


def test_the_high_level_client_is_served_on_the_2026_protocol(live_stack: LiveStack, agent: Agent) -> None:
    """``mcp.client.Client`` probes ``server/discover`` and speaks the stateless protocol of 2026,
    whose requests take another path through the SDK's transport: the tenant still reaches the tools."""

    async def main() -> tuple[str, dict[str, Any]]:
        async with Client(mcp_url(live_stack, agent.tenant)) as client:
            return client.protocol_version, structured(await client.call_tool("list_bridges", {}))

    version, listed = asyncio.run(main())

    assert version in MODERN_PROTOCOL_VERSIONS
    assert [bridge["slug"] for bridge in listed["bridges"]] == ["tomas"]
