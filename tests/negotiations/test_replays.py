"""Replays a counterparty may try inbound, and prose-only moves that cannot bind by offer id."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agents.models import Agent, Intent
from negotiations import selectors
from negotiations.models import Negotiation, Turn
from negotiations.services import inbound
from negotiations.wire import MoveError, TaskRecord

pytestmark = pytest.mark.django_db


def _send(seller: Agent, move: dict[str, Any], message_id: str | None = None) -> inbound.InboundReply:
    negotiation = Negotiation.across_tenants.filter(agent=seller, task_id="task-1").first()
    prior = selectors.turns_record(negotiation) if negotiation else TaskRecord(state="submitted", history=())
    incoming = {"messageId": message_id or str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": move}]}
    inbound.inbound_check(agent=seller, task_id="task-1" if negotiation else "", incoming=incoming)
    return inbound.inbound_turn(
        agent=seller, task_id="task-1", context_id="ctx-1", prior=prior, incoming=incoming
    )


def _offer(amount: int, offer_id: str) -> dict[str, Any]:
    return {
        "action": "propose",
        "message": f"€{amount}?",
        "terms": {"amount": amount, "currency": "EUR"},
        "offerId": offer_id,
    }


def test_a_replayed_message_id_is_refused_and_changes_nothing(seller: Agent) -> None:
    _send(seller, _offer(800, "o1"), message_id="m1")
    with pytest.raises(MoveError, match=r"^message\.messageId 'm1' was already used in this task$"):
        _send(seller, _offer(900, "o2"), message_id="m1")
    assert Turn.across_tenants.filter(negotiation__agent=seller).count() == 2


def test_an_offer_id_named_twice_is_refused_and_changes_nothing(seller: Agent) -> None:
    _send(seller, _offer(800, "q"))
    with pytest.raises(MoveError, match=r"^move\.offerId 'q' was already used in this task$"):
        _send(seller, _offer(5000, "q"))
    assert Turn.across_tenants.filter(negotiation__agent=seller).count() == 2


def test_a_prose_only_agent_accepts_without_naming_an_offer(seller: Agent) -> None:
    seller.terms = ""
    seller.save()
    reply = _send(
        seller,
        {
            "action": "propose",
            "message": "I can pay €5,000 a day.",
            "offerId": "big",
            "terms": {"amount": 5000, "currency": "EUR"},
        },
    )
    [data] = [p["data"] for p in reply.message["parts"]]
    assert data["action"] == "accept"
    assert "acceptsOfferId" not in data
    assert "terms" not in data


def test_a_first_message_racing_our_own_outbound_is_refused_under_lock(seller: Agent) -> None:
    """Admission let it through a moment before the agent opened its own negotiation."""
    intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell CFO days.")
    Negotiation.objects.create(
        tenant=seller.tenant,
        agent=seller,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="https://buyer.example/a2a/b",
        status=Negotiation.Status.OPEN,
    )
    with pytest.raises(inbound.NegotiationBusy):
        inbound.inbound_turn(
            agent=seller,
            task_id="task-1",
            context_id="ctx-1",
            prior=TaskRecord(state="submitted", history=()),
            incoming={"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": _offer(800, "o1")}]},
        )
    assert not Negotiation.across_tenants.filter(direction=Negotiation.Direction.INBOUND).exists()
    assert not Turn.across_tenants.exists()
