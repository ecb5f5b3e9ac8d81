"""Who calls through the MCP gateway: each anonymous caller is itself to the agent (its own tasks,
its own rate), its credential bytes reach the endpoint as sent, and the gateway outlives a dropped
database connection.

Real components only: ``mcp``'s own client against the live stack's web and worker processes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import httpx2
import pytest
from django.db import connection
from mcp.client import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from a2a_gateway.models import A2ATask
from agents.models import Agent
from negotiations.models import Settlement
from tests.a2a_gateway.conftest import move, proposal
from tests.a2a_gateway.rpc import call, endpoint_on, message, tune
from tests.a2a_gateway.servers import web_process
from tests.conftest import LiveStack, wait_until
from tests.mcp_gateway.conftest import TIMEOUT, call_tool, mcp_url, structured, tool_error

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
FAILED = "Error executing tool ask_bridge: "
TASK_NOT_FOUND, INVALID_REQUEST = -32001, -32600
# Two anonymous counterparties on loopback: the endpoint tells them apart by address.
ALICE, BOB = "127.0.0.1", "127.0.0.2"
APP_NAME = "zz_break_web"  # libpq's PGAPPNAME: tells this test's web process's connections apart
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
# A stateless server takes a tools/call without initialize (as test_edge's raw requests do).
LIST_BRIDGES = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "list_bridges", "arguments": {}},
}


def session_from(
    url: str,
    use: Callable[[ClientSession], Awaitable[T]],
    *,
    address: str = ALICE,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> T:
    """Like ``in_session``, but from the loopback ``address`` and with raw header bytes."""

    async def main() -> T:
        transport = httpx2.AsyncHTTPTransport(local_address=address)
        async with (
            httpx2.AsyncClient(transport=transport, headers=headers, timeout=TIMEOUT) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await use(session)

    return asyncio.run(main())


def ask_from(
    live_stack: LiveStack,
    agent: Agent,
    msg: dict[str, Any],
    *,
    address: str = ALICE,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> CallToolResult:
    arguments = {"agent": agent.slug, "message": msg}
    url = mcp_url(live_stack, agent.tenant)
    return session_from(
        url, lambda session: session.call_tool("ask_bridge", arguments), address=address, headers=headers
    )


def sent(data: dict[str, Any], *, task: dict[str, Any] | None = None) -> dict[str, Any]:
    return dict(message(data, task=task)["message"])


def data_of(entry: dict[str, Any]) -> dict[str, Any]:
    [part] = entry["parts"]
    return dict(part["data"])


# --- Each anonymous caller is itself to the endpoint, not the gateway ------------------------


def test_another_anonymous_caller_cannot_continue_a_task_started_through_the_gateway(
    live_stack: LiveStack, seller: Agent
) -> None:
    """The endpoint partitions tasks by caller so that another caller's task id is "not found"
    (a2a_gateway.store.owner_of). Bob cannot accept on Alice's task, directly or through the
    gateway: it vouches for each caller's own address (parley.edge.vouch_for)."""
    first = structured(ask_from(live_stack, seller, sent(proposal(800)), address=ALICE))["task"]
    offer = data_of(first["history"][-1])
    acceptance = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )
    direct = call(
        endpoint_on(live_stack.url, seller), "SendMessage", message(acceptance, task=first), address=BOB
    ).json()
    assert direct["error"]["code"] == TASK_NOT_FOUND  # what the public endpoint says to Bob

    result = ask_from(live_stack, seller, sent(acceptance, task=first), address=BOB)

    assert result.is_error, result.structured_content
    assert f"A2A error {TASK_NOT_FOUND}" in tool_error(result)
    assert not Settlement.across_tenants.exists()  # Alice's negotiation was not closed by Bob


def test_one_anonymous_callers_messages_do_not_spend_anothers_rate_limit(
    live_stack: LiveStack, seller: Agent
) -> None:
    """``rate_limit`` is per caller: Alice's one message through the gateway leaves Bob's budget
    whole, as it would if both called directly."""
    tune(seller, rate_limit=1)
    structured(ask_from(live_stack, seller, sent(proposal(800)), address=ALICE))

    result = ask_from(live_stack, seller, sent(proposal(810)), address=BOB)

    task = structured(result)["task"]
    assert A2ATask.across_tenants.filter(task_id=task["id"]).exists()


# --- Credentials passed on as sent ------------------------------------------------------------


def test_a_key_header_with_a_non_ascii_byte_is_refused_as_the_endpoint_refuses_it(
    live_stack: LiveStack, seller: Agent
) -> None:
    """HTTP allows obs-text (bytes 0x80-0xFF) in a header value; the endpoint answers such a key
    401 "not valid", and so does the tool, passing the bytes on as they came."""
    tune(seller, inbound_auth=Agent.InboundAuth.API_KEY)
    odd_key = [(b"x-api-key", b"cl\xe9.secret")]
    direct = httpx.post(
        endpoint_on(live_stack.url, seller),
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message(proposal())},
        headers=[(b"a2a-version", b"1.0"), *odd_key],
        timeout=TIMEOUT,
    )
    assert direct.status_code == 401
    refused = direct.json()["error"]["message"]
    assert refused == "The API key is not valid for this agent."

    result = ask_from(live_stack, seller, sent(proposal()), headers=odd_key)

    said = tool_error(result)
    assert said != "Error executing tool ask_bridge"
    assert re.search(r"api[- ]key", said, re.IGNORECASE), said  # it names what is wrong


# --- The edge's own database connection ------------------------------------------------------


def test_the_gateway_answers_again_after_its_database_connection_is_dropped(
    live_stack: LiveStack, seller: Agent
) -> None:
    """A Postgres restart or failover drops the web process's connections. Django's own pages
    reconnect (close_old_connections runs around each Django request); the gateways query outside
    that cycle, on the web process's gateway threads, whose dead connection
    parley.gateway_threads.mend finds (a ping) and closes before the thread's next request: no
    request fails."""
    with web_process(live_stack, PGAPPNAME=APP_NAME) as origin:
        url = f"{origin}/mcp/{seller.tenant.slug}"
        structured(call_tool(url, "list_bridges", {}))  # the edge's connection is open
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                [APP_NAME],
            )
        wait_until(lambda: not _backends(APP_NAME), what="the web process's connection to drop")
        assert httpx.get(f"{origin}/login/", timeout=TIMEOUT).status_code == 200  # Django reconnects

        first = httpx.post(url, json=LIST_BRIDGES, headers=MCP_ACCEPT, timeout=TIMEOUT)

        assert first.status_code == 200, first.text
        assert [b["slug"] for b in first.json()["result"]["structuredContent"]["bridges"]] == ["idris"]


def _backends(application_name: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name])
        return [pid for (pid,) in cursor.fetchall()]
