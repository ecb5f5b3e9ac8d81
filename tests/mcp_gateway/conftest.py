"""MCP gateway fixtures: the ``mcp`` package's own client against the live stack's ``/mcp/<tenant>``.

Every call goes over loopback HTTP to the uvicorn process of ``live_stack``,
through ``mcp``'s streamable HTTP client and ``ClientSession``, as an MCP host
would connect. The tests are synchronous (the ORM checks run in the test's
thread); each MCP exchange runs in its own ``asyncio.run`` with its own client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
import pytest
from django.contrib.auth.models import AbstractUser
from mcp.client import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from agents.models import Agent
from parley.models import Tenant
from representative.models import GroundingDocument
from tests.conftest import LiveStack
from tests.representative import studio

T = TypeVar("T")
TIMEOUT = 60.0


def mcp_url(live_stack: LiveStack, tenant: Tenant | str) -> str:
    """The MCP gateway's URL for ``tenant`` (a tenant or a bare path segment)."""
    slug = tenant.slug if isinstance(tenant, Tenant) else tenant
    return f"{live_stack.url}/mcp/{slug}"


def in_session(
    url: str, use: Callable[[ClientSession], Awaitable[T]], *, headers: dict[str, str] | None = None
) -> T:
    """Connect to ``url`` with ``mcp``'s streamable HTTP client (sending ``headers`` on every
    request), initialize, and return ``use(session)``."""

    async def main() -> T:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=TIMEOUT) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await use(session)

    return asyncio.run(main())


def call_tool(
    url: str, name: str, arguments: dict[str, Any], *, headers: dict[str, str] | None = None
) -> CallToolResult:
    """Call the tool ``name`` with ``arguments`` in a session of its own."""
    return in_session(url, lambda session: session.call_tool(name, arguments), headers=headers)


def structured(result: CallToolResult) -> dict[str, Any]:
    """A successful call's structured result, after checking its text content says the same."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    [content] = result.content
    assert isinstance(content, TextContent)
    assert json.loads(content.text) == result.structured_content
    return result.structured_content


def tool_error(result: CallToolResult) -> str:
    """A failed call's error text."""
    assert result.is_error, result
    assert result.structured_content is None
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


@pytest.fixture
def vera(tenant: Tenant, principal: AbstractUser) -> Agent:
    """A studio's agent in ``tenant`` on the offline model, answering visitors from its opening hours."""
    agent = Agent.objects.create(
        tenant=tenant,
        slug="vera",
        name="Vera Studio",
        description="A design studio's front desk.",
        intake_owner=principal,
    )
    GroundingDocument.objects.create(tenant=tenant, agent=agent, title="Opening hours", text=studio.HOURS)
    return agent
