"""An inbound ``ask`` through the public endpoint, with a2a-sdk's client on both wires: the
question stays with the party and the counterparty gets the holding reply, again while the party
is consulted, then the reply decided with the party's answer.

The seller has no floor here, so its offline negotiator asks for its limit; its party answers in
this process through the service the inbox and the host API call.
"""

from __future__ import annotations

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import get_data_parts, get_message_text
from a2a.types import GetTaskRequest, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

from agents.models import Agent
from negotiations.models import Negotiation, Turn
from negotiations.services import inbound, parking
from tests.a2a_gateway.conftest import Endpoint, move, proposal, run, user_message
from tests.a2a_gateway.servers import on_wire
from tests.conftest import principal_member

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]
QUESTION = "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"


@pytest.fixture
def asking_seller(seller: Agent) -> Agent:
    """The seller without its floor, and with Idris as its principal, whom it can ask."""
    seller.term_guards = []
    seller.principal = principal_member(seller.tenant, "idris")
    seller.save()
    return seller


def holds(task: Task) -> bool:
    """Whether ``task`` ends with our holding reply: one text part, no move, input-required, and the
    reply artifact carrying the same part."""
    reply = task.history[-1]
    [artifact] = task.artifacts
    return (
        task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        and reply.role == Role.ROLE_AGENT
        and get_message_text(reply) == inbound.HOLDING_TEXT
        and not get_data_parts(reply.parts)
        and (artifact.artifact_id, list(artifact.parts)) == ("negotiator:reply", list(reply.parts))
    )


@pytest.mark.parametrize("wire", WIRES)
def test_the_counterparty_is_held_while_the_party_is_consulted_then_answered_with_its_guidance(
    seller_endpoint: Endpoint, asking_seller: Agent, wire: str
) -> None:
    card = on_wire(seller_endpoint.card(), wire)

    first = seller_endpoint.send(user_message(proposal(800)), card=card)

    assert holds(first)
    negotiation = Negotiation.across_tenants.get(agent=asking_seller, task_id=first.id)
    assert (negotiation.status, negotiation.parked_question) == (Negotiation.Status.WAITING, QUESTION)

    # Another move while the party is consulted: held again, with no second question.
    second = seller_endpoint.send(user_message(proposal(850), task=first), card=card)

    assert holds(second)
    assert [m.message_id for m in second.history[:2]] == [m.message_id for m in first.history]
    assert len(second.history) == 4
    negotiation.refresh_from_db()
    assert (negotiation.status, negotiation.parked_question) == (Negotiation.Status.WAITING, QUESTION)

    parking.negotiation_guidance_give(negotiation=negotiation, answer="At least €1,000 a day.", user=None)
    third = seller_endpoint.send(user_message(proposal(900), task=second), card=card)

    assert third.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    [data] = get_data_parts(third.history[-1].parts)
    assert (data["action"], data["terms"]) == ("propose", {"amount": 1429, "currency": "EUR"})
    assert [a.artifact_id for a in third.artifacts] == ["negotiator:reply"]
    # Our record is the Task's, message by message, holding replies included.
    turns = list(negotiation.turns.order_by("seq"))
    assert [t.raw["messageId"] for t in turns] == [m.message_id for m in third.history]
    assert [(t.side, t.action) for t in turns] == [
        (Turn.Side.THEIRS, "propose"),
        (Turn.Side.OURS, ""),
        (Turn.Side.THEIRS, "propose"),
        (Turn.Side.OURS, ""),
        (Turn.Side.THEIRS, "propose"),
        (Turn.Side.OURS, "propose"),
    ]


def test_the_held_task_reads_the_same_through_get_task(
    seller_endpoint: Endpoint, asking_seller: Agent
) -> None:
    card = seller_endpoint.card()
    held = seller_endpoint.send(user_message(proposal(800)), card=card)

    async def get(http: httpx.AsyncClient) -> Task:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        return await client.get_task(GetTaskRequest(id=held.id))

    assert MessageToDict(run(get)) == MessageToDict(held)


def test_a_counterparty_that_walks_away_while_held_leaves_it_with_the_party_unanswered(
    seller_endpoint: Endpoint, asking_seller: Agent
) -> None:
    held = seller_endpoint.send(user_message(proposal(800)))

    gone = seller_endpoint.send(user_message(move("reject", "Never mind."), task=held))

    assert holds(gone)
    negotiation = Negotiation.across_tenants.get(agent=asking_seller, task_id=held.id)
    assert negotiation.status == Negotiation.Status.WAITING
    assert (negotiation.settlement.outcome, negotiation.settlement.basis) == ("unanswered", "state")
