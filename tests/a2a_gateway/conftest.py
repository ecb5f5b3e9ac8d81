"""Gateway fixtures: the seller's public endpoint on the live stack, and a2a-sdk as the counterparty.

Every call goes over loopback HTTP to the uvicorn process of ``live_stack``,
through a2a-sdk's own client and card resolver or, where the wire shape itself
is under test, raw JSON-RPC over httpx. The tests are synchronous (the ORM
checks run in the test's thread); each network exchange runs in its own
``asyncio.run`` with its own ``httpx.AsyncClient``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_data_message
from a2a.types import AgentCard, Message, Role, SendMessageRequest, Task
from django.db import models
from django.utils import timezone

from a2a_gateway.models import A2ATask
from agents.models import Agent
from agents.services.host_names import new_token
from negotiations.models import Negotiation, Settlement, Turn
from tests.conftest import LiveStack

T = TypeVar("T")
TIMEOUT = 30.0


def proved_host_name(agent: Agent, host: str) -> None:
    """Save ``agent`` on ``host``, proved (as the migration kept host names set before proofs existed);
    the proof itself is tested in tests/agents/test_host_names.py."""
    agent.host_name, agent.host_name_token, agent.host_name_verified_at = host, new_token(), timezone.now()
    agent.save()


def run(make: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """Run ``make(http)`` on a fresh event loop with a fresh httpx client (no A2A-Version header)."""

    async def main() -> T:
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            return await make(http)

    return asyncio.run(main())


@dataclass(frozen=True)
class Endpoint:
    """One agent's public A2A addresses on the live stack."""

    agent: Agent
    url: str  # the JSON-RPC endpoint; the card's base URL

    @property
    def card_url(self) -> str:
        return f"{self.url}/.well-known/agent-card.json"

    def card(self) -> AgentCard:
        """The card, as a2a-sdk's resolver fetches and parses it."""
        return run(lambda http: A2ACardResolver(http, self.url).get_agent_card())

    def send(self, message: Message, *, card: AgentCard | None = None) -> Task:
        """Send ``message`` with a2a-sdk's non-streaming client built from ``card`` (default: ours).

        The client picks the interface from the card: 1.0 when the card has it,
        the 0.3 compat transport when that is all the card offers.
        """
        card = card or self.card()

        async def call(http: httpx.AsyncClient) -> Task:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            events = [event async for event in client.send_message(SendMessageRequest(message=message))]
            assert len(events) == 1, events
            assert events[0].HasField("task"), events[0]
            return events[0].task

        return run(call)

    def rpc(
        self, method: str, params: Any, *, version: str | None = "1.0", request_id: Any = 1
    ) -> httpx.Response:
        """POST one raw JSON-RPC request; ``version`` is the A2A-Version header (None: not sent)."""
        headers = {"A2A-Version": version} if version else {}
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        return run(lambda http: http.post(self.url, json=body, headers=headers))

    def post(self, content: bytes, *, version: str | None = "1.0") -> httpx.Response:
        """POST raw bytes as a JSON-RPC body."""
        headers = {"Content-Type": "application/json", **({"A2A-Version": version} if version else {})}
        return run(lambda http: http.post(self.url, content=content, headers=headers))


def endpoint_of(live_stack: LiveStack, agent: Agent) -> Endpoint:
    return Endpoint(agent=agent, url=f"{live_stack.url}/a2a/{agent.tenant.slug}/{agent.slug}")


@pytest.fixture
def seller_endpoint(live_stack: LiveStack, seller: Agent) -> Endpoint:
    """The seller (floor 950 EUR a day, terms on) at its public endpoint."""
    return endpoint_of(live_stack, seller)


def move(
    action: str,
    message: str,
    *,
    terms: dict[str, Any] | None = None,
    offer_id: str | None = None,
    accepts_offer_id: str | None = None,
) -> dict[str, Any]:
    """A negotiation move as the wire carries it (docs/wire-format.md#moves)."""
    data: dict[str, Any] = {"action": action, "message": message}
    if terms is not None:
        data["terms"] = terms
        data["offerId"] = offer_id or str(uuid.uuid4())
    if accepts_offer_id is not None:
        data["acceptsOfferId"] = accepts_offer_id
    return data


def proposal(amount: int = 800) -> dict[str, Any]:
    """The buyer's opening move: a proposal of ``amount`` EUR a day."""
    return move("propose", f"I can pay €{amount} a day.", terms={"amount": amount, "currency": "EUR"})


def user_message(data: Any, *, task: Task | None = None) -> Message:
    """A 1.0 user message with one data part; on ``task`` (its ids) when given."""
    return new_data_message(
        data,
        role=Role.ROLE_USER,
        task_id=task.id if task else None,
        context_id=task.context_id if task else None,
    )


def counts() -> dict[str, int]:
    """How many rows each table the gateway may write holds."""
    tables: list[type[models.Model]] = [Negotiation, Turn, Settlement, A2ATask]
    return {model.__name__: model._default_manager.count() for model in tables}
