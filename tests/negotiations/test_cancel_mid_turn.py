"""A cancel that lands while an inbound turn runs is a negotiation rule
(:func:`negotiations.services.inbound.inbound_turn_unless_canceled`): the gateway only tells it, once the
turn has committed, whether its stored Task was canceled meanwhile and which messages it holds."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agents.models import Agent
from negotiations.models import Negotiation, Settlement
from negotiations.services import inbound
from negotiations.wire import TaskRecord

pytestmark = pytest.mark.django_db


def opening() -> dict[str, Any]:
    """Their first move, under the seller's floor of 950: the offline negotiator proposes its own."""
    move = {
        "action": "propose",
        "message": "€800?",
        "terms": {"amount": 800, "currency": "EUR"},
        "offerId": "o-1",
    }
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": move}]}


def turn(
    agent: Agent, incoming: dict[str, Any], delivered: frozenset[str] | None
) -> inbound.InboundReply | None:
    asked: list[bool] = []

    def canceled_meanwhile() -> frozenset[str] | None:
        asked.append(Negotiation.across_tenants.filter(agent=agent).exists())
        return delivered

    reply = inbound.inbound_turn_unless_canceled(
        agent=agent,
        task_id="task-1",
        context_id="ctx-1",
        prior=TaskRecord(state="submitted", history=()),
        incoming=incoming,
        canceled_meanwhile=canceled_meanwhile,
    )
    assert asked == [True]  # asked once, after the turn committed
    return reply


def test_a_turn_its_task_kept_gives_its_reply(seller: Agent) -> None:
    reply = turn(seller, opening(), None)

    assert reply is not None
    assert reply.message["parts"][0]["data"]["action"] == "propose"
    negotiation = Negotiation.across_tenants.get(agent=seller)
    assert negotiation.task_state != "canceled"
    assert negotiation.status == Negotiation.Status.OPEN
    assert not Settlement.across_tenants.filter(negotiation=negotiation).exists()


def test_a_cancel_that_landed_meanwhile_ends_the_negotiation_and_drops_the_reply(seller: Agent) -> None:
    incoming = opening()

    reply = turn(seller, incoming, frozenset({incoming["messageId"]}))

    assert reply is None
    negotiation = Negotiation.across_tenants.get(agent=seller)
    assert negotiation.task_state == "canceled"
    assert negotiation.status == Negotiation.Status.SETTLED
    # Our reply was decided and recorded, though it reached no Task: the settlement is on theirs.
    assert negotiation.turns.count() == 2
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    assert (settlement.outcome, settlement.basis, settlement.ended_by) == ("declined", "state", "theirs")
