"""Raw JSON-RPC against the gateway, as a counterparty on the wire sends it: what the caps, auth,
answer-contract and hostile-caller tests share."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from a2a_gateway.models import InboundContext
from agents.models import Agent
from tests.a2a_gateway.conftest import TIMEOUT


def call(
    url: str,
    method: str,
    params: Any,
    *,
    headers: dict[str, str] | None = None,
    address: str = "127.0.0.1",
    version: str | None = "1.0",
) -> httpx.Response:
    """POST one JSON-RPC request to ``url`` from the loopback ``address`` (127.0.0.2 is another
    caller), with ``headers`` and the A2A-Version header ``version`` (None: not sent)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    sent = {**({"A2A-Version": version} if version else {}), **(headers or {})}

    async def post() -> httpx.Response:
        transport = httpx.AsyncHTTPTransport(local_address=address)
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as http:
            return await http.post(url, json=body, headers=sent)

    return asyncio.run(post())


def message(data: dict[str, Any], *, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """``SendMessage`` params: a 1.0 user message with one data part, on ``task`` (JSON) when given."""
    sent: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": data}]}
    if task is not None:
        sent.update(taskId=task["id"], contextId=task["contextId"])
    return {"message": sent}


def task_of(response: httpx.Response) -> dict[str, Any]:
    """The Task a ``SendMessage`` answered with, after checking it was an answer."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert "error" not in body, body
    return dict(body["result"]["task"])


def refusal(response: httpx.Response, *, status: int, code: int) -> str:
    """The message of the JSON-RPC error ``response`` carries, after checking its status and code."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert "result" not in body
    assert body["error"]["code"] == code, body
    return str(body["error"]["message"])


def endpoint_on(origin: str, agent: Agent) -> str:
    return f"{origin}/a2a/{agent.tenant.slug}/{agent.slug}"


def message_params(data: dict[str, Any], *, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """``SendMessage`` params: a 1.0 user message with one data part and a ``contextId`` of its own
    (so a first message sent again is known as such), on ``task`` (a Task's JSON) when given."""
    sent: dict[str, Any] = {
        "messageId": str(uuid.uuid4()),
        "contextId": task["contextId"] if task else str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": data}],
    }
    if task is not None:
        sent["taskId"] = task["id"]
    return {"message": sent}


def tune(agent: Agent, **fields: Any) -> Agent:
    """Set ``fields`` on ``agent`` and save them: the edge reads the agent afresh on every call."""
    for name, value in fields.items():
        setattr(agent, name, value)
    agent.save(update_fields=[*fields, "updated_at"])
    return agent


def inbound_contexts(agent: Agent) -> dict[str, int]:
    """The agent's remembered conversations: contextId → messages counted."""
    return dict(InboundContext.across_tenants.filter(agent=agent).values_list("context_id", "turns"))
