"""Agent-loop fixtures: a chat-completions model on loopback, a host with one operation, and stepping."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.models import Agent, Run, Tool
from agents.services import steps
from tests.chat_server import ChatServer
from tests.conftest import on_chat_model
from tests.loopback import LoopbackServer

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string"}},
    "required": ["order"],
}


class HostServer(LoopbackServer):
    """A host with one operation, ``/lookup``, that answers at once and records what it got."""

    what = "the host"

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, Any]] = []
        self.listen(Starlette(routes=[Route("/lookup", self.lookup, methods=["POST"])]))

    async def lookup(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.received.append(body)
        return JSONResponse({"result": f"Order {body['arguments']['order']} ships Monday."})


@pytest.fixture
def host() -> Iterator[HostServer]:
    with HostServer() as server:
        yield server


@pytest.fixture
def llm_agent(agent: Agent, chat: ChatServer) -> Agent:
    """Tomas's agent on the loopback model: 2 per million input tokens, 8 per million output tokens."""
    return on_chat_model(agent, chat, attempts=2)


@pytest.fixture
def lookup(agent: Agent, host: HostServer) -> Tool:
    return Tool.objects.create(
        tenant=agent.tenant,
        name="lookup",
        description="Look an order up.",
        parameters=LOOKUP_SCHEMA,
        kind=Tool.Kind.HOST,
        url=f"{host.origin}/lookup",
        secret="s3cret",
        timeout=5,
    )


def step(run: Run) -> Run:
    """Take one step in this process, as a worker would."""
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
    run.refresh_from_db()
    return run
